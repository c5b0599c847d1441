"""Speed and memory of `npuperf parse` of a large trace against `json.load` of the same file.

Builds a kineto-format CUDA trace of N decoder layers (default 20,000, about 200 MB) from the
test suite's layer (tests/trace_data.py: GEMMs with their kernels, attention, norms, element-
wise ops, runtime launches and flows), then, each in a fresh process:

  1. `json.load(file)`                                  -> the baseline (the whole file in memory)
  2. `npuperf parse --profile file --db <tmp>`  (streamed event by event)

and prints both wall times, their ratio and the peak RSS of each. A parse that streams holds
the events it keeps (operators and device activities, compactly), not the file: its peak must
stay well below json.load's as the file grows.

    python benchmarks/bench_trace.py [--layers N]
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from benchmarks.bench_parse import compare  # noqa: E402
from tests.trace_data import transformer_gpu_trace  # noqa: E402


def build(path: Path, layers: int) -> None:
    """One real-shaped layer's events (two layers of the test trace), repeated with shifted
    times and ids, written as kineto writes a trace: meta first, then the events."""
    sample, _ = transformer_gpu_trace(path.with_suffix(".sample.json"))
    template = json.loads(sample.read_text())
    events = template["traceEvents"]
    span = max(e.get("ts", 0) for e in events) + 1000.0
    ids = max(e.get("args", {}).get("External id", 0) for e in events) + 1
    with open(path, "w", encoding="utf-8") as out:
        meta = {k: v for k, v in template.items() if k != "traceEvents"}
        out.write(json.dumps(meta)[:-1] + ', "traceEvents": [\n')
        first = True
        for copy in range(max(1, layers // 2)):
            for event in events:
                shifted = dict(event, ts=event["ts"] + copy * span)
                args = dict(event.get("args", {}))
                for key in ("External id", "correlation"):
                    if key in args:
                        args[key] = args[key] + copy * ids
                if "id" in event:
                    shifted["id"] = event["id"] + copy * ids
                if args:
                    shifted["args"] = args
                out.write(("" if first else ",\n") + json.dumps(shifted))
                first = False
        out.write("\n]}\n")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--layers", type=int, default=20_000)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="bench_trace_"))
    try:
        trace = work / "big_trace.json"
        t = time.perf_counter()
        build(trace, args.layers)
        size = trace.stat().st_size / 2**20
        print(f"built {trace}: {args.layers:,} layers, {size:.0f} MiB in "
              f"{time.perf_counter() - t:.1f} s")
        baseline = [sys.executable, "-c", f"import json; json.load(open({str(trace)!r}))"]
        parse = [sys.executable, "-m", "pytest_npuperf.cli", "parse", "--quiet",
                 "--profile", str(trace), "--db", str(work / "db")]
        load_wall, load_rss, parse_wall, parse_rss = compare(("json.load", baseline),
                                                             ("npuperf parse", parse))
        print(f"ratio parse/json.load = {parse_wall / load_wall:.2f}x time, "
              f"{parse_rss / load_rss:.2f}x memory; {size / parse_wall:.0f} MiB/s parsed")
        return 0
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
