"""Fidelity: how close the replays are to the same kernels inside a model, on this device.

For each workload (the demo model's decode step of 32 tokens and a prefill of 512 tokens, or
a script you name): profile it on the device (warm-up, then traced with shapes), parse the
trace into a fresh database of this device, replay every row it produced with `pytest bench`
(default settings, in a fresh process, once per cache mode), and print per kernel type the
median and worst |replay / in-model - 1| and the type's share of the model's device time, then
the sum of the replayed values over all the model's calls against the model's device time:
what a simulator built from this database would predict for the model.

Goals (issue 19): on a GPU, median |gap| <= 3 %, every GEMM within 10 %, the summed
prediction within 3 % of the model; on a 2-core CPU the figures are reported (noise bounds
them).

    python benchmarks/bench_fidelity.py [--device auto|cpu|cuda] [--modes model,warm]
                                        [--script model.py [ARGS...]]
"""

from __future__ import annotations

import argparse
import csv
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent


def profile(name: str, tokens: int | None, script: list[str], device: str, work: Path) -> Path:
    """The workload's trace, made in a fresh process (the replay's process starts clean)."""
    out = work / f"{name}.json"
    if script:
        result = work / f"{name}_result.json"
        command = [sys.executable, "-m", "pytest_npuperf.profiling.workload", "--out", str(out),
                   "--result", str(result), "--device", device, "--warmup", "1", "--steps",
                   "3", "--", *script]
        done = subprocess.run(command, capture_output=True, text=True, cwd=ROOT)
        if done.returncode != 0:
            raise SystemExit(f"profiling {name} failed:\n{done.stderr[-3000:]}")
        return Path(json.loads(result.read_text())["trace"])
    else:
        code = ("import sys, torch\n"
                "from pytest_npuperf.profiling.demo_model import demo_step\n"
                "from pytest_npuperf.profiling.workload import resolve_kind, trace_workload\n"
                f"kind = resolve_kind({device!r})\n"
                f"step = demo_step(torch.device('cuda' if kind == 'cuda' else 'cpu'), {tokens})\n"
                f"print(trace_workload(step, {str(out)!r}, kind=kind, warmup=1, steps=3))\n")
        command = [sys.executable, "-c", code]
    done = subprocess.run(command, capture_output=True, text=True, cwd=ROOT)
    if done.returncode != 0:
        raise SystemExit(f"profiling {name} failed:\n{done.stderr[-3000:]}")
    return Path(done.stdout.strip().splitlines()[-1])


def parse(trace: Path, work: Path) -> tuple[Path, float, float]:
    """A fresh database of this device holding the trace's rows; (path, mapped us, total us)."""
    from pytest_npuperf.ingest.parse import parse_profiling
    from pytest_npuperf.ingest.trace_rows import TraceSummary

    def place(device: str | None) -> Path:
        return work / (device or "UNKNOWN") / "vllm_ascend" / trace.stem

    summary = parse_profiling(trace, place, show_progress=False)
    traced: TraceSummary = summary.traces[0]
    return summary.database, traced.mapped_us, traced.total_us


def replay(database: Path, device: str, mode: str, work: Path) -> dict[str, list[dict]]:
    """Every row replayed in place (the database is this device's), then read back."""
    copy = database.with_name(f"{database.name}_{mode}")  # beside it: this device's too
    shutil.copytree(database, copy)
    done = subprocess.run([sys.executable, "-m", "pytest", "bench", "-q", "-p", "no:cacheprovider",
                           "--npuperf-db", str(copy), "--npuperf-device", device,
                           "--npuperf-out", str(work / "out"), "--npuperf-cache", mode,
                           "--npuperf-model-profile", "off", "--npuperf-history", "none"],
                          capture_output=True, text=True, cwd=ROOT)
    if done.returncode not in (0, 1):
        raise SystemExit(f"the replay failed ({done.returncode}):\n{done.stdout[-3000:]}")
    tables = {}
    for table in sorted(copy.glob("*.csv")):
        with open(table, newline="") as handle:
            tables[table.stem] = list(csv.DictReader(handle))
    return tables


def _number(text: str) -> float | None:
    try:
        return float(text)
    except (TypeError, ValueError):
        return None


def report(name: str, mode: str, tables: dict[str, list[dict]], mapped_us: float,
           total_us: float) -> None:
    print(f"\n{name}, cache {mode}:")
    print(f"  {'kernel type':<14} {'rows':>4} {'share':>7} {'median |gap|':>13} "
          f"{'worst |gap|':>12} {'worst ratio':>12}")
    predicted = in_model = 0.0
    gaps_all = []
    for kind, rows in tables.items():
        ratios, share = [], 0.0
        for row in rows:
            replayed = _number(row.get("Average Duration(us)"))
            profiled = _number(row.get("Profiling Average Duration(us)"))
            calls = _number(row.get("Profiling Count")) or 1
            if profiled:
                share += profiled * calls / mapped_us
                in_model += profiled * calls
            if replayed and profiled:
                ratios.append(replayed / profiled)
                predicted += replayed * calls
        if not ratios:
            continue
        gaps = [abs(r - 1) for r in ratios]
        gaps_all += gaps
        worst = max(ratios, key=lambda r: abs(r - 1))
        print(f"  {kind:<14} {len(ratios):>4} {share:>7.1%} {statistics.median(gaps):>13.1%} "
              f"{max(gaps):>12.1%} {worst:>11.2f}x")
    if gaps_all:
        print(f"  all rows: median |gap| {statistics.median(gaps_all):.1%}, worst "
              f"{max(gaps_all):.1%}")
    print(f"  the model's mapped device time {mapped_us / 1e3:.3f} ms (of {total_us / 1e3:.3f} ms"
          f" in all); replayed rows x their calls {predicted / 1e3:.3f} ms = "
          f"{predicted / in_model if in_model else float('nan'):.3f}x of those calls' "
          f"in-model time {in_model / 1e3:.3f} ms")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="auto", choices=("auto", "cpu", "cuda"))
    parser.add_argument("--modes", default="model,warm")
    parser.add_argument("--script", nargs=argparse.REMAINDER, default=[],
                        help="profile this script (and its arguments) instead of the demo model")
    args = parser.parse_args()
    sys.path.insert(0, str(ROOT))
    from pytest_npuperf.profiling.workload import resolve_kind

    device = resolve_kind(args.device)
    workloads = ([("script", None, args.script)] if args.script else
                 [("demo_decode_32", 32, []), ("demo_prefill_512", 512, [])])
    work = Path(tempfile.mkdtemp(prefix="bench_fidelity_"))
    try:
        for name, tokens, script in workloads:
            trace = profile(name, tokens, script, device, work)
            database, mapped_us, total_us = parse(trace, work)
            for mode in args.modes.split(","):
                report(name, mode, replay(database, device, mode, work), mapped_us, total_us)
        return 0
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
