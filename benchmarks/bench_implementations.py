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


def replay(db: str | None, expression: str, device: str, out: Path) -> list[dict]:
    command = [sys.executable, "-m", "pytest", str(ROOT / "bench"), "-q", "-p",
               "no:cacheprovider", "--npuperf-impl", "all", "--npuperf-device", device,
               "--npuperf-out", str(out), "--npuperf-model-profile", "off", "-k", expression]
    if db:
        command += ["--npuperf-db", db]
    done = subprocess.run(command, capture_output=True, text=True, cwd=ROOT, check=False)
    runs = sorted((out / "reports").glob("run_*.json"))
    if not runs:
        sys.exit(f"no run JSON: {done.stdout[-2000:]}{done.stderr[-2000:]}")
    return json.loads(runs[-1].read_text())["cases"]


def geomean(values: list[float]) -> float:
    return math.exp(statistics.fmean(math.log(v) for v in values)) if values else math.nan


def table(cases: list[dict]) -> list[str]:
    rows: dict[str, dict[str, dict[str, dict]]] = defaultdict(lambda: defaultdict(dict))
    for case in cases:
        if case.get("value") and case.get("impl"):
            row = case["case_id"].rsplit("-", 1)[0]
            rows[case["kernel_type"]][row][case["impl"]] = case
    lines = [f"{'kernel type':<30} {'rows':>4}  {'implementations':<24} {'eager us':>10} "
             f"{'best us':>10} {'best/eager':>10} {'of bound':>9} {'>=64MiB':>8} {'suspect':>7}"]
    for kernel_type, by_row in sorted(rows.items()):
        eager, best, share, large, suspect, impls = [], [], [], [], 0, set()
        for found in by_row.values():
            impls |= set(found)
            ok = {n: c for n, c in found.items() if c["status"] in ("ok", "suspect")}
            suspect += sum(c["status"] == "suspect" for c in found.values())
            if "eager" not in ok or not ok:
                continue
            fastest = min(ok.values(), key=lambda c: c["value"])
            eager.append(ok["eager"]["value"])
            best.append(fastest["value"])
            if fastest.get("bound_us"):
                share.append(fastest["bound_us"] / fastest["value"])
                if (fastest.get("bytes") or 0) >= LARGE:
                    large.append(share[-1])
        if not eager:
            continue
        median_share = f"{100 * statistics.median(share):.1f} %" if share else "-"
        median_large = f"{100 * statistics.median(large):.1f} %" if large else "-"
        lines.append(f"{kernel_type:<30} {len(eager):>4}  {', '.join(sorted(impls)):<24} "
                     f"{geomean(eager):>10.4g} {geomean(best):>10.4g} "
                     f"{geomean(best) / geomean(eager):>10.3f} {median_share:>9} "
                     f"{median_large:>8} {suspect:>7}")
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
