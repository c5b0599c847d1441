"""The msprof wrap, the parts without pytest: which profiler a session uses, the msprof
command lines, the hand-off between the child that measures and the parent that writes.

The msprof command line (CANN "Profiling" guide, `msprof [options] <app>`; CANN 8.x/9.x
pages atlasprofiling_16_0011 "采集AI任务运行性能数据" and atlasprofiling_16_0015 "采集msproftx
数据", and Ascend/msprof docs/*/user_guide/msprof_parsing_instruct.md for the export):
- `--output=<dir>`: where the PROF_* directories go;
- `--task-time=l1`: kernel execution times *and* the kernels' basic information (shapes,
  dtypes, formats) in op_summary (`l0` has no shapes; `on` equals `l1`);
- `--ai-core=on --aic-metrics=PipeUtilization`: the AI Core / vector pipe counters that fill
  the 25 counter columns (PipeUtilization is the documented default set);
- `--msproftx=on`: collect mstx/msproftx ranges (off by default), exported as msprof_tx_*.csv;
- the application and its arguments last (the documented "method 1");
- `msprof --export=on --output=<PROF dir>`: parse and export a PROF directory that has no
  `mindstudio_profiler_output` yet (an unparsed one is parsed first, per the export docs);
  `msprof --parse=on` re-parses after an interrupted collection.
msprof parses and exports at the end of a collection by itself; the export is run only when
that did not happen.
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..db.errors import NpuperfError, os_error
from .profiler_mode import CHILD_ENV as CHILD_ENV
from .profiler_mode import find_msprof as find_msprof
from .result import CaseResult

HANDOFF_NAME = "npuperf_handoff.jsonl"
HANDOFF_SCHEMA = "npuperf-handoff/1"
MSPROF_SWITCHES = ("--task-time=l1", "--ai-core=on", "--aic-metrics=PipeUtilization",
                   "--msproftx=on")


def msprof_command(msprof: str, run_dir: Path, application: list[str]) -> list[str]:
    return [msprof, f"--output={run_dir}", *MSPROF_SWITCHES, *application]


def export_command(msprof: str, prof_dir: Path) -> list[str]:
    return [msprof, "--export=on", f"--output={prof_dir}"]


def run_export(msprof: str, prof_dir: Path) -> str | None:
    """Export a PROF directory's summaries; None when it worked, else why (one line)."""
    try:
        done = subprocess.run(export_command(msprof, prof_dir), capture_output=True, text=True,
                              check=False)
    except OSError as exc:
        return f"msprof --export could not run: {exc}"
    if done.returncode != 0:
        tail = " ".join((done.stderr or done.stdout or "").split())[-300:]
        return f"msprof --export=on exited with status {done.returncode}: {tail}"
    return None


# -- the hand-off -------------------------------------------------------------------------------

@dataclass
class Handoff:
    """What the child measured: its session (where to write) and every case's result."""

    session: dict[str, Any] = field(default_factory=dict)
    results: list[CaseResult] = field(default_factory=list)
    path: Path | None = None


_IDENTITY = ("case_id", "nodeid", "kernel_type", "file", "signature")
_DEFAULTS = {k: v for k, v in CaseResult(*([""] * len(_IDENTITY))).to_dict().items()
             if k not in _IDENTITY and k != "timestamp"}


def _result_line(result: CaseResult) -> str:
    """A case's result without its default-valued fields (10^5 cases travel through here),
    its samples (the profile gives them; the statistics stay as a fallback) or traceback."""
    data = {k: v for k, v in result.to_dict().items()
            if k not in ("samples", "detail") and _DEFAULTS.get(k, _DEFAULTS) != v}
    return json.dumps({"result": data}, allow_nan=False, ensure_ascii=False)


def write_handoff(path: Path, session: dict[str, Any], results: list[CaseResult]) -> None:
    """One header line, then one line per case; written whole, then renamed into place."""
    path = Path(path)
    temp = path.with_name(path.name + ".tmp")
    try:
        with open(temp, "w", encoding="utf-8") as handle:
            handle.write(json.dumps({"schema": HANDOFF_SCHEMA, "session": session},
                                    allow_nan=False, ensure_ascii=False, default=str) + "\n")
            for result in results:
                handle.write(_result_line(result) + "\n")
        os.replace(temp, path)
    except OSError as exc:
        raise os_error(path, exc, "cannot write the hand-off") from None


def _lines(path: Path) -> Iterator[tuple[int, dict]]:
    try:
        with open(path, encoding="utf-8") as handle:
            for number, line in enumerate(handle, start=1):
                if line.strip():
                    try:
                        yield number, json.loads(line)
                    except json.JSONDecodeError as exc:
                        raise NpuperfError(f"{path}: line {number} is not JSON ({exc.msg}); the "
                                           f"hand-off is damaged") from None
    except OSError as exc:
        raise os_error(path, exc) from None


# Fields whose few distinct texts repeat on every line: one string object each, not one per
# case (10^5 results stay in memory through attribution and backfill).
_REPEATED = ("kernel_type", "file", "device", "stack", "method", "statistic", "status",
             "timestamp", "implementation", "memory_level", "bound_by")


def _shared(data: dict, seen: dict[str, str]) -> dict:
    for key in _REPEATED:
        value = data.get(key)
        if isinstance(value, str):
            data[key] = seen.setdefault(value, value)
    profile = data.get("profile")
    if isinstance(profile, dict):
        if profile.get("marker") == data.get("case_id"):
            profile["marker"] = data["case_id"]
        launches = profile.get("launches")
        if isinstance(launches, list):
            profile["launches"] = [seen.setdefault(t, t) if isinstance(t, str) else t
                                   for t in launches]
    return data


def read_handoff(path: Path) -> Handoff:
    handoff = Handoff(path=Path(path))
    seen: dict[str, str] = {}
    for number, data in _lines(Path(path)):
        if number == 1:
            if data.get("schema") != HANDOFF_SCHEMA:
                raise NpuperfError(f"{path}: not an npuperf hand-off (schema "
                                   f"{data.get('schema')!r})")
            handoff.session = dict(data.get("session") or {})
        elif isinstance(data.get("result"), dict):
            handoff.results.append(CaseResult.from_dict(_shared(data["result"], seen)))
    return handoff


def find_handoffs(path: Path) -> list[Path]:
    """Hand-off files at or below `path` (a run directory of an earlier wrapped run)."""
    path = Path(path)
    if path.is_file():
        return [path] if path.name == HANDOFF_NAME else []
    return sorted(p for p in path.rglob(HANDOFF_NAME) if p.is_file())
