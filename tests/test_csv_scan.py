"""`scan_csv` counts fields as the csv module does (its exact count is the oracle), whatever
the block boundaries cut: quoted fields holding commas, newlines and doubled quotes, short and
long rows, blank lines, CRLF line ends, a BOM."""

from __future__ import annotations

import dataclasses
import random

import pytest

from pytest_npuperf.db import csvfile
from pytest_npuperf.db.csvfile import _exact_layout, scan_csv


def _field(rng: random.Random) -> str:
    kind = rng.random()
    if kind < 0.25:
        return ""
    if kind < 0.6:
        inner = rng.choice(["1,128;64,128", "a\nb", 'x""y', "", ",,", "\r\n", "N/A"])
        return f'"{inner}"'
    return rng.choice(["1", "abc", "3.5", "N/A", "DT_BF16;DT_BF16"])


def _table(rng: random.Random) -> str:
    width = rng.randint(1, 6)
    lines = [",".join(f"h{i}" for i in range(width))]
    for _ in range(rng.randint(0, 25)):
        fields = width + rng.choice([0, 0, 0, 0, -1, 1]) if rng.random() < 0.9 else 0
        lines.append(",".join(_field(rng) for _ in range(max(fields, 0))))
    end = rng.choice(["\n", "\r\n"])
    return rng.choice(["", "\ufeff"]) + end.join(lines) + rng.choice(["", end])


@pytest.mark.parametrize(("block", "tables"), [(1, 30), (3, 60), (64, 150)])
def test_block_wise_counts_equal_the_csv_modules(tmp_path, monkeypatch, block, tables):
    monkeypatch.setattr(csvfile, "BLOCK", block)
    rng = random.Random(block)
    for number in range(tables):
        path = tmp_path / f"t{number}.csv"
        path.write_bytes(_table(rng).encode())
        for keep_skip in (False, True):
            scanned, exact = scan_csv(path, keep_skip=keep_skip), _exact_layout(path, keep_skip)
            assert dataclasses.asdict(scanned) == dataclasses.asdict(exact), path.read_bytes()
