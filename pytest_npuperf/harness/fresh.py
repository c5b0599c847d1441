"""A case measured again in fresh processes: what a SLOWER verdict must survive before it fails.

A process carries state its measurements share: where the allocator put the weights, which
pages back them, the thread pool and the cores it got, the cache lines its earlier cases
left. Two processes of the same build differ by more than two measurements in one process,
so asv measures each benchmark in several processes; here a case found SLOWER is measured
again in `--npuperf-confirm` fresh pytest processes, each replaying only that row with the
session's settings, and the fastest of all its measurements is judged (harness/measurer.py).

Each process runs the same test function on a database of that one row (a copy of its cells
in a temporary directory laid out as the source is), with the same device, threads, method,
cache state, implementation and sampling policy, the invocation's `-p` plugins (conftest
files load as they did), no baseline, history, figures or model profile, and reports its
result in its run JSON, which is read back here.
"""

from __future__ import annotations

import csv
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

from ..db.layout import FRAMEWORK_DIR, device_of
from ..measure.clock import RUN_ID_ENV
from ..profiling.mode import CHILD_ENV

if TYPE_CHECKING:
    from ..measure.result import CaseResult
    from ..replay.cases import CaseRef
    from .context import RunContext

# Cases per measuring process confirmed in fresh processes (a few seconds each): beyond this,
# a regression is broad, and the others are measured again in the process itself.
FRESH_LIMIT = 10
STARTUP_S = 120.0  # what a fresh process may take beyond the case itself (imports, torch)
_CHILD_ONLY = (RUN_ID_ENV, CHILD_ENV, "PYTEST_XDIST_WORKER", "PYTEST_XDIST_WORKER_COUNT",
               "PYTEST_XDIST_TESTRUNUID", "PYTEST_CURRENT_TEST")


def plugin_args(args: list[str]) -> list[str]:
    """The `-p NAME` options of an invocation (`-pNAME` and `-p=NAME` too), as `-p NAME`."""
    found: list[str] = []
    for index, arg in enumerate(args):
        if arg == "-p" and index + 1 < len(args):
            found += ["-p", args[index + 1]]
        elif arg.startswith("-p") and len(arg) > 2 and not arg.startswith("--"):
            found += ["-p", arg[2:].lstrip("=")]
    return found


def test_function(nodeid: str) -> str:
    """`file.py::Class::test` of a case's node id, without its parameters: the one-row
    database makes it one case."""
    return nodeid.split("[", 1)[0]


def settings_args(context: RunContext, ref: CaseRef) -> list[str]:
    """The session's measuring settings, as options of the fresh process."""
    settings, policy, backend = context.settings, context.settings.policy, context.backend
    args = ["--npuperf-device", backend.kind, "--npuperf-device-name",
            backend.database_device(), "--npuperf-method", context.method,
            "--npuperf-profiler", "none", "--npuperf-cache", settings.cache,
            "--npuperf-impl", ref.impl or context.impl,
            "--npuperf-warmup", str(policy.warmup),
            "--npuperf-warmup-time", repr(policy.warmup_time_s),
            "--npuperf-min-samples", str(policy.min_samples),
            "--npuperf-max-samples", str(policy.max_samples),
            "--npuperf-budget", repr(policy.budget_s), "--npuperf-min-time", repr(policy.min_time_s),
            "--npuperf-precision", repr(policy.precision), "--npuperf-statistic", policy.statistic,
            "--npuperf-preempted", "reject" if policy.reject_preempted else "keep"]
    if backend.kind == "cpu":
        args += ["--npuperf-threads", str(context.threads)]
    if policy.flush_l2:
        args.append("--npuperf-flush-l2")
    if settings.case_timeout_s:
        args += ["--npuperf-case-timeout", repr(settings.case_timeout_s)]
    return args


def one_row_database(root: Path, source: Path, device: str, file: str,
                     row: dict[str, str]) -> Path:
    """A database of `row` alone under `root`, named as the source is."""
    version = source.name or "v"
    db = root / (device_of(source) or device) / FRAMEWORK_DIR / version
    db.mkdir(parents=True)
    with open(db / file, "w", encoding="utf-8", newline="") as handle:
        writer = csv.writer(handle, lineterminator="\n")
        writer.writerow(list(row))
        writer.writerow(list(row.values()))
    return db


def measure_fresh(context: RunContext, ref: CaseRef, nodeid: str, processes: int
                  ) -> tuple[list[CaseResult], str]:
    """The case measured once in each of `processes` fresh processes, one after the other:
    (their results, "" or what went wrong, said in a line)."""
    from ..report.runjson import case_result

    config = context.config
    root = Path(tempfile.mkdtemp(prefix="npuperf-confirm-"))
    results: list[CaseResult] = []
    try:
        db = one_row_database(root / "db", context.destination.source,
                              context.backend.database_device(), ref.file, context.row(ref))
        command = [sys.executable, "-m", "pytest", test_function(nodeid), "-q",
                   "-p", "no:cacheprovider", "--rootdir", str(config.rootpath),
                   *(["-c", str(config.inipath)] if config.inipath else []),
                   *plugin_args([str(a) for a in config.invocation_params.args]),
                   *(["-n", "0"] if config.pluginmanager.hasplugin("xdist") else []),
                   "--npuperf-db", str(db), "--npuperf-history", "none",
                   "--npuperf-table", "none", "--npuperf-progress", "none",
                   "--npuperf-model-profile", "off", "--npuperf-no-figures",
                   "--npuperf-confirm", "0", "--npuperf-update-mode", "all",
                   # empty: none, whatever the ini file says (a shard could leave the row out)
                   "--npuperf-baseline=", "--npuperf-shard=", "--npuperf-resume=",
                   *settings_args(context, ref)]
        env = {k: v for k, v in os.environ.items() if k not in _CHILD_ONLY}
        timeout = STARTUP_S + 4 * context.settings.policy.budget_s \
            + (context.settings.case_timeout_s or 0.0)
        for index in range(processes):
            out = root / f"out{index}"
            try:
                done = subprocess.run([*command, "--npuperf-out", str(out)],
                                      cwd=config.rootpath, env=env, capture_output=True,
                                      text=True, timeout=timeout, check=False)
            except (OSError, subprocess.SubprocessError) as exc:
                return results, f"a fresh process could not run: {exc}"
            found = _case_of(out, ref)
            if found is None:
                tail = " ".join((done.stdout + done.stderr).split()[-40:])
                return results, (f"a fresh process reported no result (exit {done.returncode}): "
                                 f"{tail}")
            result = case_result(found)
            result.case_id, result.nodeid, result.row = ref.case_id, nodeid, ref.row_number
            results.append(result)
        return results, ""
    finally:
        shutil.rmtree(root, ignore_errors=True)


def _case_of(out: Path, ref: CaseRef) -> dict | None:
    """The case a fresh process's run JSON holds for `ref`, if any."""
    runs = sorted((out / "reports").glob("run_*.json"))
    if not runs:
        return None
    try:
        cases = json.loads(runs[-1].read_text(encoding="utf-8")).get("cases") or []
    except (OSError, ValueError):
        return None
    return next((c for c in cases if isinstance(c, dict)
                 and c.get("kernel_type") == ref.kernel_type), None)
