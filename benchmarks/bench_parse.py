"""Speed and memory of `npuperf parse` against `pandas.read_csv` of the same file.

Builds a kernel_details.csv of N rows (default 1,000,000) by replicating the rows of a real
torch_npu kernel table (each replica gets its own task id and start time, as a longer run
would), then, in the same run and each in a fresh process:

  1. `pandas.read_csv(file)`                          -> the baseline
  2. `npuperf parse --profile file --db <tmp>`

and prints both wall times, their ratio and the peak RSS of each process.
Goal (issue 2): parse within 3x of read_csv, peak memory under 2 GiB.

    python benchmarks/bench_parse.py [--rows N] [--source kernel_details.csv] [--keep DIR]
"""

from __future__ import annotations

import argparse
import csv
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from tests.real_samples import REALDATA  # noqa: E402

DEFAULT_SOURCE = REALDATA / "kernel_details" / "mstt_advisor_compute_advice_2025_kernel_details.csv"


def build_file(source: Path, rows: int, target: Path) -> None:
    with open(source, encoding="utf-8-sig", newline="") as handle:
        reader = csv.reader(handle)
        header = next(reader)
        template = [r for r in reader if r]
    task = header.index("Task ID") if "Task ID" in header else None
    start = header.index("Start Time(us)") if "Start Time(us)" in header else None
    with open(target, "w", encoding="utf-8", newline="") as out:
        writer = csv.writer(out, lineterminator="\n")
        writer.writerow(header)
        t0 = 1736413971000000.0
        for i in range(rows):
            row = list(template[i % len(template)])
            if task is not None:
                row[task] = str(i)
            if start is not None:
                row[start] = f"{t0 + i * 3.25:.3f}\t"
            writer.writerow(row)


def run_measured(argv: list[str], stdout: Path | None = None) -> tuple[float, float]:
    """(wall seconds, peak RSS in MiB) of a child process; its output kept in `stdout`."""
    wall, rss, _ = run_timed(argv, stdout)
    return wall, rss


def run_timed(argv: list[str], stdout: Path | None = None) -> tuple[float, float, float]:
    """`run_measured` and the CPU seconds (user + system) the process and the children it
    waited for spent: on a shared host the wall time carries the others' load, the CPU time
    much less of it."""
    begin = time.perf_counter()
    with open(stdout or os.devnull, "wb") as out:
        proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.PIPE)
        _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - begin
    proc.returncode = os.waitstatus_to_exitcode(status)
    err = proc.stderr.read().decode() if proc.stderr else ""
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(argv[:3])} ... failed ({proc.returncode}):\n{err}")
    return wall, usage.ru_maxrss / 1024, usage.ru_utime + usage.ru_stime


def compare(baseline: tuple[str, list[str]], measured: tuple[str, list[str]]
            ) -> tuple[float, float, float, float]:
    """Run both commands, each in a fresh process, print their wall time and peak RSS; returns
    (baseline wall, baseline RSS, measured wall, measured RSS)."""
    width = max(len(baseline[0]), len(measured[0]))
    figures = []
    for label, argv in (baseline, measured):
        wall, rss = run_measured(argv)
        print(f"{label:<{width}} : {wall:6.2f} s   peak RSS {rss:7.0f} MiB")
        figures += [wall, rss]
    return tuple(figures)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--source", type=Path, default=DEFAULT_SOURCE,
                        help="a real kernel_details.csv whose rows are replicated")
    parser.add_argument("--keep", type=Path, help="build the file here and keep it")
    args = parser.parse_args()
    if not args.source.is_file():
        print(f"no source table at {args.source}; pass --source", file=sys.stderr)
        return 2
    work = Path(tempfile.mkdtemp(prefix="bench_parse_"))
    try:
        table = (args.keep or work) / "kernel_details.csv"
        table.parent.mkdir(parents=True, exist_ok=True)
        t = time.perf_counter()
        build_file(args.source, args.rows, table)
        size = table.stat().st_size / 2**20
        print(f"built {table} : {args.rows:,} rows, {size:.0f} MiB in {time.perf_counter() - t:.1f}s")
        baseline = [sys.executable, "-c", f"import pandas; pandas.read_csv({str(table)!r})"]
        parse = [sys.executable, "-m", "pytest_npuperf.cli", "parse", "--quiet",
                 "--profile", str(table), "--db", str(work / "db")]
        read_wall, _, parse_wall, parse_rss = compare(("pandas.read_csv", baseline),
                                                      ("npuperf parse", parse))
        ratio = parse_wall / read_wall
        print(f"ratio parse/read_csv = {ratio:.2f}x (goal <= 3x); "
              f"parse peak {parse_rss / 1024:.2f} GiB (goal < 2 GiB)")
        return 0
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
