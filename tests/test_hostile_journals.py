"""Run journals and --npuperf-resume on hostile input (issue 29): a journal's values are
checked before they are written, a journal is continued only by a run of its own database and
device, never over newer values, and a resume never reads or deletes a file outside the
output directory. Every try here failed before: taken as written, deleted, or a traceback."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch  # noqa: F401 (imported once, before the in-process sessions import it)

from pytest_npuperf.db.errors import NpuperfError
from pytest_npuperf.harness.journal import (
    LAST,
    Journal,
    check_journal_dir,
    journal_path,
    journaled_results,
    load_resume,
    resumable,
    successor_header,
    supersede,
)
from pytest_npuperf.history.records import KIND_KERNEL, CaseRecord, RunRecord
from pytest_npuperf.history.store import HistoryStore
from pytest_npuperf.measure.result import CaseResult

from .replay_project import BENCH, FAST, cells, write_db

SOURCE = "/data/db/ATLAS_800_A3_752T_128G_DIE/vllm_ascend/vllm0.18.0_torch2.9.0_cann8.5"
DEVICE = "CPU_TEST"


def _result(case: str, samples=(10.0, 11.0, 12.0), device: str = DEVICE) -> CaseResult:
    result = CaseResult(case_id=case, nodeid=f"bench/test_kernels.py::test_kernel[{case}]",
                        kernel_type="Add", file="Add.csv", signature="abcd1234", row=1,
                        device=device)
    result.set_samples(list(samples))
    return result


def _journal(out: Path, run_id: str, results: list, *, source: str = SOURCE,
             started: float = 1_000.0, **header) -> Path:
    journal = Journal(journal_path(out, run_id),
                      {"run_id": run_id, "source": source, "device": DEVICE,
                       **successor_header({}, run_id=run_id, started=started), **header})
    for result in results:
        journal.append(result)
    journal.close()
    return journal.path


def _edited(path: Path, case: str, change) -> None:
    """The journal with the result of `case` edited by hand (`change(result dict)`)."""
    lines = []
    for line in path.read_text().splitlines():
        record = json.loads(line)
        if record.get("kind") == "result" and record["result"]["case_id"] == case:
            change(record["result"])
        lines.append(json.dumps(record))
    path.write_text("\n".join(lines) + "\n")


# -- the values a journal holds --------------------------------------------------------------------
@pytest.mark.parametrize("change, why", [
    (lambda r: r["stats"].update(median=-5.0, min=-5.0), "a duration of -5.0 us"),
    (lambda r: r["stats"].update(median=1e308, max=1e308, mean=1e308),
     "a duration of 1e+308 us"),
    (lambda r: r["stats"].update(mean=math.nan), "a duration of nan us"),
    (lambda r: r["stats"].update(min=50.0), "statistics that contradict each other"),
    (lambda r: r.update(samples=[1.0, -3.0]), "samples that are no durations"),
    (lambda r: r.update(status="great"), "status 'great'"),
    (lambda r: r.update(case_id=7), "fields of the wrong type"),
    (lambda r: r.update(stats="fast"), "unreadable"),
])
def test_a_journaled_value_that_is_no_measurement_is_measured_again(tmp_path, change, why):
    path = _journal(tmp_path, "run1", [_result("Add-a"), _result("Add-b")])
    _edited(path, "Add-b", change)
    _, results, notes = journaled_results(path)
    assert [r.case_id for r in results] == ["Add-a"]
    [note] = notes
    assert "1 journaled result(s) left out and measured again" in note and why in note


def test_a_later_good_result_of_a_case_replaces_its_bad_one(tmp_path):
    path = _journal(tmp_path, "run1", [_result("Add-a"), _result("Add-a", samples=(20.0,))])
    _edited(path, "Add-a", lambda r: None)
    lines = path.read_text().splitlines()
    bad = json.loads(lines[1])
    bad["result"]["stats"]["median"] = -1.0
    path.write_text("\n".join([lines[0], json.dumps(bad), lines[2]]) + "\n")
    _, [result], notes = journaled_results(path)
    assert result.value == 20.0 and not notes


def test_results_of_another_device_are_measured_again_and_a_foreign_journal_refused(tmp_path):
    out = tmp_path / "out"
    path = _journal(out, "run1", [_result("Add-a"), _result("Add-b", device="CUDA_NVIDIA_H200")])
    _, _, results, notes = load_resume(out, LAST, source=SOURCE, device=DEVICE, history=None)
    assert [r.case_id for r in results] == ["Add-a"]
    assert "1 journaled result(s) of another device ('CUDA_NVIDIA_H200')" in notes[-1]
    with pytest.raises(NpuperfError, match="measured on 'CPU_TEST', this run measures on "
                                           "CUDA_NVIDIA_H200: resume it on its own device"):
        load_resume(out, "run1", source=SOURCE, device="CUDA_NVIDIA_H200", history=None)
    # A journal of an older release names no device: its results say it.
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    del lines[0]["device"]
    path.write_text("".join(json.dumps(r) + "\n" for r in lines))
    with pytest.raises(NpuperfError, match="measured on 'CPU_TEST'"):
        load_resume(out, "run1", source=SOURCE, device="CPU_OTHER", history=None)
    assert path.exists()


# -- whose journal it is -----------------------------------------------------------------------------
def test_resume_takes_only_a_journal_of_its_own_database(tmp_path):
    out = tmp_path / "out"
    other = _journal(out, "run1", [_result("Add-a")], source="/elsewhere/db")
    with pytest.raises(NpuperfError, match=r"no unfinished run journal of .* \(of other databases: "
                                           "run1 of /elsewhere/db"):
        resumable(out, LAST, SOURCE)
    with pytest.raises(NpuperfError, match="run run1 measured database '/elsewhere/db', not "
                                           ".*: resume it with its own --npuperf-db"):
        load_resume(out, "run1", source=SOURCE, device=DEVICE, history=None)
    assert other.exists()
    ours = _journal(out, "run2", [_result("Add-b")])
    assert resumable(out, LAST, SOURCE) == ours


@pytest.mark.parametrize("ref", ["../../victim", "ABSOLUTE", "..", "a/b", ".hidden",
                                 "x" * 200, "run\n1"])
def test_a_resume_ref_that_is_not_a_run_id_is_refused_before_any_file_is_read(tmp_path, ref):
    victim = tmp_path / "victim.jsonl"
    victim.write_text('{"kind": "run"}\n')
    if ref == "ABSOLUTE":  # the victim's own absolute path, without its suffix
        ref = str(tmp_path / "victim")
    with pytest.raises(NpuperfError, match="not a run id"):
        resumable(tmp_path / "out" / "a" / "b", ref, SOURCE)
    assert victim.exists()


def test_a_superseded_journal_is_not_offered_again(tmp_path):
    """A resume killed in its turn leaves two journals: the one it continued is superseded
    (all its results are in the newer one), and `last` never restores it later."""
    out = tmp_path / "out"
    first = _journal(out, "run1", [_result("Add-a")])
    second = _journal(out, "run2", [_result("Add-a"), _result("Add-b")],
                      **successor_header(json.loads(first.read_text().splitlines()[0]),
                                         run_id="run2", started=2_000.0))
    supersede(first, "run2")
    assert resumable(out, LAST, SOURCE) == second
    header, _, _ = journaled_results(second)
    assert header["lineage"] == ["run2", "run1"] and header["measured_since"] == 1_000.0
    second.unlink()
    with pytest.raises(NpuperfError, match="no unfinished run journal"):
        resumable(out, LAST, SOURCE)


def test_a_journal_older_than_a_run_recorded_since_is_not_restored(tmp_path):
    out = tmp_path / "out"
    history = out / "history.sqlite"
    _journal(out, "run1", [_result("Add-a")], started=1_000.0)
    with HistoryStore(history) as store:  # the journal's own run, recorded partial: no bar
        store.record(RunRecord(run_id="run1", started=1_000.0, device=DEVICE, source=SOURCE,
                               cases=1), [CaseRecord(KIND_KERNEL, "Add-a", "Add")])
    assert load_resume(out, LAST, source=SOURCE, device=DEVICE, history=history)[2]
    with HistoryStore(history) as store:  # another device, another database: no bar either
        store.record(RunRecord(run_id="gpu", started=1_500.0, device="CUDA_X", source=SOURCE,
                               cases=1), [])
        store.record(RunRecord(run_id="other", started=1_500.0, device=DEVICE,
                               source="/elsewhere", cases=1), [])
    assert load_resume(out, LAST, source=SOURCE, device=DEVICE, history=history)[2]
    with HistoryStore(history) as store:
        store.record(RunRecord(run_id="run9", started=5_000.0, device=DEVICE, source=SOURCE,
                               cases=4), [])
    with pytest.raises(NpuperfError, match="run run9, recorded since, wrote .* resuming would "
                                           "put older values over its newer ones"):
        load_resume(out, LAST, source=SOURCE, device=DEVICE, history=history)


def test_a_file_named_runs_is_refused_before_the_first_case(tmp_path):
    (tmp_path / "runs").write_text("not a directory")
    with pytest.raises(NpuperfError, match="runs: not a directory: the run journal is kept"):
        check_journal_dir(tmp_path)
    journal = Journal(journal_path(tmp_path, "run1"), {"run_id": "run1"})
    assert "runs/run1.jsonl" in journal.failure  # and it writes nothing more, raising nothing
    journal.append(_result("Add-a"))


# -- sessions ------------------------------------------------------------------------------------
def _rows(*kinds: str) -> list[dict]:
    """Add rows in order: `ok` ones, and `bad` ones whose case fails (three dtypes for two
    shape slots): `-x` stops the session there, a partial run whose journal stays."""
    return [cells(f"{m},16;{m},16", "FLOAT;FLOAT" + (";FLOAT" if kind == "bad" else ""),
                  "ND;ND", f"{m},16", "FLOAT") for m, kind in enumerate(kinds, start=2)]


@pytest.fixture
def project(pytester):
    pytester.makepyfile(**{"bench/test_kernels": BENCH})
    return pytester, write_db(pytester.path / "db", {"Add": _rows("ok", "bad", "ok")})


def _bench(pytester, db, *args):
    return pytester.runpytest("bench", "--npuperf-db", str(db), "--npuperf-out",
                              str(pytester.path / "out"), *FAST, "-p", "no:randomly", *args)


def _journals(pytester) -> list[Path]:
    return sorted((pytester.path / "out" / "runs").glob("*.jsonl"),
                  key=lambda p: p.stat().st_mtime)


def test_a_session_with_a_file_named_runs_stops_before_its_first_case(project):
    pytester, db = project
    (pytester.path / "out").mkdir()
    (pytester.path / "out" / "runs").write_text("kept")
    result = _bench(pytester, db)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert "runs: not a directory" in result.stderr.str() and "INTERNALERROR" not in \
        result.stdout.str() + result.stderr.str()
    assert (pytester.path / "out" / "runs").read_text() == "kept"


@pytest.mark.slow
def test_a_dry_run_or_another_database_never_takes_or_deletes_a_journal(project):
    pytester, db = project
    _bench(pytester, db, "-x").assert_outcomes(passed=1, failed=1)
    [journal] = _journals(pytester)
    dry = _bench(pytester, db, "--npuperf-resume", "last", "--npuperf-dry-run")
    dry.assert_outcomes(passed=1, deselected=2)
    assert journal.exists()  # nothing was written: the run is still to be completed
    other = write_db(pytester.path / "db2", {"Add": _rows("ok", "bad", "ok")})
    refused = _bench(pytester, other, "--npuperf-resume", journal.stem)
    assert refused.ret == pytest.ExitCode.USAGE_ERROR
    assert "resume it with its own --npuperf-db" in refused.stderr.str()
    assert journal.exists()
    done = _bench(pytester, db, "--npuperf-resume", "last")
    done.assert_outcomes(passed=1, deselected=2)
    assert not journal.exists()


@pytest.mark.slow
def test_a_resume_stopped_in_its_turn_leaves_one_journal_to_resume(pytester):
    """Run 1 stops at its second case; its resume (run 2) stops two cases later. Before, run
    1's journal stayed resumable after run 2's was completed, and a later `last` put its old
    values over newer ones."""
    pytester.makepyfile(**{"bench/test_kernels": BENCH})
    db = write_db(pytester.path / "db", {"Add": _rows("ok", "bad", "ok", "bad", "ok")})
    _bench(pytester, db, "-x").assert_outcomes(passed=1, failed=1)
    [first] = _journals(pytester)
    _bench(pytester, db, "-x", "--npuperf-resume", "last").assert_outcomes(
        passed=1, failed=1, deselected=2)
    second = _journals(pytester)[-1]
    assert second != first and first.exists()
    assert "superseded_by" in first.read_text().splitlines()[-1]
    done = _bench(pytester, db, "--npuperf-resume", "last")
    done.assert_outcomes(passed=1, deselected=4)
    assert not first.exists() and not second.exists()
    again = _bench(pytester, db, "--npuperf-resume", "last")
    assert again.ret == pytest.ExitCode.USAGE_ERROR
