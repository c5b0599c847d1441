"""Verdicts that hold from night to night: a change is SLOWER only beyond the case's own
session-to-session spread taken from its recent good runs in the history, the whole run's move
is the host's, and `npuperf compare` judges a run as one."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from pytest_npuperf.history.baseline import judge_samples, resolve_baseline
from pytest_npuperf.history.compare import SAME, SLOWER, UNCERTAIN
from pytest_npuperf.history.records import KIND_KERNEL, CaseRecord, RunRecord
from pytest_npuperf.history.spread import SPREAD_RUNS, good_runs, own_spread, run_levels
from pytest_npuperf.history.store import HistoryStore
from pytest_npuperf.history.views import compare_runs

DEVICE = "CPU_TEST"
WIDE, TIGHT = "MatMulV2-2x5120x320-BF16-aaaaaaaa", "MatMulV2-64x7168x576-BF16-bbbbbbbb"


def samples(median: float, seed: int, n: int = 60) -> list[float]:
    rng = np.random.default_rng(seed)
    return [float(v) for v in median * (1 + 0.01 * rng.standard_normal(n))]


def record(key: str, median: float, seed: int, **extra) -> CaseRecord:
    verdict = extra.pop("verdict", "")
    return CaseRecord(kind=KIND_KERNEL, key=key, kernel=key.split("-")[0], status="ok",
                      method="events",
                      value_us=median, median_us=median, samples=samples(median, seed),
                      samples_count=60, verdict=verdict, stack="torch 2.13.0",
                      extra={"cache": "model (weight cold)", **extra})


def nights(path: Path, medians: dict[str, list[float]]) -> Path:
    """One passed run per night, oldest first, each case with its median that night."""
    with HistoryStore(path) as store:
        for night in range(len(next(iter(medians.values())))):
            store.record(RunRecord(run_id=f"n{night}", started=float(night + 1), device=DEVICE,
                                   passed=True, exit_status=0),
                         [record(key, values[night], seed=10 * night + i)
                          for i, (key, values) in enumerate(medians.items())])
    return path


def judge(history: Path, key: str, median: float, ref: str = "last", **kwargs):
    baseline = resolve_baseline(ref, history=history, device=DEVICE, before=100.0)
    try:
        return judge_samples(KIND_KERNEL, key, samples(median, seed=99), baseline, 0.05,
                             condition="model", stack="torch 2.13.0", **kwargs)
    finally:
        baseline.close()


def test_a_history_that_spread_1_5x_gives_no_slower_for_1_3x_and_one_that_spread_1_percent_does(
        tmp_path):
    history = nights(tmp_path / "h.sqlite", {
        WIDE: [355.0, 585.0, 320.0, 410.0, 480.0],  # issue 29: small-M BF16 GEMMs, quiet host
        TIGHT: [100.0, 100.6, 100.3, 101.0, 100.2]})
    wide = judge(history, WIDE, 1.3 * 320.0)
    assert wide.verdict == UNCERTAIN and wide.p_value < 1e-10  # significant, and no evidence
    assert "its 5 recent good runs spread 82.8 %" in wide.reason
    assert wide.spread == pytest.approx(585 / 320 - 1) and wide.spread_runs == 5
    tight = judge(history, TIGHT, 1.3 * 100.2)
    assert tight.verdict == SLOWER and tight.spread == pytest.approx(0.01)
    assert tight.threshold == pytest.approx(0.05)  # 3x a 1 % spread is below the 5 % asked
    assert judge(history, TIGHT, 100.5).verdict == SAME


def test_one_good_run_gives_no_slower_whatever_the_other_cases_do(tmp_path):
    alone = nights(tmp_path / "one.sqlite", {TIGHT: [100.0]})
    first = judge(alone, TIGHT, 150.0)
    assert first.verdict == UNCERTAIN and "no session-to-session spread known" in first.reason
    # Other cases' quiet nights are no evidence of this one's: still no SLOWER.
    history = nights(tmp_path / "h.sqlite", {WIDE: [100.0, 104.0, 101.0, 102.0]})
    with HistoryStore(history) as store:
        store.record(RunRecord(run_id="late", started=10.0, device=DEVICE, passed=True),
                     [record(TIGHT, 100.0, seed=1)])
    assert judge(history, TIGHT, 150.0).verdict == UNCERTAIN
    # A second good night gives it a spread, held to at least the host's typical one while its
    # runs are few: the median of its 0.5 % and the other case's 4 %.
    with HistoryStore(history) as store:
        store.record(RunRecord(run_id="later", started=11.0, device=DEVICE, passed=True),
                     [record(TIGHT, 100.5, seed=2)])
    within = judge(history, TIGHT, 106.0)
    assert within.verdict == UNCERTAIN and "taken as the host's typical 2.2 %" in within.reason
    found = judge(history, TIGHT, 150.0)
    assert found.verdict == SLOWER and found.spread == pytest.approx(0.0225)


def test_good_runs_are_trusted_unchanged_measurements_in_the_baselines_conditions(tmp_path):
    like = record(TIGHT, 100.0, 0)
    found = [record(TIGHT, 100.0, 1), record(TIGHT, 150.0, 2, verdict="SLOWER"),
             record(TIGHT, 300.0, 3, preempted_kept=True),
             record(TIGHT, 50.0, 4, cache="warm"), record(TIGHT, 60.0, 5, impl="compiled"),
             record(TIGHT, 102.0, 6), record(TIGHT, 101.0, 7)]
    found[-2].status = "noisy"
    with HistoryStore(tmp_path / "h.sqlite") as store:
        for night, case in enumerate(reversed(found)):  # newest first, as read back
            store.record(RunRecord(run_id=f"n{night}", started=night + 1.0, device=DEVICE),
                         [case])
        values = store.case_values(KIND_KERNEL, TIGHT, device=DEVICE)
    assert [v[0] for v in values] == [100.0, 150.0, 300.0, 50.0, 60.0, 101.0]  # ok ones
    assert good_runs(values, like) == [100.0, 101.0]
    assert own_spread([100.0, 110.0, 105.0]) == pytest.approx(0.1)
    assert own_spread([100.0]) is None
    many = [(100.0 + i, "", {"cache": "model"}, f"n{i}") for i in range(2 * SPREAD_RUNS)]
    assert good_runs(many, like) == [100.0 + i for i in range(SPREAD_RUNS)]  # the newest


def test_the_probe_holds_a_case_uncertain_when_it_moved(tmp_path):
    """The baseline nights ran with the host's memory copy at 5 ms; tonight it takes 7 ms and
    the memory-bound GEMM 1.4x as long: the host's move, not the kernel's."""
    with HistoryStore(tmp_path / "h.sqlite") as store:
        for night, median in enumerate((100.0, 100.8, 100.4)):
            store.record(RunRecord(run_id=f"n{night}", started=night + 1.0, device=DEVICE,
                                   passed=True),
                         [record(TIGHT, median, night, reference_us=40.0,
                                 reference_memory_us=5000.0)])
    history = tmp_path / "h.sqlite"
    held = judge(history, TIGHT, 140.0, reference=40.2, memory=7000.0, bound_by="memory")
    assert held.verdict == UNCERTAIN
    assert "the host's memory copy ran 1.40x as long as during the baseline, which accounts for " \
           "the change" in held.reason
    quiet = judge(history, TIGHT, 140.0, reference=40.2, memory=5050.0, bound_by="memory")
    assert quiet.verdict == SLOWER


def _moved_run(tmp_path, keys: list[str], moved: dict[str, float]) -> dict:
    history = nights(tmp_path / "h.sqlite", {k: [10.0, 10.05, 10.1] for k in keys})
    with HistoryStore(history) as store:
        store.record(RunRecord(run_id="moved", started=50.0, device=DEVICE, passed=False),
                     [record(k, m, seed=i) for i, (k, m) in enumerate(moved.items())])
    _, _, found = compare_runs("last", "moved", history=history, threshold=0.05)
    return {item.key: item.comparison for item in found}


def test_npuperf_compare_judges_a_run_that_moved_as_the_hosts_move(tmp_path):
    keys = [f"MatMulV{2 + m % 2}-{m}x64x64-FLOAT-{m:08x}" for m in range(1, 13)]
    moved = {k: 13.0 for k in keys} | {keys[0]: 30.0}  # all 1.3x, one kernel 3x
    verdicts = _moved_run(tmp_path, keys, moved)
    assert verdicts[keys[0]].verdict == SLOWER  # beyond the run's move: the kernel's own
    for key in keys[1:]:
        assert verdicts[key].verdict == UNCERTAIN
        assert verdicts[key].reason.startswith("the whole run moved: median ratio 1.30")


def test_npuperf_compare_finds_one_kernel_type_that_moved_alone(tmp_path):
    """Every shape of one kernel type 1.3x slower, the other type unmoved: that type's
    change, not the host's move, although it is most of the run's cases (a whole run of one
    kernel type cannot tell the two apart: the run's note says it moved)."""
    keys = [f"MatMulV2-{m}x64x64-FLOAT-{m:08x}" for m in range(1, 9)] + \
        [f"MatMulV3-{m}x64x64-FLOAT-{m:08x}" for m in range(1, 6)]
    moved = {k: 13.0 if k.startswith("MatMulV2") else 10.05 for k in keys}
    verdicts = _moved_run(tmp_path, keys, moved)
    assert {verdicts[k].verdict for k in keys if k.startswith("MatMulV2")} == {SLOWER}
    # The other type, unmoved beside a 1.3x move of the rest, says no more than that.
    for key in (k for k in keys if k.startswith("MatMulV3")):
        assert verdicts[key].verdict == UNCERTAIN and "could hide" in verdicts[key].reason


def test_a_fresh_process_replays_the_same_row_with_the_invocations_plugins(tmp_path):
    from pytest_npuperf.harness.fresh import one_row_database, plugin_args, test_function
    from pytest_npuperf.replay.cases import CaseCatalog
    from tests.replay_project import MATMUL_ROWS, write_db

    source = write_db(tmp_path / "src", {"MatMulV2": MATMUL_ROWS})
    catalog = CaseCatalog(source)
    refs = list(catalog.cases())
    ref = refs[1]
    row = catalog.row(ref)
    db = one_row_database(tmp_path / "fresh", source, "CPU_X", ref.file, row)
    assert db.relative_to(tmp_path / "fresh").parts == source.parts[-3:]
    [again] = list(CaseCatalog(db).cases())
    assert again.case_id == ref.case_id and CaseCatalog(db).row(again) == row
    assert plugin_args(["-k", "x", "-p", "slow", "-pno:cacheprovider", "-p=y", "--pdb"]) == [
        "-p", "slow", "-p", "no:cacheprovider", "-p", "y"]
    assert test_function("bench/test_kernels.py::test_kernel[MatMulV2-8x128x64-FLOAT-b9]") \
        == "bench/test_kernels.py::test_kernel"


def test_a_spread_is_net_of_the_nights_the_whole_host_moved(tmp_path):
    """Four nights on a shared host, the whole run 1.0x, 1.2x, 0.95x, 1.1x, each case within
    1 % of its run's level: its own spread is that 1 %, not the host's 26 %; a 1.25x slowdown
    of one kernel type is then SLOWER (with the raw medians it was UNCERTAIN, the spread's 3x
    being 2x)."""
    keys = [f"MatMulV{2 + m % 2}-{m}x64x64-FLOAT-{m:08x}" for m in range(1, 13)]
    rng = np.random.default_rng(5)
    levels = [1.0, 1.2, 0.95, 1.1]
    history = nights(tmp_path / "h.sqlite", {
        key: [10.0 * (m + 1) * level * (1 + 0.004 * rng.standard_normal()) for level in levels]
        for m, key in enumerate(keys)})
    victim = keys[1]  # MatMulV2; its baseline: the fastest of the newest nights (0.95x)
    slowed = judge(history, victim, 1.25 * 10.0 * 2 * 0.95)
    assert slowed.verdict == SLOWER and slowed.spread < 0.03, slowed
    assert judge(history, victim, 10.0 * 2 * 0.95).verdict == SAME
    # Tonight's whole run at the 1.1x night's level: the run's move, held apart as before.
    moved = judge(history, victim, 10.0 * 2 * 1.1, run_shift=(1.1 / 0.95, 11))
    assert moved.verdict == UNCERTAIN and "accounts for the change" in moved.reason
    found = run_levels([(k, m, "a") for k, m in (("x", 1.0), ("y", 2.0))])
    assert found == {}  # one run: no level
    two = [(f"k{i}", 10.0 + i, "a") for i in range(5)] + \
        [(f"k{i}", 1.2 * (10.0 + i), "b") for i in range(5)]
    assert run_levels(two) == pytest.approx({"a": -0.5 * np.log(1.2), "b": 0.5 * np.log(1.2)})
    assert run_levels(two[:4] + two[5:9]) == {}  # four cases: too few to tell a run's level
    assert run_levels([]) == run_levels([("x", float("inf"), "a"), ("y", 0.0, "a")]) == {}


def test_a_measurement_beside_a_co_tenant_is_judged_uncertain(tmp_path):
    """A session's case whose samples other processes preempted 20 % of the time carries that
    to its verdict (history/baseline.py `judge`): a 1.3x change is UNCERTAIN, not SLOWER."""
    from pytest_npuperf.history.baseline import judge as judge_result
    from pytest_npuperf.measure.result import CaseResult

    history = nights(tmp_path / "h.sqlite", {TIGHT: [100.0, 100.6, 100.3, 101.0, 100.2]})
    baseline = resolve_baseline("last", history=history, device=DEVICE, before=100.0)
    try:
        verdicts = []
        for preempted in (0, 15):
            result = CaseResult(case_id=TIGHT, nodeid="", kernel_type="MatMulV2",
                                file="MatMulV2.csv", signature="bbbbbbbb")
            result.set_samples(samples(130.0, seed=3))
            result.cache, result.stack, result.preempted = "model", "torch 2.13.0", preempted
            verdicts.append(judge_result(result, baseline, 0.05))
    finally:
        baseline.close()
    assert verdicts[0].verdict == SLOWER
    assert verdicts[1].verdict == UNCERTAIN and "preempted 20 %" in verdicts[1].reason
    # The share is of the samples its statistics count, not of the 200 a result keeps for
    # plots: 60 preempted beside 1,000 kept is 6 %, a quiet host's.
    many = CaseResult(case_id=TIGHT, nodeid="", kernel_type="MatMulV2", file="MatMulV2.csv",
                      signature="bbbbbbbb")
    many.set_samples(samples(130.0, seed=4, n=1000))
    many.cache, many.stack, many.preempted = "model", "torch 2.13.0", 60
    assert len(many.samples) <= 200
    baseline = resolve_baseline("last", history=history, device=DEVICE, before=100.0)
    try:
        assert judge_result(many, baseline, 0.05).verdict == SLOWER
    finally:
        baseline.close()


def _host_by_hand(store: HistoryStore) -> tuple[float | None, dict[str, float]]:
    """The host's typical spread and the runs' levels as the module's docstring states them,
    one value at a time in plain Python, from every case record of the newest HOST_RUNS
    runs."""
    import math
    import statistics

    from pytest_npuperf.history.spread import HOST_RUNS, LEVEL_CASES

    window = sorted(store.runs(DEVICE), key=lambda r: r.started, reverse=True)[:HOST_RUNS]
    trusted = [(c.key, c.median_us, run.run_id) for run in window
               for c in store.run_cases(run.run_id)
               if c.status == "ok" and c.median_us and c.median_us > 0
               and c.verdict not in ("SLOWER", "FASTER") and not c.extra.get("preempted_kept")]
    by_key: dict[str, list[tuple[str, float]]] = {}
    for key, median, run_id in trusted:
        by_key.setdefault(key, []).append((run_id, math.log(median)))
    offsets: dict[str, list[float]] = {}
    for seen in by_key.values():
        if len(seen) >= 2:
            usual = statistics.median(v for _, v in seen)
            for run_id, value in seen:
                offsets.setdefault(run_id, []).append(value - usual)
    levels = {run: statistics.median(v) for run, v in offsets.items() if len(v) >= LEVEL_CASES}
    newest: dict[str, list[float]] = {}
    for key, median, run_id in trusted:  # newest run first
        values = newest.setdefault(key, [])
        if len(values) < SPREAD_RUNS:
            values.append(median / math.exp(levels.get(run_id, 0.0)))
    spreads = [max(v) / min(v) - 1 for v in newest.values() if len(v) >= 2]
    return (statistics.median(spreads) if spreads else None), levels


def test_the_hosts_spread_read_as_columns_is_the_rule_read_value_by_value(tmp_path):
    """The host's typical spread and the runs' levels (history/spread.py), computed over
    columns of the newest HOST_RUNS runs, equal the rule applied one value at a time: runs
    at their own levels, partial runs, a case judged SLOWER, one that kept preempted samples,
    a noisy one, and runs older than the window left out."""
    from pytest_npuperf.history.spread import HOST_RUNS, SpreadSource

    rng = np.random.default_rng(3)
    keys = [f"MatMulV2-{m}x64x64-BF16-{m:08x}" for m in range(1, 41)]
    path = tmp_path / "h.sqlite"
    with HistoryStore(path) as store:
        for night in range(HOST_RUNS + 4):
            level = 1 + 0.1 * rng.standard_normal()
            chosen = keys if night % 3 else keys[night % 7:night % 7 + 12]
            cases = []
            for i, key in enumerate(chosen):
                extra = {}
                if (i + night) % 11 == 0:
                    extra["verdict"] = "SLOWER"
                if (i + night) % 13 == 0:
                    extra["preempted_kept"] = True
                case = record(key, 10.0 * (i + 1) * level * (1 + 0.02 * rng.standard_normal()),
                              seed=night * 100 + i, **extra)
                if (i + night) % 17 == 0:
                    case.status = "noisy"
                cases.append(case)
            store.record(RunRecord(run_id=f"n{night:02d}", started=float(night + 1),
                                   device=DEVICE, passed=True), cases)
    with HistoryStore(path, readonly=True) as store:
        expected_host, expected_levels = _host_by_hand(store)
        host, levels = SpreadSource(store, device=DEVICE, before=None, passed_only=False)._recent(
            KIND_KERNEL)
    assert expected_host is not None and len(expected_levels) >= HOST_RUNS - 2
    assert host == expected_host and levels == expected_levels  # to the last bit
    assert "n00" not in levels and "n03" not in levels  # older than the window


def test_a_history_without_a_trusted_value_has_no_host_spread_nor_levels(tmp_path):
    """Every recent measurement noisy, or a change: the host's spread is unknown, no run has
    a level, and a verdict against it says why (no spread), as with no history."""
    from pytest_npuperf.history.spread import SpreadSource

    path = tmp_path / "h.sqlite"
    with HistoryStore(path) as store:
        for night in range(3):
            noisy = record(TIGHT, 100.0, seed=night)
            noisy.status = "noisy"
            store.record(RunRecord(run_id=f"n{night}", started=float(night + 1), device=DEVICE,
                                   passed=True), [noisy, record(WIDE, 50.0, seed=night,
                                                                verdict="SLOWER")])
    with HistoryStore(path, readonly=True) as store:
        assert SpreadSource(store, device=DEVICE, before=None, passed_only=False)._recent(
            KIND_KERNEL) == (None, {})
    assert judge(path, WIDE, 80.0).verdict == UNCERTAIN
