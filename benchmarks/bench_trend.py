"""What reading the history as a performance engineer does costs: `npuperf history` (one line
per case) and `npuperf trend` (the html page) on a history of CASES cases over NIGHTS runs,
beside a reference measured in the same run: reading the same measurements from the store
alone (`HistoryStore.trend`, what both start from). The ratios say what the views add over the
read; the page's size says what a nightly job publishes.

    python benchmarks/bench_trend.py [--cases 76,2000] [--nights 30] [--repeat 3]
"""

from __future__ import annotations

import argparse
import contextlib
import io
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from pytest_npuperf.cli import main  # noqa: E402
from pytest_npuperf.history.records import KIND_KERNEL, CaseRecord, RunRecord  # noqa: E402
from pytest_npuperf.history.store import HistoryStore  # noqa: E402


def build(path: Path, cases: int, nights: int, seed: int = 3) -> None:
    """A history as nightly runs leave it: every case every night, a few noisy, a few
    SLOWER than their baseline."""
    rng = random.Random(seed)
    keys = [f"MatMulV2-{m}x{k}x7168-BF16-{i:08x}" for i, (m, k) in
            enumerate((2 ** (i % 12), 512 * (1 + i // 12)) for i in range(cases))]
    base = {key: rng.uniform(5.0, 5000.0) for key in keys}
    with HistoryStore(path) as store:
        for night in range(nights):
            run = RunRecord(run_id=f"night{night:03d}", started=1.7e9 + night * 86400,
                            started_iso=f"2026-10-{1 + night % 28:02d}T02:00:00",
                            device="CPU_BENCH", stack={"torch": "2.13.0+cpu"},
                            git_commit=f"{night:040x}", passed=True)
            records = []
            for key in keys:
                value = base[key] * rng.uniform(0.97, 1.06)
                status = "noisy" if rng.random() < 0.02 else "ok"
                verdict = "SLOWER" if rng.random() < 0.01 else "SAME"
                records.append(CaseRecord(
                    kind=KIND_KERNEL, key=key, kernel="MatMulV2", status=status,
                    value_us=value, median_us=value, min_us=value * 0.95, samples_count=50,
                    verdict=verdict, ratio=1.2 if verdict == "SLOWER" else 1.0))
            store.record(run, records)


def timed(call, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        with contextlib.redirect_stdout(io.StringIO()):
            call()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def measure(cases: int, nights: int, repeat: int) -> dict[str, float]:
    with tempfile.TemporaryDirectory() as tmp:
        history = Path(tmp) / "history.sqlite"
        build(history, cases, nights)
        page = Path(tmp) / "trend.html"

        def read() -> None:
            with HistoryStore(history, readonly=True) as store:
                store.trend(last=60)
                store.runs()

        reference = timed(read, repeat)
        summary = timed(lambda: main(["history", "--history", str(history)]), repeat)
        trend = timed(lambda: main(["trend", "--history", str(history), "--out", str(page)]),
                      repeat)
        return {"read_s": reference, "history_s": summary, "trend_s": trend,
                "page_mb": page.stat().st_size / 1e6}


def run() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", default="76,2000")
    parser.add_argument("--nights", type=int, default=30)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    print(f"{'cases':>6} {'nights':>6} {'read (s)':>9} {'history (s)':>12} {'trend (s)':>10} "
          f"{'history/read':>13} {'trend/read':>11} {'page (MB)':>10}")
    for cases in (int(c) for c in args.cases.split(",")):
        m = measure(cases, args.nights, args.repeat)
        print(f"{cases:>6} {args.nights:>6} {m['read_s']:>9.3f} {m['history_s']:>12.3f} "
              f"{m['trend_s']:>10.3f} {m['history_s'] / m['read_s']:>13.1f} "
              f"{m['trend_s'] / m['read_s']:>11.1f} {m['page_mb']:>10.2f}")


if __name__ == "__main__":
    run()
