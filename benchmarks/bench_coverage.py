"""Does measuring where `npuperf coverage` says make the simulator's interpolation better?

MatMulV2 rows over M_GRID for three (N, K) pairs of a real model (Qwen3-32B at TP 16: the
q/o projections' (320, 5120), (5120, 320) and the FFN's (1600, 5120)) are replayed on this
machine (`pytest bench`); then `npuperf coverage` (msmodeling's density standard, leave-one-out
with the simulator's interpolation) proposes the next rows, `npuperf grid --fill` adds at most
--share of the measured rows, `pytest bench --npuperf-update-mode missing-only` measures them,
and again, --rounds times. After each round: the GEMM leave-one-out error (median, p90, rows
above 50 %) of the round-0 rows, one holdout for every round (as msmodeling's density ablation
compares densities), and of all rows, overall and along M. Goals: the p90 falls after each
round; the M-axis p90 is below AIConfigurator's GEMM p90 of 15.6 % (its leave-one-out over a
GPU GEMM database).

    python benchmarks/bench_coverage.py [--max-m 4096] [--pairs 3] [--rounds 2] [--share 0.2]
        [--keep DIR] [-- PYTEST_ARGS]

Shrink it with --max-m (the largest M replayed: 1024 takes about a third of the time) and
--pairs; the replays take most of the wall time (load-dependent: print `cat /proc/loadavg`).
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from replay_runs import DEVICE_DIR, ROOT, run_bench, write_out

from pytest_npuperf.coverage.fill import run_fill
from pytest_npuperf.coverage.loo import ErrorStats
from pytest_npuperf.coverage.report import build_report, write_outputs
from pytest_npuperf.grid.grids import M_GRID

STANDARD = ROOT / "tests" / "data" / "density_standard" / "msmodeling-84fec85" / \
    "axis_collection_density.yaml"
PAIRS = ((320, 5120), (5120, 320), (1600, 5120))  # (N, K): Qwen3-32B, TP 16
AICONFIGURATOR_GEMM_P90 = 0.156

CONFIG = """\
version: 1
rows: 0
seed: 0
max_hbm_gb: 0
grids:
  BENCH_M: {m}
  BENCH_NK: {nk}
patterns:
  matmul:
    description: torch.mm(a, b.t()) over M for the benchmark's (N, K) pairs
    iterators:
      M: BENCH_M
      "N, K": BENCH_NK
    inputs: ["(M, K)", "(N, K)"]
    outputs: ["(M, N)"]
assignments:
  MatMulV2: matmul
"""


def loadavg() -> str:
    try:
        return Path("/proc/loadavg").read_text().split(" ", 3)[:3].__str__()
    except OSError:
        return "?"


def build_source(root: Path, max_m: int, pairs: int) -> Path:
    source = root / "source" / DEVICE_DIR
    config = root / "bench_coverage_grid.yaml"
    config.write_text(CONFIG.format(m=json.dumps([m for m in M_GRID if m <= max_m]),
                                    nk=json.dumps([list(p) for p in PAIRS[:pairs]])))
    subprocess.run([sys.executable, "-m", "pytest_npuperf.cli", "grid", "--db", str(source),
                    "--config", str(config), "--quiet"], check=True, cwd=ROOT,
                   capture_output=True)
    return source


def replay(source: Path, out: Path, label: str, extra: list[str], missing_only: bool) -> float:
    args = ["--npuperf-db", str(source), "-k", "MatMulV2", *extra]
    if missing_only:
        args += ["--npuperf-update-mode", "missing-only"]
    start = time.perf_counter()
    run = run_bench(label, out, *args, timeout_s=3600)
    print(f"  {label}: {run.totals['cases']} case(s) replayed in "
          f"{time.perf_counter() - start:.0f} s (load {loadavg()})", flush=True)
    return time.perf_counter() - start


def measured_copy(out: Path) -> Path:
    copies = sorted(out.glob(f"CPU_*/{DEVICE_DIR.parent.name}/{DEVICE_DIR.name}")) + \
        sorted(out.glob(f"*/{DEVICE_DIR.parent.name}/{DEVICE_DIR.name}"))
    if not copies:
        raise SystemExit(f"no measured copy of the database under {out}")
    return copies[0]


def noisy_as_measured(copy: Path, target: Path, taken: dict[str, str]) -> tuple[Path, int]:
    """A copy of the measured database where the rows the replay judged noisy (a busy host)
    carry their fastest sample in `Average Duration(us)`, which the product leaves empty for
    them (other processes only ever add time to a CPU sample); and how many rows that took.
    A noisy row is measured again by every later replay (it has no value): the value first
    taken for it (`taken`, by its shapes) is kept, so that rounds differ by their rows only."""
    from pytest_npuperf.db.table import read_table, write_table

    if target.exists():
        shutil.rmtree(target)
    shutil.copytree(copy, target)
    path = target / "MatMulV2.csv"
    frame = read_table(path)
    empty = frame["Average Duration(us)"].str.strip() == ""
    noisy = frame["MicroBench Status"].str.startswith("noisy") & empty
    for i in frame.index[noisy]:
        shapes = frame.at[i, "Input Shapes"]
        taken.setdefault(shapes, frame.at[i, "MicroBench Min Duration(us)"])
        frame.at[i, "Average Duration(us)"] = taken[shapes]
    write_table(frame, path)
    return target, int(noisy.sum())


def _key(point) -> tuple:
    return tuple(sorted(point.query.axes.items()))


def figures(copy: Path, report_path: Path, holdout: set | None) -> dict:
    """The round's figures; `holdout`: the rows of round 0 (None: this is round 0), whose
    leave-one-out error is the one compared across rounds (msmodeling's ablation compares
    densities on one common holdout: new rows sit where the curve bends, and scored
    themselves they would move the p90 for another reason than the density)."""
    report = build_report(copy, standard=STANDARD)
    write_outputs(report, json_path=report_path)
    loo = report.loo["MatMulV2"]
    if holdout is None:
        holdout = {_key(p) for p in report.points.kernels["MatMulV2"].points}
    same = ErrorStats.of([h.error for h in loo.holdouts if _key(h.point) in holdout])
    same_m = ErrorStats.of([h.error for h in loo.holdouts
                            if _key(h.point) in holdout and h.estimate.axes == ("M",)])
    stats = loo.stats
    m_axis = loo.by_axes().get("M")
    density = report.density["MatMulV2"]
    m_density = next(a for a in density.axes if a.axis.name == "M")
    return {"rows": report.points.kernels["MatMulV2"].rows, "holdout": holdout,
            "measured": report.points.kernels["MatMulV2"].measured,
            "same_median": same.median, "same_p90": same.p90, "same_n": same.count,
            "same_over_50": same.over_50, "same_m_p90": same_m.p90,
            "median": stats.median, "p90": stats.p90, "over_50": stats.over_50,
            "n": stats.count, "m_p90": m_axis.p90 if m_axis else None,
            "m_median": m_axis.median if m_axis else None, "m_n": m_axis.count if m_axis else 0,
            "m_gaps": len(m_density.gaps), "proposals": len(report.proposals),
            "worst": [(h.point.query.axes["M"], h.point.query.axes["N"],
                       round(100 * h.error, 1)) for h in loo.worst(3)]}


def pct(value: float | None) -> str:
    return "-" if value is None or not math.isfinite(value) else f"{100 * value:.2f} %"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--max-m", type=int, default=4096, help="largest M replayed")
    parser.add_argument("--pairs", type=int, default=3, choices=(1, 2, 3),
                        help="how many (N, K) pairs")
    parser.add_argument("--rounds", type=int, default=2, help="fill rounds")
    parser.add_argument("--share", type=float, default=0.2,
                        help="rows a round may add, a share of the measured rows")
    parser.add_argument("--keep", type=Path, help="keep the databases and reports here")
    parser.add_argument("--noisy-as-measured", action="store_true",
                        help="on a busy host: count the fastest undisturbed sample of rows the "
                             "replay judged noisy (npuperf stores no value for them) as "
                             "measured, in a copy the figures are computed on; says how many")
    parser.add_argument("pytest_args", nargs="*", help="more pytest bench arguments (after --)")
    args = parser.parse_args(argv)
    root = args.keep or Path(tempfile.mkdtemp(prefix="bench_coverage_"))
    root.mkdir(parents=True, exist_ok=True)
    out = root / "out"
    print(f"bench_coverage: MatMulV2, M_GRID up to {args.max_m}, (N, K) "
          f"{', '.join(map(str, PAIRS[:args.pairs]))}; {args.rounds} fill round(s) of at most "
          f"{100 * args.share:g} % more rows; load {loadavg()}", flush=True)
    start = time.perf_counter()
    source = build_source(root, args.max_m, args.pairs)
    replay(source, out, "replay of the grid", args.pytest_args, missing_only=False)
    copy = measured_copy(out)

    taken: dict[str, str] = {}

    def measure(number: int) -> dict:
        target, noisy = (noisy_as_measured(copy, root / "measured" / DEVICE_DIR, taken)
                         if args.noisy_as_measured else (copy, 0))
        result = figures(target, root / f"coverage_{number}.json",
                         rounds[0]["holdout"] if rounds else None)
        result["noisy_taken"] = noisy
        if noisy:
            print(f"  round {number}: {noisy} noisy row(s) counted as measured "
                  f"(--noisy-as-measured)", flush=True)
        return result

    rounds: list[dict] = []
    rounds.append(measure(0))
    for number in range(1, args.rounds + 1):
        budget = max(1, math.floor(args.share * rounds[-1]["measured"]))
        fill = run_fill(source, root / f"coverage_{number - 1}.json", rows=budget)
        kinds = {}
        for added in fill.added:
            kinds[added.proposal.kind] = kinds.get(added.proposal.kind, 0) + 1
        print(f"  fill round {number}: +{len(fill.added)} row(s) ({kinds}), budget {budget}",
              flush=True)
        if not fill.added:
            break
        replay(source, out, f"replay of round {number}", args.pytest_args, missing_only=True)
        rounds.append(measure(number))
    wall = time.perf_counter() - start

    print(f"\nleave-one-out error of the round-0 rows (one holdout for every round), then of "
          f"all rows:\n{'round':<6} {'rows':>5} {'n':>4} {'median':>9} {'p90':>9} {'>50 %':>6}  "
          f"{'all n':>6} {'median':>9} {'p90':>9} {'>50 %':>6} {'M p90':>9} {'M gaps':>7}  "
          f"worst (M, N, error %)")
    for number, r in enumerate(rounds):
        print(f"{number:<6} {r['measured']:>5} {r['same_n']:>4} {pct(r['same_median']):>9} "
              f"{pct(r['same_p90']):>9} {r['same_over_50']:>6}  {r['n']:>6} "
              f"{pct(r['median']):>9} {pct(r['p90']):>9} {r['over_50']:>6} "
              f"{pct(r['m_p90']):>9} {r['m_gaps']:>7}  {r['worst']}")
    p90s = [r["same_p90"] for r in rounds]
    falls = all(b < a for a, b in itertools.pairwise(p90s)) and len(p90s) > 1
    final_m = rounds[-1]["same_m_p90"]  # the round-0 rows predicted along M
    print(f"\ngoal: the GEMM leave-one-out p90 (round-0 rows) falls after each round: "
          f"{'MET' if falls else 'NOT MET'} ({' -> '.join(pct(p) for p in p90s)})")
    print(f"goal: M-axis p90 below AIConfigurator's GEMM p90 {pct(AICONFIGURATOR_GEMM_P90)}: "
          f"{'MET' if final_m is not None and final_m < AICONFIGURATOR_GEMM_P90 else 'NOT MET'}"
          f" ({pct(final_m)} after the last round, {pct(rounds[0]['same_m_p90'])} before; "
          f"all rows along M: {pct(rounds[-1]['m_p90'])})")
    print(f"wall {wall:.0f} s, load {loadavg()}; databases and reports in {root}")
    for r in rounds:
        r.pop("holdout", None)
    write_out("bench_coverage.json", {"rounds": rounds, "wall_s": wall,
                                      "args": {k: str(v) for k, v in vars(args).items()}})
    if args.keep is None:
        shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
