"""The duration gap CSV (`duration_gap_<stamp>.csv`, CONTRACT.md §8): every hotspot, worst
first, in the reference's columns and number format."""

from __future__ import annotations

import csv
import io

from ..replay.outcome import WriteOutcome

GAP_COLUMNS = ("Operator", "CSV Name", "MicroBench(us)", "Profiling(us)", "Abs Diff(us)",
               "MB/Profile", "Shape")


def gap_rows_csv(outcome: WriteOutcome) -> str:
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(GAP_COLUMNS)
    for gap in outcome.hotspots:
        writer.writerow([gap.operator, gap.csv_name, f"{gap.microbench_us:.6f}",
                         f"{gap.profiling_us:.6f}", f"{gap.abs_diff:.6f}", f"{gap.ratio:.6f}",
                         gap.shape])
    return buffer.getvalue()
