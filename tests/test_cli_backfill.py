"""`npuperf backfill` (issue 10, item 3): existing profiler output into a database, with the
run's markers (no hand-off) or, without markers, by kernel type and signature (the reference
behaviour), checked against the real torch_npu kernel table."""

from __future__ import annotations

import shutil
import statistics

import pytest

from pytest_npuperf.replay.cases import CaseCatalog
from tests.conftest import read_rows, tree_digest
from tests.msprof_standin import COUNTERS
from tests.profile_data import Range, calls, counters_for, prof_dir, summaries
from tests.replay_project import MATMUL_ROWS, RMSNORM_ROWS, write_db

T0 = 1_780_676_244_000_000.0


@pytest.fixture(autouse=True)
def in_tmp(tmp_path, monkeypatch):
    """The default history (npuperf-out/history.sqlite) is relative to the working directory."""
    monkeypatch.chdir(tmp_path)


@pytest.fixture
def db(tmp_path):
    return write_db(tmp_path / "db", {"MatMulV2": MATMUL_ROWS, "RmsNorm": RMSNORM_ROWS})


def test_markers_without_a_hand_off_name_the_cases(db, tmp_path, npuperf):
    refs = {r.kernel_type + str(r.position): r for r in CaseCatalog(db).cases()}
    rms, mm = refs["RmsNorm0"], refs["MatMulV21"]
    k_rms = calls("RmsNorm", T0 + 10, 6, base=4.0)
    k_mm = calls("MatMulV3", T0 + 1010, 5, base=9.0)
    summaries(prof_dir(tmp_path / "prof"), k_rms + k_mm, [
        Range(rms.case_id, T0, T0 + 100), Range(mm.case_id, T0 + 1000, T0 + 1100),
        Range("not-a-case-of-this-database", T0 + 2000, T0 + 2100)])
    code, out, err = npuperf("backfill", "--profile", tmp_path / "prof", "--db", db)
    assert code == 0, err
    assert "matched by mstx markers (no hand-off: warmup calls included" in out
    row = read_rows(db / "RmsNorm.csv")[0]
    timed = [k.duration for k in k_rms]  # no hand-off: every kernel in the range counts
    assert float(row["Average Duration(us)"]) == pytest.approx(statistics.median(timed))
    assert row["MicroBench Method"] == "msprof" and row["MicroBench Samples"] == "6"
    for name in COUNTERS:
        expected = statistics.fmean(counters_for(d)[name] for d in timed)
        assert float(row[f"MicroBench {name}"]) == pytest.approx(expected), name
    # MatMulV2 row 2 ran MatMulV3, but only MatMulV2.csv has the signature: it stays there.
    mm_row = read_rows(db / "MatMulV2.csv")[1]
    assert float(mm_row["Average Duration(us)"]) == pytest.approx(
        statistics.median(k.duration for k in k_mm))
    assert list(db.glob("reports/replay_report_*.md"))
    # As a session's end: the run in the default history, the html page with its figures.
    from pytest_npuperf.history.store import HistoryStore

    with HistoryStore(tmp_path / "npuperf-out" / "history.sqlite", readonly=True) as store:
        [run] = store.runs()
        assert {c.key for c in store.run_cases(run.run_id)} == {rms.case_id, mm.case_id}
    assert "<svg" in next(db.glob("reports/report_*.html")).read_text()


def test_without_markers_kernels_match_rows_by_type_and_signature_on_real_data(
        realdata, tmp_path, npuperf):
    """The real torch_npu kernel table: parse builds the rows and their Profiling columns;
    backfill of the same table must put the same kernels' statistics in the MicroBench
    columns (two independent paths over one file)."""
    sample = realdata / "kernel_details" / "mstt_advisor_compute_advice_2025_kernel_details.csv"
    run = tmp_path / "w_1_20250101000000000_ascend_pt" / "ASCEND_PROFILER_OUTPUT"
    run.mkdir(parents=True)
    shutil.copy(sample, run / "kernel_details.csv")
    db = tmp_path / "db"
    code, _, err = npuperf("parse", "--quiet", "--profile", sample, "--db", db)
    assert code == 0, err
    code, out, err = npuperf("backfill", "--profile", tmp_path, "--db", db)
    assert code == 0, err
    assert "matched by kernel type and signature (no markers, no hand-off)" in out
    checked = 0
    for path in sorted(db.glob("*.csv")):
        for row in read_rows(path):
            if not row["Profiling Count"]:
                continue
            assert row["MicroBench Method"] == "msprof (type + signature)", path.name
            assert row["MicroBench Samples"] == row["Profiling Count"]
            assert float(row["MicroBench Median Duration(us)"]) == pytest.approx(
                float(row["Profiling Median Duration(us)"]), rel=1e-9)
            assert float(row["Average Duration(us)"]) == pytest.approx(
                float(row["Profiling Median Duration(us)"]), rel=1e-9)
            for name in COUNTERS:
                if row[f"Profiling Average {name}"]:
                    assert float(row[f"MicroBench {name}"]) == pytest.approx(
                        float(row[f"Profiling Average {name}"]), rel=1e-9), name
            checked += 1
    assert checked >= 5


def test_dry_run_writes_nothing_and_missing_only_leaves_measured_rows(db, tmp_path, npuperf):
    rms = next(r for r in CaseCatalog(db).cases() if r.kernel_type == "RmsNorm")
    mm = next(r for r in CaseCatalog(db).cases() if r.position == 1)  # has 12.5 already
    summaries(prof_dir(tmp_path / "prof"), calls("RmsNorm", T0 + 10, 3)
              + calls("MatMulV2", T0 + 210, 3), [Range(rms.case_id, T0, T0 + 100),
                                                 Range(mm.case_id, T0 + 200, T0 + 300)])
    before = tree_digest(db)
    code, out, _ = npuperf("backfill", "--profile", tmp_path / "prof", "--db", db,
                           "--dry-run")
    assert code == 0 and "dry run: nothing written" in out and tree_digest(db) == before
    code, out, _ = npuperf("backfill", "--profile", tmp_path / "prof", "--db", db,
                           "--update-mode", "missing-only")
    assert code == 0 and "missing-only: 1 case(s) whose row already has a duration" in out
    assert read_rows(db / "MatMulV2.csv")[1]["Average Duration(us)"] == "12.5"
    assert read_rows(db / "RmsNorm.csv")[0]["Average Duration(us)"] != ""


def test_bad_paths_are_one_line_errors(tmp_path, npuperf):
    code, _, err = npuperf("backfill", "--profile", tmp_path, "--db",
                           tmp_path / "nodb")
    assert code == 2 and err.count("\n") == 1
    assert "--db: " in err and "nodb: no such directory" in err
    db = write_db(tmp_path / "db", {"RmsNorm": RMSNORM_ROWS})
    code, _, err = npuperf("backfill", "--profile", tmp_path / "none", "--db", db)
    assert code == 2 and err.strip().endswith("no such file or directory")


def test_a_hand_off_of_the_first_format_is_a_one_line_error(db, tmp_path, npuperf):
    """A run directory of an npuperf that wrote the first hand-off format (one JSON object
    per case) names the format instead of failing deep inside."""
    import json

    k_rms = calls("RmsNorm", T0 + 10, 3, base=4.0)
    summaries(prof_dir(tmp_path / "run"), k_rms, [])
    (tmp_path / "run" / "npuperf_handoff.jsonl").write_text(
        json.dumps({"schema": "npuperf-handoff/1", "session": {}}) + "\n"
        + json.dumps({"result": {"case_id": "RmsNorm-x"}}) + "\n")
    code, _, err = npuperf("backfill", "--profile", tmp_path / "run", "--db", db)
    assert code == 1 and err.count("\n") == 1, err
    assert "another npuperf version (schema npuperf-handoff/1)" in err


def test_a_large_runs_history_recorded_by_a_child_is_the_same_and_fails_the_same(
        db, tmp_path, npuperf, monkeypatch):
    """Past CHILD_MIN_CASES the history is recorded by a child process while the figures and
    reports are made: the run reads back as one recorded here would, the reports say where
    it went; a history the child cannot write fails the run with the same note, and the
    database and the reports are still written."""
    from pytest_npuperf.history import recorder
    from pytest_npuperf.history.store import HistoryStore

    refs = {r.kernel_type + str(r.position): r for r in CaseCatalog(db).cases()}
    rms, mm = refs["RmsNorm0"], refs["MatMulV21"]
    summaries(prof_dir(tmp_path / "prof"), calls("RmsNorm", T0 + 10, 6, base=4.0)
              + calls("MatMulV2", T0 + 1010, 5, base=9.0),
              [Range(rms.case_id, T0, T0 + 100), Range(mm.case_id, T0 + 1000, T0 + 1100)])
    histories = {}
    for name, min_cases in (("here", 10**9), ("child", 1)):
        monkeypatch.setattr(recorder, "CHILD_MIN_CASES", min_cases)
        histories[name] = tmp_path / f"{name}.sqlite"
        code, out, err = npuperf("backfill", "--profile", tmp_path / "prof", "--db", db,
                                 "--history", histories[name])
        assert code == 0, err
        assert ("history recorded by a child process" in out) == (name == "child")
        assert f"recorded in {histories[name]} (2 case(s))" in out
    report = max(db.glob("reports/replay_report_*.md"), key=lambda p: p.stat().st_mtime)
    assert f"recorded in {histories['child']} (2 case(s))" in report.read_text()
    read = {}
    for name, path in histories.items():
        with HistoryStore(path, readonly=True) as store:
            [run] = store.runs()
            read[name] = sorted((c.key, c.median_us, c.samples) for c in
                                store.run_cases(run.run_id))
    assert read["child"] == read["here"] and len(read["child"]) == 2

    import sqlite3

    with sqlite3.connect(histories["child"]) as conn:
        conn.execute("CREATE TRIGGER refuse BEFORE INSERT ON cases "
                     "BEGIN SELECT RAISE(ABORT, 'refused by the test'); END")
    reports = len(list(db.glob("reports/run_*.json")))
    code, out, err = npuperf("backfill", "--profile", tmp_path / "prof", "--db", db,
                             "--history", histories["child"])
    assert code == 1
    assert "history not recorded: " in out + err and "refused by the test" in out + err
    assert "run not recorded in" in out + err
    assert len(list(db.glob("reports/run_*.json"))) == reports + 1
    with HistoryStore(histories["child"], readonly=True) as store:
        assert len(store.runs()) == 1
