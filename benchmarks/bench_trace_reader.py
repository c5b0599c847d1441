"""The streaming trace reader (ingest/chrome_trace.py) on hostile shapes: one huge event, and
megabytes of blanks between events, against `json.loads` of the same text.

A reader that decodes a cut event again after every chunk is quadratic in the size of one
event (one 60 MB event ran out of a 65 s limit); one that skips blanks a character at a time
takes 30 s for 100 MiB of them. For each shape, at SIZE and 4 x SIZE MiB, this prints the
reader's time, json.loads's time on the same text (linear: the baseline) and their ratio, and
how the reader's time grew for 4x the input, alone and against json.loads's growth.
Goals (issue 29): the reader within 4x of json.loads, and its growth for 4x the input at most
1.5x json.loads's (linear; a quadratic reader's is about 4x). The reader's own growth (about 4x
when linear, 16x when quadratic) is printed too; on a busy host json.loads's moves as well.

    python benchmarks/bench_trace_reader.py [--size MIB]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from pytest_npuperf.ingest.chrome_trace import read_events  # noqa: E402

RELATIVE_GROWTH_GOAL = 1.5
RATIO_GOAL = 4.0


def _event(args: dict) -> dict:
    return {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "ts": 1.0, "dur": 2.0, "args": args}


def huge_event(mib: int) -> str:
    """One event whose args hold MIB MiB of small numbers (`1, ` repeated)."""
    return json.dumps({"traceEvents": [_event({"Input Dims": [1] * ((mib << 20) // 3)})]})


def blanks(mib: int) -> str:
    """Two small events with MIB MiB of blanks between them."""
    return ('{"traceEvents": [' + json.dumps(_event({})) + "," + " \n\t" * (mib << 20 >> 2)
            + json.dumps(_event({})) + "]}")


def _timed(function) -> float:
    begin = time.perf_counter()
    function()
    return time.perf_counter() - begin


def measure(text: str, directory: Path) -> tuple[float, float]:
    """(reader seconds, json.loads seconds) on `text`."""
    path = directory / "trace.json"
    path.write_text(text)
    reader = _timed(lambda: sum(1 for _ in read_events(path, {})))
    baseline = _timed(lambda: json.loads(path.read_text()))
    return reader, baseline


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size", type=int, default=12,
                        help="MiB of the smaller input (default 12: 4x it stays below the "
                             "reader's limit of 64 Mi characters per event)")
    args = parser.parse_args()
    print(f"load: {os.getloadavg()[0]:.2f} (1-min average)")
    ok = True
    with tempfile.TemporaryDirectory(prefix="bench_trace_reader_") as tmp:
        for name, build in (("one huge event", huge_event), ("blanks between events", blanks)):
            times = []
            for mib in (args.size, 4 * args.size):
                reader, baseline = measure(build(mib), Path(tmp))
                times.append((reader, baseline))
                ratio = reader / baseline
                ok &= ratio <= RATIO_GOAL
                print(f"{name:>22}, {mib:4d} MiB: reader {reader:7.3f} s, json.loads "
                      f"{baseline:7.3f} s, ratio {ratio:5.2f}x (goal <= {RATIO_GOAL:g}x)")
            growth = times[1][0] / times[0][0]
            relative = growth / (times[1][1] / times[0][1])
            ok &= relative <= RELATIVE_GROWTH_GOAL
            print(f"{name:>22}: 4x the input took the reader {growth:.2f}x the time (linear 4x, "
                  f"quadratic 16x), {relative:.2f}x json.loads's growth (goal <= "
                  f"{RELATIVE_GROWTH_GOAL:g}x)")
    print("goals met" if ok else "goals NOT met")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
