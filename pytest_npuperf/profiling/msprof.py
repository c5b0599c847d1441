"""The msprof command lines: the collection that wraps a pytest run, and the export of a PROF
directory (the hand-off between the child that measures and the parent that writes is in
handoff.py, which profiler a session uses in mode.py).

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

import subprocess
from pathlib import Path

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
