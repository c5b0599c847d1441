"""write_reports: three files named by the stamp, written together or not at all."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pytest_npuperf.db.errors import NpuperfError
from pytest_npuperf.db.transaction import Transaction
from pytest_npuperf.report import gap_rows_csv, render_markdown, write_reports
from pytest_npuperf.report import writer as writer_module
from pytest_npuperf.report.names import check_stamp

from .report_data import STAMP, outcome, session, session_results, with_stamp


def test_writes_three_files_named_by_the_stamp(tmp_path: Path) -> None:
    reports = tmp_path / "db" / "reports"
    paths = write_reports(outcome(tmp_path), session_results(), session(), reports)
    assert paths.markdown == reports / f"replay_report_{STAMP}.md"
    assert paths.gap_csv == reports / f"duration_gap_{STAMP}.csv"
    assert paths.run_json == reports / f"run_{STAMP}.json"
    assert sorted(p.name for p in reports.iterdir()) == sorted(p.name for p in paths.all())
    assert paths.markdown.read_text().startswith("# Replay Report")
    assert paths.gap_csv.read_text() == gap_rows_csv(outcome(tmp_path))
    assert json.loads(paths.run_json.read_text())["totals"]["cases"] == 10


def test_second_run_in_the_same_second_does_not_overwrite(tmp_path: Path) -> None:
    first = write_reports(outcome(tmp_path), session_results(), session(), tmp_path)
    before = first.markdown.read_bytes()
    second = write_reports(outcome(tmp_path), session_results()[:2], session(), tmp_path)
    assert second.markdown.name == f"replay_report_{STAMP}_2.md"
    assert second.run_json.name == f"run_{STAMP}_2.json"
    assert first.markdown.read_bytes() == before
    # The report names its own sibling files, not the first run's.
    assert f"duration_gap_{STAMP}_2.csv" in second.markdown.read_text()
    assert json.loads(second.run_json.read_text())["totals"]["cases"] == 2


def test_failure_while_staging_leaves_nothing(tmp_path: Path,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    original = Transaction.stage_text
    calls: list[Path] = []

    def failing_third(self: Transaction, path: str | Path, text: str) -> Path:
        calls.append(Path(path))
        if len(calls) == 3:
            raise OSError(28, "No space left on device")
        return original(self, path, text)

    monkeypatch.setattr(Transaction, "stage_text", failing_third)
    reports = tmp_path / "reports"
    with pytest.raises(OSError):
        write_reports(outcome(tmp_path), session_results(), session(), reports)
    assert len(calls) == 3
    assert list(reports.iterdir()) == []  # neither the first two files nor temp files


def test_failure_writing_the_data_leaves_nothing(tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    fsyncs = []

    def failing_fsync(fd: int) -> None:
        fsyncs.append(fd)
        if len(fsyncs) == 2:
            raise OSError(5, "Input/output error")

    monkeypatch.setattr("pytest_npuperf.db.table.os.fsync", failing_fsync)
    with pytest.raises(NpuperfError, match="Input/output error"):
        write_reports(outcome(tmp_path), session_results(), session(), tmp_path / "reports")
    assert list((tmp_path / "reports").iterdir()) == []


def test_rendering_error_touches_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(*args: object, **kwargs: object) -> dict:
        raise RuntimeError("bug in the json report")

    monkeypatch.setattr(writer_module, "run_json", broken)
    with pytest.raises(RuntimeError):
        write_reports(outcome(tmp_path), session_results(), session(), tmp_path / "reports")
    assert not (tmp_path / "reports").exists()


def test_bad_stamp_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="invalid report stamp"):
        write_reports(with_stamp(outcome(tmp_path), "../../etc/x"), [], session(), tmp_path)
    assert check_stamp("20250314_092653_3") == "20250314_092653_3"
    assert list(tmp_path.iterdir()) == []


def test_written_markdown_equals_rendered(tmp_path: Path) -> None:
    value = outcome(tmp_path, dry_run=True)
    paths = write_reports(value, session_results(), session(), tmp_path)
    assert paths.markdown.read_text() == render_markdown(value, session_results(), session())
