"""The duration gap CSV: contract columns, hotspots only, worst first by max(r, 1/r)."""

from __future__ import annotations

import csv
import io

from pytest_npuperf.replay.outcome import GapRow
from pytest_npuperf.report import GAP_COLUMNS, gap_rows_csv

from .report_data import outcome

HEADER = "Operator,CSV Name,MicroBench(us),Profiling(us),Abs Diff(us),MB/Profile,Shape"


def _rows(text: str) -> list[dict[str, str]]:
    return list(csv.DictReader(io.StringIO(text)))


def test_header_is_the_contract_header() -> None:
    text = gap_rows_csv(outcome())
    assert text.splitlines()[0] == HEADER
    assert ",".join(GAP_COLUMNS) == HEADER


def test_hotspots_only_worst_first() -> None:
    rows = _rows(gap_rows_csv(outcome()))
    ratios = [float(r["MB/Profile"]) for r in rows]
    assert ratios == [3.0, 0.5, 0.7, 1.37]
    severities = [max(r, 1 / r) for r in ratios]
    assert severities == sorted(severities, reverse=True)
    assert all(not 0.8 <= r <= 1.2 for r in ratios)  # the in-band 1.1 row is left out


def test_six_decimals_and_quoted_shape() -> None:
    text = gap_rows_csv(outcome())
    assert 'RmsNorm,RmsNorm.csv,13.700000,10.000000,3.700000,1.370000,"128,7168;7168 -> 128,7168"' \
        in text.splitlines()
    row = _rows(text)[1]
    assert row == {"Operator": "MatMulV2", "CSV Name": "MatMulV2.csv",
                   "MicroBench(us)": "20.000000", "Profiling(us)": "40.000000",
                   "Abs Diff(us)": "20.000000", "MB/Profile": "0.500000",
                   "Shape": "128,7168;3584,7168 -> 128,3584"}


def test_equal_severity_ties_broken_by_absolute_gap() -> None:
    value = outcome()
    value.gaps = [GapRow("A", "A.csv", 2.0, 1.0, "small"), GapRow("B", "B.csv", 50.0, 100.0, "big")]
    assert [r["Shape"] for r in _rows(gap_rows_csv(value))] == ["big", "small"]


def test_no_hotspots_gives_header_only() -> None:
    assert gap_rows_csv(outcome(with_gaps=False)) == HEADER + "\n"
