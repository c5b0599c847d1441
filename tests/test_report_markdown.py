"""The replay report: sections in the reference's order, concrete numbers, `_None_` tables."""

from __future__ import annotations

import itertools
import re

from pytest_npuperf.replay.outcome import WriteOutcome
from pytest_npuperf.report import render_markdown
from pytest_npuperf.report.tables import md_cell, md_table

from .report_data import ASCEND, RUN_ID, STAMP, outcome, session, session_results

SECTIONS = ["# Replay Report", "## Execution Status", "## Overview", "## Update Summary",
            "## Duplicate Signatures", "## Rows With No Measurement", "## Deleted Rows",
            "## Duration Gap Hotspots", "## Slowest Cases", "## Notes"]


def _section(text: str, title: str) -> str:
    start = text.index(f"\n{title}\n") + len(title) + 2
    following = text.find("\n## ", start)
    return text[start:following if following >= 0 else len(text)].strip()


def _table_rows(section: str) -> list[list[str]]:
    """Data rows of the first table of a section, cells stripped."""
    lines = list(itertools.takewhile(lambda line: line.startswith("|"), itertools.dropwhile(
        lambda line: not line.startswith("|"), section.splitlines())))
    return [[c.strip() for c in re.split(r"(?<!\\)\|", line)[1:-1]] for line in lines[2:]]


def test_sections_in_order_and_header() -> None:
    text = render_markdown(outcome(), session_results(), session())
    positions = [text.index(s) for s in SECTIONS]
    assert positions == sorted(positions)
    header = text[:text.index("## Execution Status")]
    assert f"Run id: `{RUN_ID}`" in header
    assert "Device: x86_64 (cpu 0; database device CPU_x86_64; torch 2.9.0+cpu)" in header
    assert f"Source database: `/data/data/{ASCEND}/vllm_ascend/" in header
    assert "Target database: `/data/out/CPU_x86_64/" in header
    assert f"Native: no (the source database belongs to {ASCEND}; results written to" in header
    assert "Dry run: no" in header
    # 1.5 + 0.2 + 0.1 + 0.01 + 0.05 = 1.86 s of 40 s
    assert "Time: duty cycle 0.05: 1.86 s inside measured calls of 40.00 s wall time" in header


def test_execution_status_counts_and_reasons() -> None:
    section = _section(render_markdown(outcome(), session_results(), session()),
                       "## Execution Status")
    for line in ("- OK: 4", "- Failed: 1", "- Error: 1", "- Timed out: 1", "- Skipped: 2",
                 "- Suspect: 1"):
        assert line in section
    rows = _table_rows(section)
    assert [(r[1], r[2]) for r in rows] == [("MatMulV3", "failed"), ("SoftmaxV2", "error"),
                                             ("BatchMatMulV2", "timeout")]
    # A pipe in an error message must not split the cell; a newline must not split the row.
    assert rows[0][3] == r"RuntimeError: out of memory \| tried to allocate 1.2 GiB second line"
    assert "unknown dtype 'DT_BF17'" in rows[1][3]
    assert "| SwiGlu-128,36864" in section and "4.200" in section
    assert "| GroupedMatmul |     2 | no replay for GroupedMatmul yet |" in section


def test_overview_and_update_summary() -> None:
    text = render_markdown(outcome(), session_results(), session())
    overview = dict((r[0], r[1]) for r in _table_rows(_section(text, "## Overview")))
    assert overview["CSV files touched"] == "3"
    assert overview["Rows updated"] == "3"
    assert overview["Rows deleted"] == "2"
    assert overview["Rows unchanged"] == "49"
    assert overview["Duplicate signatures"] == "2"
    assert overview["Rows with no measurement"] == "3"
    assert overview["Hotspots"] == "4"
    assert overview["Gap threshold"] == "microbench/profiling not in [0.80x, 1.20x]"
    summary = _section(text, "## Update Summary")
    assert summary.splitlines()[0].split("|")[1:-1] == [
        " Operator  ", " Updated ", " Added ", " Deleted ", " Unchanged ", " Failing ",
        " Flagged ", " Missing "]
    assert _table_rows(summary) == [
        ["MatMulV2", "2", "0", "0", "36", "0", "0", "2"],
        ["MatMulV3", "0", "0", "0", "9", "1", "0", "1"],
        ["RmsNorm", "1", "0", "2", "4", "0", "0", "0"],
        ["**Total**", "3", "0", "2", "49", "1", "0", "3"]]


def test_hotspots_worst_first_with_ratio_format() -> None:
    text = render_markdown(outcome(), session_results(), session())
    rows = _table_rows(_section(text, "## Duration Gap Hotspots"))
    assert [(r[0], r[4]) for r in rows] == [("Add", "3.00x"), ("MatMulV2", "0.50x"),
                                             ("SwiGlu", "0.70x"), ("RmsNorm", "1.37x")]
    assert rows[1][1:4] == ["20.000", "40.000", "20.000"]
    assert rows[0][5] == "128,7168;128,7168 -> 128,7168"


def test_hotspot_table_is_capped_at_twenty() -> None:
    base = outcome()
    many = [g for g in base.gaps for _ in range(10)]  # 40 hotspots, 10 in band
    big = WriteOutcome(**{**base.__dict__, "gaps": many})
    section = _section(render_markdown(big, session_results(), session()),
                       "## Duration Gap Hotspots")
    assert len(_table_rows(section)) == 20
    assert "Showing the worst 20 of 40." in section


def test_empty_tables_render_none() -> None:
    empty = outcome(with_gaps=False)
    empty.files = []
    text = render_markdown(empty, [], session())
    for title in ("## Update Summary", "## Duplicate Signatures", "## Rows With No Measurement",
                  "## Deleted Rows", "## Duration Gap Hotspots", "## Slowest Cases"):
        assert _section(text, title) == "_None_", title
    assert "WARNING" not in text
    assert "- OK: 0" in text


def test_dry_run_and_native_headers() -> None:
    dry = render_markdown(outcome(dry_run=True), session_results(), session())
    assert "Target database: none (nothing written)" in dry
    assert "Dry run: yes" in dry
    assert "dry run: nothing written" in dry
    native = render_markdown(outcome(native=True), session_results(), session())
    assert "Native: yes" in native
    assert "belongs to" not in native


def test_slowest_cases_and_notes() -> None:
    text = render_markdown(outcome(), session_results(), session())
    rows = _table_rows(_section(text, "## Slowest Cases"))
    assert [r[2] for r in rows][:3] == ["30.00 s", "3.00 s", "2.00 s"]
    assert rows[2][4:] == ["5", "41.000"]
    notes = _section(text, "## Notes")
    assert "cross-file rule" in notes
    assert f"`duration_gap_{STAMP}.csv`" in notes and f"`run_{STAMP}.json`" in notes
    assert "Measurement method(s): profiler." in notes


def test_md_table_padding_and_alignment() -> None:
    table = md_table(["A", "Num"], [["x", 1], ["longer", 12345]], right=(1,))
    lines = table.splitlines()
    assert len({len(line) for line in lines}) == 1  # padded: every line equally long
    assert lines[1] == "| ------ | ----: |"
    assert lines[3] == "| longer | 12345 |"
    assert md_table(["A"], []) == "_None_"
    assert md_cell("a|b\nc") == r"a\|b c"
    assert md_cell("x" * 500).endswith("...") and len(md_cell("x" * 500)) == 160
