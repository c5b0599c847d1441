"""The run history (SQLite): whole runs or nothing, upserts, schema versions, baselines, and the
`npuperf history / compare / merge` commands."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import numpy as np
import pytest

from pytest_npuperf.cli import main
from pytest_npuperf.db.errors import NpuperfError
from pytest_npuperf.history import store as store_module
from pytest_npuperf.history.baseline import resolve_baseline, resolve_run
from pytest_npuperf.history.records import (
    KIND_COLLECTIVE,
    KIND_KERNEL,
    CaseRecord,
    RunRecord,
    collective_key,
)
from pytest_npuperf.history.store import (
    SPREAD_EXTRA,
    HistoryError,
    HistoryStore,
    _python_json_functions,
    schema_version,
)

DEVICE = "CPU_TEST"


def samples(median: float, n: int = 50, seed: int = 0) -> list[float]:
    rng = np.random.default_rng(seed)
    return [float(v) for v in median * (1 + 0.01 * rng.standard_normal(n))]


def kernel(key: str, median: float, *, status: str = "ok", seed: int = 0,
           verdict: str = "") -> CaseRecord:
    values = samples(median, seed=seed)
    return CaseRecord(kind=KIND_KERNEL, key=key, kernel=key.split("-")[0], signature=key[-8:],
                      status=status, method="events", value_us=median, median_us=median,
                      min_us=min(values), samples_count=len(values), samples=values,
                      extra={"file": "MatMulV2.csv"}, verdict=verdict)


def run(run_id: str, started: float, *, passed: bool = True, device: str = DEVICE) -> RunRecord:
    return RunRecord(run_id=run_id, started=started, started_iso=f"2026-01-0{int(started)}",
                     device=device, device_kind="cpu", stack={"torch": "2.13.0"}, host="h",
                     git_commit="abc123", options={"threads": 1}, passed=passed,
                     exit_status=0 if passed else 1)


A, B = "MatMulV2-16x64x32-FLOAT-aaaaaaaa", "MatMulV2-8x128x64-FLOAT-bbbbbbbb"


@pytest.fixture
def history(tmp_path) -> Path:
    path = tmp_path / "history.sqlite"
    with HistoryStore(path) as store:
        store.record(run("r1", 1), [kernel(A, 10.0, seed=1), kernel(B, 20.0, seed=2)])
        # A night that failed: A was SLOWER, a change rather than the case's noise.
        store.record(run("r2", 2, passed=False), [kernel(A, 15.0, seed=3, verdict="SLOWER"),
                                                  kernel(B, 20.0, seed=4)])
        store.record(run("r3", 3), [kernel(A, 10.2, seed=5)])
    return path


def test_a_run_is_recorded_whole_and_reads_back(history):
    with HistoryStore(history, readonly=True) as store:
        assert [r.run_id for r in store.runs()] == ["r1", "r2", "r3"]
        first = store.run("r1")
        assert first.stack == {"torch": "2.13.0"} and first.passed is True
        cases = {c.key: c for c in store.run_cases("r1")}
    assert cases[A].samples == pytest.approx(samples(10.0, seed=1), rel=1e-6)  # float32
    assert cases[A].extra == {"file": "MatMulV2.csv"} and cases[B].median_us == 20.0


def test_recording_a_run_again_updates_it_and_duplicates_nothing(history):
    with HistoryStore(history) as store:
        store.record(run("r1", 1), [kernel(A, 11.0, seed=1), kernel(B, 20.0, seed=2)])
        assert len(store.runs()) == 3
        assert {c.key: c.median_us for c in store.run_cases("r1")}[A] == 11.0
    with sqlite3.connect(history) as db:
        assert db.execute("SELECT count(*) FROM cases").fetchone()[0] == 5
        assert db.execute("SELECT count(*) FROM samples").fetchone()[0] == 5


def test_a_failed_write_records_nothing(history):
    bad = kernel(A, 1.0)  # Ctrl-C while its samples are written: the whole run is rolled back
    with HistoryStore(history) as store:
        with pytest.raises(KeyboardInterrupt):
            store.record(run("r4", 4), [kernel(B, 1.0), _interrupting(bad)])
        assert [r.run_id for r in store.runs()] == ["r1", "r2", "r3"]


def _interrupting(record: CaseRecord) -> CaseRecord:
    class Interrupting(CaseRecord):
        def __getattribute__(self, name):
            if name == "samples":
                raise KeyboardInterrupt
            return super().__getattribute__(name)
    return Interrupting(**{k: getattr(record, k) for k in record.__dataclass_fields__})


def test_collective_points_share_the_tables(tmp_path):
    key = collective_key("all_reduce", 1 << 24, 8, "DT_BF16", 1)
    assert key == "all_reduce-16777216B-8r-DT_BF16-tier1"
    point = CaseRecord(kind=KIND_COLLECTIVE, key=key, kernel="all_reduce", status="ok",
                       message_bytes=1 << 24, num_devices=8, dtype="DT_BF16", tier=1,
                       busbw_gbps=180.5, samples=[100.0] * 10, median_us=100.0)
    with HistoryStore(tmp_path / "h.sqlite") as store:
        store.record(run("c1", 1), [point, kernel(A, 10.0)])
        (found,) = store.trend(kernel="all_reduce")
    assert found.kind == KIND_COLLECTIVE and found.busbw_gbps == 180.5 and found.tier == 1


def test_a_collective_case_is_recorded_and_judged_against_its_baseline(tmp_path):
    """A collective result (comm/collective_result.py) as a history record, and its samples judged
    against the same point of an earlier run: a 1.5x slower all_reduce is SLOWER, the same
    one is not, a point the baseline lacks is NEW."""
    from pytest_npuperf.comm.collective_result import CommResult, RankTimes
    from pytest_npuperf.comm.sweep import CommPoint
    from pytest_npuperf.history.baseline import judge_samples
    from pytest_npuperf.history.convert import collective_record

    def result(median: float, seed: int, size: int = 1 << 20) -> CommResult:
        values = samples(median, seed=seed)
        times = RankTimes(1, float(np.median(values)), float(np.mean(values)), min(values),
                          max(values), median * 0.99, median * 1.01, len(values))
        return CommResult(CommPoint("all_reduce", size, 2, "DT_FLOAT", 1, (0, 1)),
                          method="events", backend="gloo", device=DEVICE,
                          duration_us=times.median, ranks=[times], straggler_rank=1,
                          samples=values)

    record = collective_record(result(100.0, seed=1))
    assert record.kind == KIND_COLLECTIVE and record.kernel == "all_reduce"
    assert record.key == "all_reduce-1048576B-2r-DT_FLOAT-tier1" and record.num_devices == 2
    assert record.busbw_gbps == pytest.approx(record.algbw_gbps)  # 2 ranks: factor 1
    with HistoryStore(tmp_path / "h.sqlite") as store:
        store.record(run("c1", 1), [record])
        # a second night 0.5 % apart: the point's spread from night to night is known
        store.record(run("c2", 2), [collective_record(result(100.5, seed=5))])
    baseline = resolve_baseline("last", history=tmp_path / "h.sqlite", device=DEVICE)
    try:
        verdicts = []
        for new in (result(150.0, seed=2), result(100.0, seed=3), result(9.0, 4, size=1024)):
            new.regression = judge_samples(KIND_COLLECTIVE, collective_record(new).key,
                                           new.samples, baseline, 0.05).to_dict()
            verdicts.append(new.regression["verdict"])
        assert verdicts[0] == "SLOWER" and verdicts[1] in ("SAME", "UNCERTAIN")
        assert verdicts[2] == "NEW"
        assert collective_record(new).verdict == "NEW"
    finally:
        baseline.close()


def test_schema_version_migrations_and_foreign_files(tmp_path, monkeypatch):
    path = tmp_path / "h.sqlite"
    with HistoryStore(path) as store:
        store.record(run("r1", 1), [kernel(A, 10.0)])
    with sqlite3.connect(path) as db:
        assert db.execute("PRAGMA user_version").fetchone()[0] == schema_version() == 1

    def add_note_column(conn):
        conn.execute("ALTER TABLE runs ADD COLUMN note TEXT")

    monkeypatch.setattr(store_module, "MIGRATIONS", [*store_module.MIGRATIONS, add_note_column])
    with pytest.raises(HistoryError, match="older than 2"):
        HistoryStore(path, readonly=True)
    with HistoryStore(path) as store:  # a writer migrates, keeping what was there
        assert [c.key for c in store.run_cases("r1")] == [A]
    with sqlite3.connect(path) as db:
        assert db.execute("PRAGMA user_version").fetchone()[0] == 2
        assert "note" in [row[1] for row in db.execute("PRAGMA table_info(runs)")]
    monkeypatch.undo()
    with pytest.raises(HistoryError, match="newer than this pytest_npuperf"):
        HistoryStore(path)

    other = tmp_path / "other.sqlite"
    with sqlite3.connect(other) as db:
        db.execute("CREATE TABLE t (x)")
    with pytest.raises(NpuperfError, match="not a pytest_npuperf history"):
        HistoryStore(other)
    text = tmp_path / "text.sqlite"
    text.write_text("hello\n" * 100)
    with pytest.raises(NpuperfError, match="not an SQLite database"):
        HistoryStore(text)


def test_baselines_last_last_good_run_id_and_files(history, tmp_path):
    last = resolve_baseline("last", history=history, device=DEVICE, before=10)
    # The fastest of the newest three runs' measurements, and the spread of its good runs:
    # r2's SLOWER measurement is a change, not the case's noise.
    assert last.case(KIND_KERNEL, A).run_id == "r1"
    assert last.case(KIND_KERNEL, A).extra["run_to_run"] == pytest.approx(0.02)
    assert last.case(KIND_KERNEL, A).extra["spread_runs"] == 2
    assert last.case(KIND_KERNEL, "nope") is None
    last.close()
    good = resolve_baseline("last-good", history=history, device=DEVICE, before=10,
                            exclude=("r3",))
    assert good.case(KIND_KERNEL, A).run_id == "r1"  # r2 failed, r3 is this run
    good.close()
    other_device = resolve_baseline("last", history=history, device="CPU_OTHER")
    assert other_device.case(KIND_KERNEL, A) is None
    assert resolve_baseline("r2", history=history).case(KIND_KERNEL, B).median_us == 20.0
    with pytest.raises(NpuperfError, match="no run 'zz'"):
        resolve_baseline("zz", history=history)
    with pytest.raises(NpuperfError, match="names 3 runs"):
        resolve_baseline("r", history=history)
    as_file = resolve_baseline(str(history), history=None, device=DEVICE)
    assert as_file.case(KIND_KERNEL, B) is not None
    as_file.close()
    empty = resolve_baseline("last", history=tmp_path / "none.sqlite")
    assert empty.case(KIND_KERNEL, A) is None and "no history yet" in empty.label
    new_run, cases = resolve_run("last", history=history)
    assert new_run.run_id == "r3" and [c.key for c in cases] == [A]


def run_json(path: Path, run_id: str, medians: dict[str, float]) -> Path:
    from pytest_npuperf.db.samples import samples_text

    cases = [{"case_id": key, "kernel_type": "MatMulV2", "status": "ok", "value": m,
              "stats": {"samples": 50, "median": m}, "samples_z": samples_text(samples(m))}
             for key, m in medians.items()]
    data = {"schema": "npuperf-run/1", "run_id": run_id, "stamp": "20260101_000000",
            "session": {"started": "2026-01-05T00:00:00",
                        "device": {"database_device": DEVICE, "kind": "cpu"}},
            "database": {}, "cases": cases}
    path.write_text(json.dumps(data))
    return path


def test_cli_compare_history_and_merge(history, tmp_path, capsys):
    new = run_json(tmp_path / "run_new.json", "r9", {A: 15.5, B: 20.1})
    assert main(["compare", "last-good", str(new), "--history", str(history)]) == 1
    out = capsys.readouterr().out
    assert "SLOWER (1), worst first:" in out and A in out and "1.5" in out
    assert main(["compare", "r1", str(new), "--history", str(history), "--csv"]) == 1
    rows = capsys.readouterr().out.splitlines()
    assert rows[0].startswith("kind,case,kernel,verdict") and rows[1].split(",")[3] == "SLOWER"

    assert main(["history", "--history", str(history), "--kernel", "MatMulV2",
                 "--signature", "aaaaaaaa"]) == 0
    out = capsys.readouterr().out
    assert A in out and B not in out and "+50.0%" in out and "r3" in out
    assert main(["history", "--history", str(history), "--csv", "--last", "1"]) == 0
    rows = capsys.readouterr().out.splitlines()
    assert len(rows) == 3 and rows[0].startswith("kind,case,kernel")
    assert main(["history", "--history", str(history), "--kernel", "Nope"]) == 1
    assert "no measurement of kernel 'Nope'" in capsys.readouterr().err

    merged = tmp_path / "merged.sqlite"
    for _ in range(2):  # merging again changes nothing
        assert main(["merge", "--history", str(merged), str(history), str(new)]) == 0
        assert "it holds 4 run(s)" in capsys.readouterr().out
    with sqlite3.connect(merged) as db:
        assert db.execute("SELECT count(*) FROM cases").fetchone()[0] == 7


def test_cli_compare_names_a_shift_of_the_whole_run(tmp_path, capsys):
    keys = [f"MatMulV2-{m}x64x64-FLOAT-{m:08x}" for m in range(1, 7)]
    base = run_json(tmp_path / "run_base.json", "b1", dict.fromkeys(keys, 10.0))
    moved = run_json(tmp_path / "run_moved.json", "m1", dict.fromkeys(keys, 13.0))
    assert main(["compare", str(base), str(moved), "--history", "none"]) == 0
    out = capsys.readouterr().out
    # one move of the host, not six kernel regressions
    assert "6 case(s): 6 UNCERTAIN" in out and "the whole run moved: median ratio 1.300x" in out
    assert "note: the whole run moved: median ratio 1.300x over 6 compared case(s)" in out
    assert "the host's move (or the stack's), not 6 kernel changes; 0 case(s) SLOWER" in out
    one = run_json(tmp_path / "run_one.json", "o1", {**dict.fromkeys(keys, 10.0), keys[0]: 13.0})
    # without a history no case's spread from night to night is known: no SLOWER
    assert main(["compare", str(base), str(one), "--history", "none"]) == 0
    out = capsys.readouterr().out
    assert "whole run moved" not in out and "no session-to-session spread known" in out


def test_cli_errors_are_one_line(history, tmp_path, capsys):
    for argv, code, text in [
        (["compare", "last", "nope.json", "--history", str(history)], 2, "nope.json: no such file"),
        (["compare", "zz", "last", "--history", str(history)], 2, "no run 'zz'"),
        (["compare", "last", "last", "--threshold", "-1"], 2, "expected a fraction >= 0"),
        (["merge", str(history)], 2, "name the history to merge it into"),
        (["merge", "--history", str(history), str(history)], 2, "the target history itself"),
        (["merge", "--history", str(tmp_path / "m.sqlite"), str(tmp_path)], 2,
         "name the database to merge it into"),
        (["history", "--history", str(tmp_path / "none.sqlite")], 2, "no such history file"),
    ]:
        try:
            status = main(argv)
        except SystemExit as exc:  # argparse's own usage errors
            status = exc.code
        assert status == code, argv
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and text in err, (argv, err)
    bad = tmp_path / "bad.json"
    bad.write_text("{}")
    assert main(["compare", "last", str(bad), "--history", str(history)]) == 1
    assert "not a run JSON file" in capsys.readouterr().err


@pytest.mark.parametrize("verb", ["history", "compare", "merge"])
def test_every_new_verb_explains_itself(verb, capsys):
    with pytest.raises(SystemExit) as exit_info:
        main([verb, "--help"])
    assert exit_info.value.code == 0
    assert len(capsys.readouterr().out) > 400


def test_a_run_recorded_in_batches_reads_back_as_recorded_one_by_one(tmp_path, monkeypatch):
    """Batches smaller than the run: a case listed twice (the later wins), cases without
    samples (their old samples go), a run recorded again."""
    monkeypatch.setattr(store_module, "RECORD_BATCH", 3)
    keys = [f"MatMulV2-{i}x64x32-FLOAT-{i:08x}" for i in range(8)]
    first = [kernel(k, 10.0 + i, seed=i) for i, k in enumerate(keys)]
    again = [kernel(k, 20.0 + i, seed=i) for i, k in enumerate(keys)]
    again[2].samples, again[5].samples = [], []
    again.append(kernel(keys[0], 99.0, seed=9))  # listed twice: the later one is kept
    path = tmp_path / "history.sqlite"
    with HistoryStore(path) as store:
        assert store.record(run("r1", 1), iter(first)) == 8
        assert store.record(run("r1", 1), (c for c in again)) == 9
        cases = {c.key: c for c in store.run_cases("r1")}
    assert cases[keys[0]].median_us == 99.0
    assert cases[keys[0]].samples == pytest.approx(samples(99.0, seed=9), rel=1e-6)
    assert cases[keys[2]].samples == [] and cases[keys[5]].samples == []
    assert cases[keys[7]].median_us == 27.0
    with sqlite3.connect(path) as db:
        assert db.execute("SELECT count(*) FROM cases").fetchone()[0] == 8
        assert db.execute("SELECT count(*) FROM samples").fetchone()[0] == 6


def test_many_verdicts_at_once_are_each_case_judged_alone(history, monkeypatch):
    """judge_many (a large run's end: baselines found in bulk, samples compared at once)
    gives every case the verdict judge gives it alone, batch after batch."""
    from pytest_npuperf.history import baseline as baseline_module
    from pytest_npuperf.history.baseline import judge, judge_many
    from pytest_npuperf.measure.result import CaseResult

    monkeypatch.setattr(baseline_module, "JUDGED_AT_ONCE", 2)
    results = []
    for index, (key, median) in enumerate([(A, 10.0), (B, 30.0), (A, 10.1), ("New-1x1", 5.0),
                                           (B, 20.0)]):
        result = CaseResult(case_id=key, nodeid="", kernel_type="MatMulV2", file="f.csv",
                            signature="s")
        result.set_samples(samples(median, n=20, seed=10 + index))
        result.cache = "warm"
        results.append(result)
    results.append(CaseResult(case_id=A, nodeid="", kernel_type="MatMulV2", file="f.csv",
                              signature="s", status="failed"))  # nothing measured: no verdict
    for ref in ("last", "last-good", "r1"):
        one = resolve_baseline(ref, history=history, device=DEVICE, before=10)
        many = resolve_baseline(ref, history=history, device=DEVICE, before=10)
        try:
            alone = [judge(r, one, 0.05) for r in results]
            assert judge_many(results, many, 0.05) == alone, ref
        finally:
            one.close()
            many.close()
    assert {c.verdict for c in alone if c} >= {"SLOWER", "SAME", "NEW"}
    assert alone[-1] is None


def test_a_verdicts_bulk_read_gives_what_the_reads_of_each_case_give(history):
    """verdict_reads (what the verdicts of 10^5 cases read, in one query): per key the
    newest `depth` measurements, of the listed columns (the samples and the run as the whole
    read gives them, the rest at defaults) and the listed keys of extra (those read for every
    measurement and those for the records alone), and the newest
    `values` trusted values, as latest_cases and case_values read them one case at a time;
    the keys asked for next are the ones answered, the same keys twice included."""
    with HistoryStore(history, readonly=True) as store:
        for depth, values in ((1, 10), (2, 1), (3, 2)):
            found = store.verdict_reads(KIND_KERNEL, [A, B, "absent"], device=DEVICE,
                                        depth=depth, values=values, columns=("status",),
                                        extra_keys=("no_such", *SPREAD_EXTRA),
                                        candidate_extra=("file", "cache"))
            assert set(found) == {A, B}
            for key in (A, B):
                records, spread = found[key]
                whole = store.latest_cases(KIND_KERNEL, key, device=DEVICE, limit=depth)
                assert len(records) == len(whole)
                for light, full in zip(records, whole):
                    assert (light.kind, light.key, light.kernel, light.status, light.median_us,
                            light.verdict, light.extra, light.samples, light.run_id) == \
                        (full.kind, full.key, full.kernel, full.status, full.median_us,
                         full.verdict, full.extra, full.samples, full.run_id)
                    assert light.signature == "" and light.min_us is None and full.min_us
                alone = store.case_values(KIND_KERNEL, key, device=DEVICE, limit=values)
                assert [(median, verdict, {k: v for k, v in extra.items() if k in SPREAD_EXTRA},
                         run_id) for median, verdict, extra, run_id in spread] == alone
        before = store.verdict_reads(KIND_KERNEL, [A], device=DEVICE, before=2.5, depth=3)
        assert [r.run_id for r in before[A][0]] == ["r2", "r1"]
        assert set(store.verdict_reads(KIND_KERNEL, [B], device=DEVICE)) == {B}
        # Depth 0: the spread's values alone (a run JSON's baseline), the same keys twice.
        alone = store.verdict_reads(KIND_KERNEL, [A], device=DEVICE, depth=0,
                                    extra_keys=SPREAD_EXTRA)
        assert alone == {A: ([], store.case_values(KIND_KERNEL, A, device=DEVICE))}
        assert store.verdict_reads(KIND_KERNEL, [A], device=DEVICE, depth=0,
                                   extra_keys=SPREAD_EXTRA) == alone
        with pytest.raises(ValueError, match="not columns"):
            store.verdict_reads(KIND_KERNEL, [A], columns=("no_such",))


def test_a_long_history_is_read_from_its_newest_runs_and_a_case_they_lack_from_all(tmp_path):
    """Over more runs than verdict_reads looks at first (what it wants and READ_SLACK more), a
    case the newest runs measured often enough is read from them alone, and one they did not
    (noisy of late, left out of recent selections, measured once long ago, never) from every
    run: the same records and values as latest_cases and case_values read case by case."""
    steady, noisy, dropped, once = (f"MatMulV2-{i}x64x32-FLOAT-{i:08x}" for i in range(1, 5))
    path = tmp_path / "history.sqlite"
    with HistoryStore(path) as store:
        for night in range(30):
            cases = [kernel(steady, 10.0 + night, seed=night)]
            cases.append(kernel(noisy, 20.0 + night, seed=night,
                                status="noisy" if night >= 12 else "ok"))
            if night < 8:
                cases.append(kernel(dropped, 30.0 + night, seed=night))
            if night == 0:
                cases.append(kernel(once, 40.0, seed=night))
            store.record(run(f"n{night:02d}", float(night + 1)), cases)
    statements: list[str] = []
    with HistoryStore(path, readonly=True) as store:
        store.conn.set_trace_callback(statements.append)
        found = store.verdict_reads(KIND_KERNEL, [steady, noisy, dropped, once, "absent"],
                                    device=DEVICE, depth=3, values=10, columns=("status",),
                                    extra_keys=SPREAD_EXTRA)
        store.conn.set_trace_callback(None)
        assert set(found) == {steady, noisy, dropped, once}
        for key, (records, values) in found.items():
            whole = store.latest_cases(KIND_KERNEL, key, device=DEVICE, limit=3)
            assert [(r.run_id, r.status, r.median_us, r.samples) for r in records] == \
                [(r.run_id, r.status, r.median_us, r.samples) for r in whole], key
            assert [(m, v, run_id) for m, v, _, run_id in values] == [
                (m, v, run_id) for m, v, _, run_id in store.case_values(
                    KIND_KERNEL, key, device=DEVICE, limit=10)], key
        assert [r.run_id for r in found[steady][0]] == ["n29", "n28", "n27"]
        assert [run_id for *_, run_id in found[noisy][1]][:2] == ["n11", "n10"]
    reads = [s for s in statements if "npuperf_wanted w CROSS JOIN cases" in s]
    assert len(reads) == 2 and "c.run IN" in reads[0] and "c.run IN" not in reads[1]


def test_the_keys_of_extra_a_verdict_reads_are_read_inside_sqlite_or_in_python(tmp_path):
    """A spread reads a past measurement's cache mode, implementation and preempted flag from
    `extra` inside SQLite (json_extract); an `extra` changed by hand into no JSON reads as
    none, and an SQLite without its JSON functions gets the same from Python ones."""
    path = tmp_path / "h.sqlite"
    marked = kernel(A, 10.0, seed=1)
    marked.extra = {"cache": "cold l2", "impl": "compiled", "preempted_kept": True, "x": [1]}
    with HistoryStore(path) as store:
        store.record(run("r1", 1), [marked, kernel(B, 20.0, seed=2)])
        store.conn.execute("UPDATE cases SET extra = 'not json {' WHERE key = ?", (B,))
        builtin = {key: store.case_values(KIND_KERNEL, key, device=DEVICE)[0][2]
                   for key in (A, B)}
        many = {key: values for key, (_, values) in store.verdict_reads(
            KIND_KERNEL, [A, B], device=DEVICE, depth=0, extra_keys=SPREAD_EXTRA).items()}
        _python_json_functions(store.conn)  # replaces SQLite's own for this connection
        python = {key: store.case_values(KIND_KERNEL, key, device=DEVICE)[0][2]
                  for key in (A, B)}
    assert builtin == python == {key: found[0][2] for key, found in many.items()} == {
        A: {"cache": "cold l2", "impl": "compiled", "preempted_kept": 1}, B: {}}
