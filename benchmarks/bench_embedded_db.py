"""The whole embedded default database under `pytest bench`: time and cases (goal < 10 min on
a 2-core CPU), per kernel type, with an estimate for the cases that were skipped.

    python benchmarks/bench_embedded_db.py [--device cpu|cuda|npu] [--workers N]

Runs `pytest bench` on the embedded database (pytest_npuperf/data/...) with the default
sampling policy in a fresh process (results go to a temporary directory; the database is not
touched), then reads the run JSON.
Skipped cases (kernel types without a replay here) are estimated two ways: at the mean wall
time of the measured cases, and at the sampling budget per case (an upper bound for kernels
whose calls are shorter than the budget).
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
from collections import defaultdict
from pathlib import Path

from timing import timed

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from pytest_npuperf.harness.options import DEFAULT_DB  # noqa: E402
from pytest_npuperf.measure.policy import SamplingPolicy  # noqa: E402

GOAL_S = 600.0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--workers", type=int, default=0, help="xdist workers (0: serial)")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="bench_embedded_"))
    try:
        argv = [sys.executable, "-m", "pytest", "bench", "-q", "-p", "no:cacheprovider",
                "--npuperf-db", str(DEFAULT_DB), "--npuperf-out", str(work),
                "--npuperf-device", args.device]
        if args.workers:
            argv += ["-n", str(args.workers)]
        elapsed = timed(argv, ROOT)
        report = json.loads(sorted((work / "reports").glob("run_*.json"))[-1].read_text())
    finally:
        shutil.rmtree(work, ignore_errors=True)
    per_type: dict[str, list[float]] = defaultdict(list)
    skipped: dict[str, int] = defaultdict(int)
    for case in report["cases"]:
        if case["status"] == "skipped":
            skipped[case["kernel_type"]] += 1
        else:
            per_type[case["kernel_type"]].append(case["wall_s"] or 0.0)
    totals = report["totals"]
    print(f"pytest bench, whole embedded database, device {args.device}, "
          f"{args.workers or 'no'} xdist workers: {elapsed:.1f} s (process), "
          f"{totals['cases']} cases, by status {totals['by_status']}")
    for kernel_type, walls in sorted(per_type.items(), key=lambda kv: -sum(kv[1])):
        print(f"  {kernel_type:32s} {len(walls):3d} cases {sum(walls):7.1f} s")
    if skipped:
        measured = [w for walls in per_type.values() for w in walls]
        mean = sum(measured) / max(len(measured), 1)
        count = sum(skipped.values())
        budget = SamplingPolicy().budget_s
        parallel = max(args.workers, 1)
        print(f"skipped {count} cases ({', '.join(f'{k} {n}' for k, n in sorted(skipped.items()))})"
              f": about +{count * mean / parallel:.0f} s at the mean case wall time "
              f"({mean:.2f} s), at most about +{count * (budget + 0.5) / parallel:.0f} s at "
              f"the sampling budget ({budget:g} s + build)")
    print(f"goal: < {GOAL_S:.0f} s on a 2-core CPU")
    return 0


if __name__ == "__main__":
    sys.exit(main())
