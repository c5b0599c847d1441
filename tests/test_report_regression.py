"""The regression section's run-wide note: a shift of the whole run is named as such."""

from __future__ import annotations

from pytest_npuperf.history.compare import FASTER, SAME, SLOWER, Comparison, compare_samples
from pytest_npuperf.report.regression import Judged, markdown_section, run_shift, terminal_lines
from tests.report_data import STEADY, case


def items(ratios, verdict=FASTER, threshold=0.05):
    return [Judged(f"MatMulV2-{i}", "MatMulV2", Comparison(verdict, ratio=r, p_value=1e-9,
                                                           threshold=threshold))
            for i, r in enumerate(ratios)]


def test_a_run_that_moved_as_a_whole_is_named():
    moved = items([0.77, 0.78, 0.76, 0.80, 0.79, 1.0])
    note = run_shift(moved)
    assert "whole run moved: median ratio 0.785x over 6 compared case(s)" in note
    assert "5 % threshold" in note
    slower = run_shift(items([1.3, 1.25, 1.4, 1.31, 1.2], SLOWER))
    assert "1.300x" in slower


def test_no_note_for_one_kernel_or_a_quiet_run_or_few_cases():
    assert run_shift(items([1.0, 1.01, 0.99, 1.02, 0.98, 1.6], SAME)) == ""
    assert run_shift(items([0.7] * 4)) == ""  # too few cases to speak of a run
    # Within a wider threshold the same shift is no note either.
    assert run_shift(items([0.9] * 6, threshold=0.15)) == ""


def test_the_terminal_summary_carries_the_note():
    results = []
    for n in range(5):
        result = case("MatMulV2", f"{n + 1},64;64,64", samples=[7.7] * 20, row=n + 1)
        result.regression = compare_samples([10.0] * 20, result.samples,
                                            base_run="r0", spread=STEADY).to_dict()
        results.append(result)
    lines = terminal_lines(results, "last")
    assert lines[0] == "vs baseline last: 5 FASTER"
    assert lines[1].startswith("  note: the whole run moved: median ratio 0.770x")
    assert "- Note: the whole run moved: median ratio 0.770x" in markdown_section(results, "last")
