"""Budgets hold on large rows (issue 23, item 4): `--npuperf-budget` bounds each case's wall
time, its inputs and warm-up included, and memory stays bounded across a session of large
cases (each case's inputs freed before the next one's are built).

Builds, in a temporary directory (not timed), a grid-extended database: `npuperf grid` rows of
the kernel types given (default RmsNorm and SwiGlu, the rows of Llama-3-70B and DeepSeek-V3,
up to hundreds of MB of inputs each), then runs `pytest bench` on it in a fresh process with
`--npuperf-budget`, and prints from its run JSON: each case's wall time against the budget
(median, worst, the cases past it and what their notes say), the statuses, the largest input
set, and the session's peak RSS (the process's own high-water mark, read by a wrapper).

    python benchmarks/bench_budget.py [--kernels RmsNorm,SwiGlu] [--rows 30] [--budget 1.0]
                                      [-- PYTEST OPTIONS]
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from replay_runs import ROOT, grid_database, median, quantile

# Runs the command and prints its peak RSS (KiB) last: the high-water mark of the child alone.
WRAPPER = ("import resource, subprocess, sys\n"
           "code = subprocess.run(sys.argv[1:]).returncode\n"
           "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)\n"
           "sys.exit(code)\n")


def run(work: Path, db: Path, budget: float, extra: list[str]) -> tuple[dict, float, int]:
    out = work / "out"
    argv = [sys.executable, "-c", WRAPPER, sys.executable, "-m", "pytest", "bench", "-q",
            "-p", "no:cacheprovider", "--npuperf-db", str(db), "--npuperf-out", str(out),
            "--npuperf-budget", str(budget), "--npuperf-table", "none",
            "--npuperf-model-profile", "off", *extra]
    start = time.perf_counter()
    done = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=3600)
    wall = time.perf_counter() - start
    reports = sorted((out / "reports").glob("run_*.json"))
    if done.returncode not in (0, 1) or not reports:
        raise SystemExit(f"pytest bench failed ({done.returncode}):\n{done.stdout[-3000:]}\n"
                         f"{done.stderr[-3000:]}")
    peak_kib = int(done.stdout.strip().splitlines()[-1])
    return json.loads(reports[-1].read_text()), wall, peak_kib


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kernels", default="RmsNorm,SwiGlu")
    parser.add_argument("--rows", type=int, default=30, help="grid rows per kernel type")
    parser.add_argument("--budget", type=float, default=1.0)
    parser.add_argument("pytest_args", nargs="*")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="bench_budget_"))
    try:
        db = grid_database(work, args.kernels, args.rows)
        report, wall, peak_kib = run(work, db, args.budget, args.pytest_args)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    cases = report["cases"]
    walls = [c["wall_s"] for c in cases if c.get("wall_s")]
    over = [c for c in cases if "budget" in (c.get("note") or "")]
    largest = max(cases, key=lambda c: c.get("bytes") or 0)
    statuses = report["totals"]["by_status"]
    print(f"pytest bench on {len(cases)} grid rows of {args.kernels}, --npuperf-budget "
          f"{args.budget:g} s: {wall:.1f} s wall; statuses {statuses}")
    print(f"  case wall: median {median(walls):.2f} s, p90 {quantile(walls, 0.9):.2f} s, "
          f"worst {max(walls, default=0):.2f} s; {len(over)} case(s) past the budget")
    for case in sorted(over, key=lambda c: -c["wall_s"])[:5]:
        print(f"    {case['case_id']}: {case['wall_s']:.2f} s: {case['note']}")
    print(f"  largest case: {largest['case_id']} ({(largest.get('bytes') or 0) / 2**20:.0f} "
          f"MiB touched per call)")
    print(f"  peak RSS of the session: {peak_kib / 2**20:.2f} GiB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
