"""A-A self-check: the same selection measured twice, with the same settings, in two fresh
processes writing to separate output directories; prints each case's drift of the stored
value (the statistic in Average Duration(us)) and the median |drift|.

Goal: median |drift| <= 3 % on the 2-core CPU for `-k MatMul`, <= 1 % on a GPU.

    python benchmarks/bench_aa.py                      # -k MatMul on the embedded database
    python benchmarks/bench_aa.py -k RmsNorm --device cuda
    python benchmarks/bench_aa.py -- --npuperf-threads 1   # anything after -- goes to pytest

Noisy cases are compared too (their value is what would have been stored); they are counted
apart, since on a busy machine they are what drifts.
"""

from __future__ import annotations

import shutil
import sys
import tempfile
from pathlib import Path

from replay_runs import MEASURED, drifts, fmt_pct, median, quantile, run_bench, selection_args, write_out

GOALS = {"cpu": 0.03, "cuda": 0.01, "npu": 0.01}


def main(argv: list[str] | None = None) -> int:
    args = selection_args(__doc__, argv)
    work = Path(tempfile.mkdtemp(prefix="bench_aa_"))
    try:
        common = ["-k", args.keyword, "--npuperf-device", args.device, *args.pytest_args]
        first = run_bench("A", work / "a", *common)
        second = run_bench("B", work / "b", *common)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return report(first, second, args.keyword)


def report(first, second, keyword: str) -> int:
    drift = drifts(first.values(), second.values())
    if not drift:
        print("no case was measured in both runs")
        return 1
    kind = first.report["session"]["device"].get("kind", "?")
    name = first.report["session"]["device"].get("name", "?")
    width = max(len(cid) for cid in drift)
    print(f"{'case':<{width}}  {'A (us)':>12}  {'B (us)':>12}  {'drift':>9}  status A/B")
    for cid, value in drift.items():
        a, b = first.cases[cid], second.cases[cid]
        print(f"{cid:<{width}}  {a['value']:>12.3f}  {b['value']:>12.3f}  {fmt_pct(value):>9}"
              f"  {a['status']}/{b['status']}")
    absolute = [abs(v) for v in drift.values()]
    quiet = [abs(v) for cid, v in drift.items()
             if first.cases[cid]["status"] == second.cases[cid]["status"] == "ok"]
    goal = GOALS.get(kind)
    print()
    print(f"A-A on {kind} ({name}), -k {keyword!r}: {len(drift)} cases measured in both runs "
          f"({len(quiet)} ok in both)")
    for run in (first, second):
        s = run.summary()
        print(f"  run {s['label']}: {s['measured']} measured, {s['noisy']} noisy, "
              f"wall {s['wall_s']:.1f} s (external {s['external_wall_s']:.1f} s), "
              f"duty cycle {s['duty_cycle']:.2f}")
    verdict = "" if goal is None else (
        f" (goal <= {100 * goal:.0f} %: {'met' if median(absolute) <= goal else 'NOT met'})")
    print(f"median |drift| {100 * median(absolute):.2f} %{verdict}; p90 "
          f"{100 * quantile(absolute, 0.9):.2f} %; max {100 * max(absolute):.2f} %")
    if quiet and len(quiet) < len(absolute):
        print(f"median |drift| of cases ok in both runs: {100 * median(quiet):.2f} %")
    # A whole run slower or faster (the host's speed moved between the runs) shows as a
    # signed median near the absolute one, and in the host reference loop timed around
    # every CPU case (reference_us).
    host = drifts({c: first.cases[c]["reference_us"] for c in drift
                   if first.cases[c].get("reference_us")},
                  {c: second.cases[c]["reference_us"] for c in drift
                   if second.cases[c].get("reference_us")})
    print(f"signed median drift {fmt_pct(median(list(drift.values())))}"
          + (f"; host reference loop B against A: {fmt_pct(median(list(host.values())))}"
             if host else ""))
    path = write_out("bench_aa.json", {
        "device": first.report["session"]["device"], "keyword": keyword,
        "runs": [first.summary(), second.summary()],
        "cases": {cid: {"a": first.cases[cid]["value"], "b": second.cases[cid]["value"],
                        "drift": v, "status": [first.cases[cid]["status"],
                                               second.cases[cid]["status"]]}
                  for cid, v in drift.items()},
        "median_abs_drift": median(absolute), "p90_abs_drift": quantile(absolute, 0.9),
        "median_abs_drift_ok": median(quiet) if quiet else None, "goal": goal,
        "measured_statuses": list(MEASURED)})
    if path:
        print(f"full results: {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
