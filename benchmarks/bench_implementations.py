"""Implementations on this device: per kernel type, the portable path (eager) against the
best implementation that passes verification, and how close each gets to its bound.

Replays the chosen rows of a database with `pytest bench --npuperf-impl all` (every
implementation of every row a case of its own, in one fresh process) and prints, per kernel
type: rows, the implementations measured, eager's median (geometric mean over the rows), the
best's, best / eager, the best's share of its bound (bound / median: 100 % is the roofline;
median over the rows, and over the rows of 64 MiB and more), and how many rows ended
`suspect`. The issue-21 goals on a GPU: at 64 MiB and more every memory-bound kernel type
>= 60 % of its HBM bound with its best implementation, FlashAttention-class prefill of >= 8k
tokens >= 45 % of peak FLOP/s, no valid row suspect.

    python benchmarks/bench_implementations.py [--db DIR] [-k EXPR] [--device auto|cpu|cuda]
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import subprocess
import sys
import tempfile
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LARGE = 64 << 20


def replay(db: str | None, expression: str, device: str, out: Path,
           extra: tuple[str, ...] = ()) -> list[dict]:
    """The run JSON's cases of `pytest bench --npuperf-impl all` (`extra`: more options)."""
    command = [sys.executable, "-m", "pytest", str(ROOT / "bench"), "-q", "-p",
               "no:cacheprovider", "--npuperf-impl", "all", "--npuperf-device", device,
               "--npuperf-out", str(out), "--npuperf-model-profile", "off",
               *(("-k", expression) if expression else ()), *extra]
    if db:
        command += ["--npuperf-db", db]
    done = subprocess.run(command, capture_output=True, text=True, cwd=ROOT, check=False)
    runs = sorted((out / "reports").glob("run_*.json"))
    if not runs:
        sys.exit(f"no run JSON: {done.stdout[-2000:]}{done.stderr[-2000:]}")
    return json.loads(runs[-1].read_text())["cases"]


def geomean(values: list[float]) -> float:
    return math.exp(statistics.fmean(math.log(v) for v in values)) if values else math.nan


def by_row(cases: list[dict]) -> dict[str, dict[str, dict[str, dict]]]:
    """kernel type -> row -> implementation -> its case (the cases with a value)."""
    rows: dict[str, dict[str, dict[str, dict]]] = defaultdict(lambda: defaultdict(dict))
    for case in cases:
        if case.get("value") and case.get("impl"):
            row = case["case_id"].rsplit("-", 1)[0]
            rows[case["kernel_type"]][row][case["impl"]] = case
    return rows


def summarise(cases: list[dict], large: float = LARGE) -> list[dict]:
    """Per kernel type: rows with an eager value, implementations, eager's and the best's
    geometric means, the best's shares of its bound (all rows, rows of `large` bytes and
    more) and of its HBM bound there, and the rows ended `suspect`."""
    found = []
    for kernel_type, rows in sorted(by_row(cases).items()):
        eager, best, share, big, hbm, suspect, impls, bound_by = [], [], [], [], [], 0, set(), set()
        for per_impl in rows.values():
            impls |= set(per_impl)
            ok = {n: c for n, c in per_impl.items() if c["status"] in ("ok", "suspect")}
            suspect += sum(c["status"] == "suspect" for c in per_impl.values())
            if "eager" not in ok:
                continue
            fastest = min(ok.values(), key=lambda c: c["value"])
            eager.append(ok["eager"]["value"])
            best.append(fastest["value"])
            bound_by.add(fastest.get("bound_by") or "")
            if fastest.get("bound_us"):
                share.append(fastest["bound_us"] / fastest["value"])
                if (fastest.get("bytes") or 0) >= large:
                    big.append(share[-1])
            if fastest.get("hbm_bound_us") and (fastest.get("bytes") or 0) >= large:
                hbm.append(fastest["hbm_bound_us"] / fastest["value"])
        if eager:
            found.append({"kernel_type": kernel_type, "rows": len(eager),
                          "implementations": sorted(impls), "eager_us": geomean(eager),
                          "best_us": geomean(best), "best_over_eager":
                          geomean(best) / geomean(eager), "bound_by": sorted(bound_by - {""}),
                          "of_bound": statistics.median(share) if share else None,
                          "large_rows": len(big),
                          "of_bound_large": statistics.median(big) if big else None,
                          "of_hbm_bound_large": statistics.median(hbm) if hbm else None,
                          "suspect": suspect})
    return found


def table(cases: list[dict]) -> list[str]:
    lines = [f"{'kernel type':<30} {'rows':>4}  {'implementations':<24} {'eager us':>10} "
             f"{'best us':>10} {'best/eager':>10} {'of bound':>9} {'>=64MiB':>8} {'suspect':>7}"]

    def pct(value: float | None) -> str:
        return f"{100 * value:.1f} %" if value is not None else "-"

    for t in summarise(cases):
        lines.append(f"{t['kernel_type']:<30} {t['rows']:>4}  "
                     f"{', '.join(t['implementations']):<24} {t['eager_us']:>10.4g} "
                     f"{t['best_us']:>10.4g} {t['best_over_eager']:>10.3f} "
                     f"{pct(t['of_bound']):>9} {pct(t['of_bound_large']):>8} {t['suspect']:>7}")
    return lines


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--db", help="database version directory (default: the embedded one)")
    parser.add_argument("-k", default="RmsNorm or SwiGlu or Quant or Softmax or Rope or Add "
                        "or FusedInferAttention or GroupedMatmul",
                        help="which kernel types' rows (a pytest -k expression)")
    parser.add_argument("--device", default="auto", choices=("auto", "cpu", "cuda"))
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as work:
        cases = replay(args.db, args.k, args.device, Path(work))
    device = next((c.get("device") for c in cases if c.get("device")), "?")
    print(f"implementations on {device}: {len(cases)} cases")
    print("\n".join(table(cases)))
    failed = [c for c in cases if c["status"] not in ("ok", "suspect", "noisy", "skipped")]
    for case in failed[:10]:
        print(f"  {case['status']}: {case['case_id']}: {case['error'][:160]}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
