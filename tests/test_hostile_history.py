"""The run history on hostile input (issue 29): values no number (NaN, text, blobs, negative,
1e308) read as unknown, not a traceback of `history`, `trend` or `compare`; a history damaged
by hand refused before a session measures anything; `trend --out` never replaces the history
it reads. Each try failed before."""

from __future__ import annotations

import math
import sqlite3
from pathlib import Path

import pytest
import torch  # noqa: F401 (imported once, before the in-process sessions import it)

from pytest_npuperf.db.errors import ContractError
from pytest_npuperf.db.samples import encode_samples
from pytest_npuperf.history.plateau import plateau
from pytest_npuperf.history.store import HistoryStore
from pytest_npuperf.measure.result import CaseResult

from .conftest import tree_digest
from .replay_project import BENCH, FAST, cells, write_db
from .test_history_views import GEMM, NORM, _case, _run

COMMANDS = (["history", "--kernel", "MatMulV2"], ["history", "--csv"], ["trend"],
            ["compare", "last", "n2"], ["runs"])


def _history(path: Path) -> Path:
    with HistoryStore(path) as store:
        store.record(_run("n1", 0, commit="a"), [_case(GEMM, 26.0), _case(NORM, 3.1)])
        gemm = _case(GEMM, 27.0)
        gemm.samples = [26.0, 27.0, 28.0]
        store.record(_run("n2", 1, commit="b"),
                     [gemm, _case(NORM, 3.0, verdict="SLOWER", ratio=1.2)])
    return path


def _damaged(path: Path, sql: str, *values) -> None:
    with sqlite3.connect(path) as conn:
        conn.execute(sql, values)


def _every_command(npuperf, history: Path) -> list[str]:
    outputs = []
    for command in COMMANDS:
        code, out, err = npuperf(*command, "--history", history)
        assert code in (0, 1) and not err, (command, code, err)
        outputs.append(out)
    return outputs


@pytest.mark.parametrize("value", ["nan", "NaN", "inf", "abc", b"\0\1", -5.0, 1e308,
                                   math.inf, 0.0])
def test_a_value_that_is_no_duration_is_read_as_unknown(tmp_path, npuperf, value):
    history = _history(tmp_path / "history.sqlite")
    _damaged(history, "UPDATE cases SET value_us = ?, median_us = ?, min_us = ?, ratio = ?, "
                      "p_value = ? WHERE run = 2", value, value, value, value, value)
    outputs = _every_command(npuperf, history)
    assert "trend page written" in outputs[2]
    [gemm] = [r for r in HistoryStore(history, readonly=True).run_cases("n2")
              if r.kernel == "MatMulV2"]
    assert gemm.value_us is None and gemm.median_us is None and gemm.ratio is None


def test_samples_that_are_no_durations_are_left_out_when_read(tmp_path, npuperf):
    history = _history(tmp_path / "history.sqlite")
    _damaged(history, "UPDATE samples SET data = ?",
             encode_samples([26.0, math.nan, math.inf, -3.0, 27.0]))
    _every_command(npuperf, history)
    with HistoryStore(history, readonly=True) as store:
        [gemm] = [r for r in store.run_cases("n2") if r.samples]
        assert gemm.samples == [26.0, 27.0]


@pytest.mark.parametrize("sql, value", [
    ("UPDATE runs SET started = ? WHERE run_id = 'n2'", "yesterday"),
    ("UPDATE runs SET started = ? WHERE run_id = 'n2'", math.inf),
    ("UPDATE runs SET options = ?, stack = ?", '"text"'),
    ("UPDATE runs SET cases = ?, exit_status = ?", "many"),
    ("UPDATE cases SET extra = ?", "[1, 2]"),
    ("UPDATE cases SET samples_count = ?, signature = ?", 3.5),
])
def test_runs_and_cases_columns_of_the_wrong_type_are_no_traceback(tmp_path, npuperf, sql,
                                                                    value):
    history = _history(tmp_path / "history.sqlite")
    _damaged(history, sql, *[value] * sql.count("?"))
    _every_command(npuperf, history)


def test_a_quiet_history_with_a_junk_reference_is_no_plateau_and_no_traceback():
    quiet = _case(GEMM, 26.0)
    quiet.extra = {"reference_us": "fast"}
    result = CaseResult(case_id=GEMM, nodeid="x", kernel_type="MatMulV2", file="MatMulV2.csv",
                        signature="aaaaaaaa", reference_us=5.0)
    result.set_samples([900.0, 901.0, 902.0])
    assert plateau(result, quiet) is None


# -- a history damaged by hand -----------------------------------------------------------------
@pytest.mark.parametrize("damage, missing", [
    ("DROP TABLE cases", "cases, samples missing"),
    ("ALTER TABLE cases DROP COLUMN ratio", "cases.ratio missing"),
])
def test_a_history_damaged_by_hand_is_one_line_when_opened(tmp_path, npuperf, damage, missing):
    history = _history(tmp_path / "history.sqlite")
    with sqlite3.connect(history) as conn:
        conn.execute("PRAGMA foreign_keys = OFF")
        conn.execute(damage)
        if "DROP TABLE" in damage:
            conn.execute("DROP TABLE samples")  # it references cases
    with pytest.raises(ContractError, match=f"a damaged history: {missing}"):
        HistoryStore(history, readonly=True)
    code, _, err = npuperf("history", "--history", history)
    assert code == 1 and "a damaged history" in err and len(err.strip().splitlines()) == 1


def test_a_session_with_a_damaged_history_stops_before_measuring(pytester):
    """Before: the first case failed on "no such table: cases", and the run's measurements
    were not recorded."""
    pytester.makepyfile(**{"bench/test_kernels": BENCH})
    db = write_db(pytester.path / "db", {"Add": [
        cells("8,16;8,16", "FLOAT;FLOAT", "ND;ND", "8,16", "FLOAT")]})
    out = pytester.path / "out"
    history = _history(out / "history.sqlite")
    with sqlite3.connect(history) as conn:
        conn.execute("PRAGMA foreign_keys = OFF")
        conn.execute("DROP TABLE samples")
        conn.execute("DROP TABLE cases")
    before = tree_digest(pytester.path / "db")
    result = pytester.runpytest("bench", "--npuperf-db", str(db), "--npuperf-out", str(out),
                                *FAST)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert "a damaged history" in result.stderr.str()
    assert tree_digest(pytester.path / "db") == before and not list(out.glob("CPU_*"))


# -- trend --out ------------------------------------------------------------------------------
def test_trend_never_writes_its_page_over_the_history_or_another_file(tmp_path, npuperf):
    """Before: `npuperf trend --out history.sqlite` replaced the history with the page."""
    history = _history(tmp_path / "history.sqlite")
    before = history.read_bytes()
    for out in (history, tmp_path / "." / "history.sqlite"):
        code, _, err = npuperf("trend", "--history", history, "--out", out)
        assert code == 2 and "the history this page is read from" in err
    notes = tmp_path / "notes.txt"
    notes.write_text("mine")
    code, _, err = npuperf("trend", "--history", history, "--out", notes)
    assert code == 2 and "not an html page; refusing to replace it" in err
    code, _, err = npuperf("trend", "--history", history, "--out", tmp_path)
    assert code == 2 and "a directory" in err
    assert history.read_bytes() == before and notes.read_text() == "mine"
    page = tmp_path / "trend.html"
    for _ in range(2):  # a page it wrote before is replaced
        assert npuperf("trend", "--history", history, "--out", page)[0] == 0
