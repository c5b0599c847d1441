"""A preempted host never writes a value (issue 20): samples the host's other processes took
CPU time from are left out, a case without enough undisturbed ones is noisy, and a value far
above the case's quiet history is measured again, then flagged."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path
from types import SimpleNamespace

import pytest

from pytest_npuperf.devices.base import Timer
from pytest_npuperf.devices.preemption import PreemptionAwareTimer, RunQueueDelay
from pytest_npuperf.harness.measurer import Measurer
from pytest_npuperf.history.convert import case_record
from pytest_npuperf.history.plateau import PLATEAU_FACTOR, QuietHistory, plateau
from pytest_npuperf.history.records import RunRecord
from pytest_npuperf.history.store import HistoryStore
from pytest_npuperf.measure.result import (
    PLATEAU_REASON,
    PREEMPTED_REASON,
    STATUS_NOISY,
    STATUS_OK,
    CaseResult,
)
from pytest_npuperf.measure.sampler import STOP_BUDGET, sample
from pytest_npuperf.measure.sampler import SamplingPolicy as Policy
from pytest_npuperf.report import summary

LINUX = pytest.mark.skipif(not hasattr(os, "sched_setaffinity"),
                           reason="pins processes to one core: Linux only")


class Disturbed(Timer):
    """A timer that says which of its samples the host took time from: every `every`-th."""

    def __init__(self, every: int, value: float = 10.0, slice_us: float = 4000.0) -> None:
        self.every, self.value, self.slice_us, self.calls = every, value, slice_us, 0

    def time_calls(self, call, n, before_each=None):
        values, self.disturbed = [], []
        for _ in range(n):
            self.calls += 1
            lost = self.every and self.calls % self.every == 0
            values.append(self.value + (self.slice_us if lost else 0.0))
            self.disturbed.append(bool(lost))
        return values


def test_preempted_samples_are_left_out_and_counted():
    policy = Policy(warmup=1, min_samples=20, max_samples=20, budget_s=10, min_time_s=0)
    run = sample(lambda: None, Disturbed(every=3), policy)
    assert len(run.samples) == 20 and set(run.samples) == {10.0}
    assert run.preempted >= 6
    kept = sample(lambda: None, Disturbed(every=3),
                  Policy(warmup=1, min_samples=20, max_samples=20, budget_s=10, min_time_s=0,
                         reject_preempted=False))
    assert max(kept.samples) == 4010.0 and kept.preempted >= 6  # kept, still counted


def test_a_case_whose_every_sample_is_preempted_stops_at_its_budget_with_none():
    policy = Policy(warmup=1, min_samples=5, max_samples=50, budget_s=0.05, min_time_s=0)
    run = sample(lambda: None, Disturbed(every=1), policy)
    assert run.samples == [] and run.preempted > 0 and run.stop_reason == STOP_BUDGET


# The real thing: a kernel beside a busy loop pinned to its core. The measuring process lowers
# its own priority (nice 10: about a tenth of the core against the loop), so that nearly every
# sample of a 1-2 ms GEMM loses time slices, whatever else runs on the host; before the loop
# starts the same GEMM is measured quiet.
SCRIPT = textwrap.dedent("""
    import json, os, subprocess, sys, time
    import torch
    from pytest_npuperf.devices import CpuBackend
    from pytest_npuperf.devices.preemption import PreemptionAwareTimer, RunQueueDelay
    from pytest_npuperf.measure.sampler import SamplingPolicy
    from pytest_npuperf.replay.cases import CaseRef
    from pytest_npuperf.replay.runner import CaseRunner, RunnerOptions

    core = min(os.sched_getaffinity(0))
    os.sched_setaffinity(0, {core})
    torch.set_num_threads(1)
    a, b = torch.randn(64, 2048), torch.randn(2048, 1024)
    gemm = lambda: a @ b
    for _ in range(3):
        gemm()
    kinds = [True, False] if RunQueueDelay.available() else [False]

    def measure():
        # 40 calls per kind of evidence, in alternating batches (the scheduler gives a
        # starved process its time in bursts: a batch may run whole).
        out = {("run-queue" if q else "cpu-time"): {"walls": [], "lost": []} for q in kinds}
        timers = {q: PreemptionAwareTimer(run_queue=q) for q in kinds}
        for _ in range(8):
            for queue, timer in timers.items():
                walls = timer.time_calls(gemm, 5)
                found = out["run-queue" if queue else "cpu-time"]
                found["walls"] += walls
                found["lost"] += [w if d else 0.0 for w, d in zip(walls, timer.disturbed)]
        return out

    quiet = measure()
    loop = subprocess.Popen([sys.executable, "-c", "while True: pass"],
                            preexec_fn=lambda: os.sched_setaffinity(0, {core}))
    try:
        time.sleep(0.2)
        os.nice(10)
        busy = measure()
        row = {"Input Shapes": "64,2048;1024,2048", "Input Data Types": "DT_FLOAT;DT_FLOAT",
               "Input Formats": "ND;ND", "Output Shapes": "64,1024",
               "Output Data Types": "DT_FLOAT"}
        ref = CaseRef("MatMulV2-64x2048x1024-FLOAT-0", "MatMulV2", "MatMulV2.csv", 0, "s", True)
        backend = CpuBackend()
        backend.threads = 1
        case = CaseRunner(backend, RunnerOptions(policy=SamplingPolicy(
            warmup=1, min_samples=10, max_samples=20, budget_s=0.1, min_time_s=0))).run(
            ref, row, "n", "MatMulV2.csv")
    finally:
        loop.kill()
    print(json.dumps({"quiet": quiet, "busy": busy, "case": {
        "status": case.status, "error": case.error, "preempted": case.preempted}}))
""")


@pytest.fixture(scope="module")
def beside_a_busy_loop(tmp_path_factory) -> dict:
    script = tmp_path_factory.mktemp("preempt") / "measure.py"
    script.write_text(SCRIPT)
    # Its own session, so that a timeout kills the busy loop with the script (the script,
    # killed, could not stop it: it would spin on after the suite).
    child = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        out, err = child.communicate(timeout=150)
    except subprocess.TimeoutExpired:
        os.killpg(child.pid, signal.SIGKILL)
        child.communicate()
        # Seen on this project's 2-core VM: some runs the scheduler left the niced process
        # almost no time beside the loop (a few GEMMs in minutes). That says nothing of the
        # timer under test, so it is a skip with the reason, not a failure.
        pytest.skip("the scheduler gave the niced measuring process next to no time beside "
                    "the busy loop (150 s): this host cannot run the experiment now")
    assert child.returncode == 0, err[-3000:]
    return json.loads(out.strip().splitlines()[-1])


def _median(values: list[float]) -> float:
    return sorted(values)[len(values) // 2]


def _kept(run: dict) -> list[float]:
    return [w for w, flagged in zip(run["walls"], run["lost"]) if not flagged]


@pytest.mark.slow
@LINUX
def test_samples_beside_a_busy_loop_on_the_same_core_are_rejected(beside_a_busy_loop):
    quiet, busy = beside_a_busy_loop["quiet"], beside_a_busy_loop["busy"]
    # The loop took most of the core: many samples lost time. Not necessarily under each
    # evidence: the scheduler hands a starved process its time in bursts, and in one CI run
    # every batch timed by CPU time ran whole (it rejected none, and kept the kernel's times).
    assert sum(sum(map(bool, run["lost"])) for run in busy.values()) >= 5, busy
    for evidence, run in busy.items():
        alone = _kept(quiet[evidence])
        if not alone:
            pytest.skip(f"{evidence}: no sample of the kernel alone was undisturbed: this host "
                        f"is too busy to tell the loop's samples from its own")
        rejected = [w for w, flagged in zip(run["walls"], run["lost"]) if flagged]
        # No sample the loop stretched is kept: what is left is the kernel, as measured alone;
        # a rejected sample lost a tenth of its time at least, so it is longer than the
        # kernel's fastest.
        assert all(w < 2 * _median(alone) for w in _kept(run)), (evidence, alone, run)
        assert all(w > min(alone) for w in rejected), (evidence, alone, run)


@pytest.mark.slow
@LINUX
def test_a_quiet_case_keeps_its_value(beside_a_busy_loop):
    """Alone, the case keeps the samples the host left whole (all of them on a quiet host;
    whatever the suite's other processes took is left out too): tight around the kernel's
    fast tail (its tenth fastest in a hundred: one sample a VM ran faster than the rest, 2975
    among 3800-4100 us, is no measure of tightness), and both kinds of evidence agree on its
    value."""
    values = []
    for evidence, run in beside_a_busy_loop["quiet"].items():
        kept = _kept(run)
        if len(kept) < 5:
            pytest.skip(f"{evidence}: {40 - len(kept)} of 40 samples preempted with no loop "
                        f"beside them: this host is not quiet now")
        assert _median(kept) < 1.3 * sorted(kept)[len(kept) // 10], (evidence, run)
        values.append(_median(kept))
    assert max(values) < 1.3 * min(values), beside_a_busy_loop["quiet"]


@pytest.mark.slow
@LINUX
def test_a_case_without_enough_undisturbed_samples_is_noisy_with_the_reason(beside_a_busy_loop):
    case = beside_a_busy_loop["case"]
    assert case["status"] == STATUS_NOISY and case["preempted"] > 0, case
    assert case["error"].startswith(PREEMPTED_REASON) and "undisturbed" in case["error"], case


def test_the_evidence_is_the_run_queue_where_the_kernel_counts_it():
    timer = PreemptionAwareTimer()
    assert timer.evidence == ("run-queue delay" if RunQueueDelay.available()
                              else "thread CPU time")
    values = timer.time_calls(lambda: sum(range(20_000)), 5)
    assert len(values) == len(timer.disturbed) == len(timer.lost_us) == 5


@pytest.mark.skipif(not RunQueueDelay.available(), reason="the kernel keeps no schedstat "
                    "counts here (CONFIG_SCHED_INFO): the CPU-time evidence reads no threads")
def test_after_a_batchs_first_call_only_the_threads_that_took_part_are_read(monkeypatch):
    """A thread asleep through a call (a pytest helper, a finished pool) is not read for the
    rest of the batch; the caller always is, and a thread that only waited still counts."""
    import threading
    import time

    stop = threading.Event()
    sleeper = threading.Thread(target=stop.wait, daemon=True)
    sleeper.start()
    try:
        queue = RunQueueDelay()
        queue.refresh()
        main = str(threading.get_native_id())
        assert str(sleeper.native_id) in queue._fds and main in queue._fds
        sleeping = str(sleeper.native_id)
        for _ in range(20):  # a thread just started may still be on its way into its wait
            before = queue.snapshot()
            sum(range(200_000))
            after = queue.snapshot()
            if before[sleeping] == after[sleeping]:
                break
            time.sleep(0.05)
        queue.follow(before, after)
        read = {tid for tid, fd in queue._fds.items() if fd in queue._active}
        assert sleeping not in read and main not in read  # main: read apart
        waited = dict(after)
        waited[sleeping] = (before[sleeping][0], before[sleeping][1] + 5)
        queue.follow(before, waited)
        assert queue._fds[sleeping] in queue._active
        queue.refresh()  # a new batch reads every thread again
        assert queue._active is None
        queue.close()
    finally:
        stop.set()
        sleeper.join()


def test_the_summary_and_run_record_count_preempted_samples():
    def result(preempted: int, status: str = STATUS_OK, error: str = "", kept=False):
        return CaseResult(case_id="c", nodeid="n", kernel_type="MatMulV2", file="f", signature="s",
                          row=0, method="events", status=status, error=error,
                          preempted=preempted, preempted_kept=kept)

    results = [result(3), result(0), result(9, STATUS_NOISY, f"{PREEMPTED_REASON} 9 of 10")]
    assert summary.preemption(results) == {"samples": 12, "cases": 2, "noisy": 1, "kept": 0}
    assert case_record(results[0]).extra["preempted"] == 3
    assert "preempted" not in case_record(results[1]).extra


# -- the quiet history --------------------------------------------------------------------------
KEY = "MatMulV2-4x5120x1600-FLOAT-00000000"


def gemm_result(median: float, *, reference: float | None = 100.0, run_id: str = "") -> CaseResult:
    result = CaseResult(case_id=KEY, nodeid="n", kernel_type="MatMulV2", file="MatMulV2.csv",
                        signature="s", row=0, method="events", device="CPU_TEST",
                        reference_us=reference, cache="model")
    result.set_samples([median * (1 + 0.001 * i) for i in range(-10, 11)])
    return result


def history_with(path: Path, *values: float, preempted_kept: bool = False) -> Path:
    with HistoryStore(path) as store:
        for i, value in enumerate(values):
            result = gemm_result(value)
            result.preempted, result.preempted_kept = (3, True) if preempted_kept else (0, False)
            store.record(RunRecord(run_id=f"r{i}", started=float(i + 1), device="CPU_TEST",
                                   passed=True, exit_status=0), [case_record(result)])
    return path


def test_a_value_far_above_the_quiet_history_is_a_plateau(tmp_path):
    quiet = QuietHistory(history_with(tmp_path / "h.sqlite", 40.0, 35.0, 60.0), "CPU_TEST")
    assert quiet.quiet(gemm_result(7990.0)).median_us == pytest.approx(35.0)
    reason = plateau(gemm_result(7990.0), quiet.quiet(gemm_result(7990.0)))
    assert reason.startswith(PLATEAU_REASON) and "228.3x" in reason and "run r1" in reason
    # Within the factor, or on a host whose reference loop slowed: not a plateau.
    assert plateau(gemm_result(35.0 * PLATEAU_FACTOR * 0.9), quiet.quiet(gemm_result(1))) is None
    assert plateau(gemm_result(7990.0, reference=150.0), quiet.quiet(gemm_result(1))) is None
    assert plateau(gemm_result(7990.0, reference=None), quiet.quiet(gemm_result(1))) is None
    quiet.close()


def test_a_history_of_preempted_values_is_not_quiet(tmp_path):
    kept = QuietHistory(history_with(tmp_path / "h.sqlite", 7990.0, preempted_kept=True),
                        "CPU_TEST")
    assert kept.quiet(gemm_result(7990.0)) is None
    assert QuietHistory(tmp_path / "none.sqlite", "CPU_TEST").quiet(gemm_result(1.0)) is None


class Scripted:
    """A runner whose measurements are given: the values of successive runs of the case."""

    def __init__(self, *values: float) -> None:
        self.values = list(values)

    def run(self, ref, row, nodeid, file_label):
        result = gemm_result(self.values.pop(0))
        result.wall_s = result.time_in_calls_s = 1.0
        return result


def measurer(history: Path, *values: float) -> Measurer:
    context = SimpleNamespace(
        settings=SimpleNamespace(history=history),
        backend=SimpleNamespace(database_device=lambda: "CPU_TEST"),
        profiler=SimpleNamespace(tag=lambda result: None),
        destination=SimpleNamespace(source=history.parent), row=lambda ref: {})
    found = Measurer(context)
    found._runner = Scripted(*values)
    return found


REF = SimpleNamespace(file="MatMulV2.csv")


def test_a_plateau_is_measured_again_then_flagged(tmp_path):
    history = history_with(tmp_path / "h.sqlite", 35.0, 36.0)
    result = measurer(history, 7990.0, 7995.0).run_case(REF, "n")
    assert result.status == STATUS_NOISY and result.error.startswith(PLATEAU_REASON)
    assert "re-measured: the first measurement, 7990 us" in result.error
    assert result.wall_s == 2.0  # both measurements' time


def test_a_plateau_that_goes_away_keeps_the_second_measurement(tmp_path):
    history = history_with(tmp_path / "h.sqlite", 35.0, 36.0)
    result = measurer(history, 7990.0, 36.5).run_case(REF, "n")
    assert result.status == STATUS_OK and result.value == pytest.approx(36.5)
    assert "re-measured: the first measurement, 7990 us, was 228.3x" in result.note


def test_without_a_history_a_case_is_measured_once(tmp_path):
    scripted = measurer(tmp_path / "none.sqlite", 7990.0)
    assert scripted.run_case(REF, "n").value == pytest.approx(7990.0)
    assert scripted._runner.values == []
