"""The terminal summary: counts, duty cycle, worst gaps, slowest cases, where files went."""

from __future__ import annotations

from pathlib import Path

from pytest_npuperf.report import terminal_lines
from pytest_npuperf.report.names import report_paths

from .report_data import ASCEND, STAMP, outcome, session, session_results


def test_non_native_run_with_reports() -> None:
    paths = report_paths(Path("/out/reports"), STAMP)
    lines = terminal_lines(outcome(), session_results(), session(), paths)
    assert lines[0].endswith("10 cases: 4 ok, 1 failed, 1 error, 1 timeout, 2 skipped, "
                             "1 suspect")
    # a case without a trusted value is said at once, with its reason
    assert lines[1] == ("1 case(s) with no value (suspect 1; not passed; --npuperf-no-value "
                        "fail fails them):")
    assert lines[2].startswith("  ") and ": suspect" in lines[2]
    assert lines[3] == ("duty cycle 0.05: 1.86 s inside measured calls of 40.00 s wall time; "
                        "overhead 3814 ms per case")
    gap_index = next(i for i, line in enumerate(lines) if line.startswith("worst gaps"))
    gap_lines = lines[gap_index + 1:gap_index + 5]
    assert [line.split()[:2] for line in gap_lines] == [["3.00x", "Add"], ["0.50x", "MatMulV2"],
                                                  ["0.70x", "SwiGlu"], ["1.37x", "RmsNorm"]]
    assert "128,7168;128,7168 -> 128,7168" in gap_lines[0]
    slow = lines.index("slowest cases:")
    assert "BatchMatMulV2" in lines[slow + 1] and "30.00 s" in lines[slow + 1]
    assert lines[slow + 4].startswith("database written: ")  # three slowest, no more
    text = "\n".join(lines)
    assert "database written: /data/out/CPU_x86_64/" in text
    assert f"/out/reports/replay_report_{STAMP}.md" in text
    assert f"/out/reports/duration_gap_{STAMP}.csv" in text
    assert f"/out/reports/run_{STAMP}.json" in text
    assert lines[-1].startswith(f"note: the source database belongs to {ASCEND}; "
                                "results written to /data/out/CPU_x86_64/")


def test_top_five_gaps_only() -> None:
    value = outcome()
    value.gaps = value.gaps * 3  # 12 hotspots
    lines = terminal_lines(value, session_results(), session(), None)
    start = next(i for i, line in enumerate(lines) if line.startswith("worst gaps (12 hotspot(s)"))
    assert lines[start + 6] == f"replay vs in-model: {len(value.gaps)} row(s) of 4 kernel type(s)"


def test_dry_run_native_without_hotspots() -> None:
    done = outcome(native=True, dry_run=True, with_gaps=False)
    lines = terminal_lines(done, [], session(), None)
    assert lines[0].endswith(": 0 cases")
    assert "no duration gap hotspots (1 row(s) compared)" in lines
    assert "dry run: nothing written" in lines
    assert not any(line.startswith(("reports:", "slowest", "database written")) for line in lines)
    # The only notes are the outcome's own: no non-native note for a native run.
    assert [line for line in lines if line.startswith("note:")] == [f"note: {n}" for n in done.notes]


def test_cases_from_no_database_say_so() -> None:
    done = outcome(dry_run=False)
    done.target = None
    done.notes.append("grid cases: measured, not written to any database")
    lines = terminal_lines(done, session_results(), session(), None)
    assert "no database written" in lines
    assert "note: grid cases: measured, not written to any database" in lines
    assert not any("belongs to" in line for line in lines)


def test_non_native_dry_run_note() -> None:
    lines = terminal_lines(outcome(dry_run=True), session_results(), session(), None)
    assert lines[-1] == (f"note: the source database belongs to {ASCEND}; "
                         "dry run: nothing written")
