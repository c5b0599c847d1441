"""The collective measurement loop on real gloo process groups, ranks as threads of this
process (tests/comm_threads.py): lockstep, sub-groups, the correctness check, an op the
backend refuses, a dead rank, a hung rank, mismatched selections."""

from __future__ import annotations

import gc
import math
import time

import pytest
import torch

from pytest_npuperf.comm.channel import Channel
from pytest_npuperf.comm.collective_result import (
    STATUS_FAILED,
    STATUS_OK,
    STATUS_SKIPPED,
    CommResult,
)
from pytest_npuperf.comm.lockstep import compare_selection
from pytest_npuperf.comm.ops import OPS
from pytest_npuperf.comm.runtime import CommFault
from pytest_npuperf.comm.sweep import CommPoint
from pytest_npuperf.comm.timing import CaseMeasurement, decide, next_round, plan
from pytest_npuperf.devices.cpu import CpuBackend
from pytest_npuperf.measure.policy import SamplingPolicy
from pytest_npuperf.measure.sampler import STOP_BUDGET, STOP_MAX_SAMPLES, STOP_PRECISION
from tests.comm_threads import gloo_refuses, run_job

FAST = SamplingPolicy(warmup=1, min_samples=3, max_samples=12, budget_s=0.05, min_time_s=0.0)
DEVICE = CpuBackend()


def point(op: str, nbytes: int = 4096, ranks=(0, 1), dtype: str = "DT_FLOAT") -> CommPoint:
    return CommPoint(op, nbytes, len(ranks), dtype, 1, tuple(ranks))


def measure(points: list[CommPoint], policy: SamplingPolicy = FAST):
    def body(fabric):
        return [CaseMeasurement(fabric, DEVICE, p, policy).run() for p in points]
    return body


# Each op's points beyond the float32 one.
MORE_POINTS = {"all_reduce": [point("all_reduce", 1024, dtype="DT_BF16")],
               "all_to_all": [point("all_to_all", 2048, dtype="DT_INT8")]}


def on_gloo_here(op: str):
    """An op gloo in this torch does not run is skipped, saying so; the others are tested."""
    refused = gloo_refuses(op)
    return pytest.param(op, marks=pytest.mark.skipif(bool(refused), reason=refused))


@pytest.mark.parametrize("op", [on_gloo_here(op) for op in OPS])
def test_every_op_runs_in_lockstep_and_rank0_holds_every_ranks_times(op):
    points = [point(op), *MORE_POINTS.get(op, [])]
    results = run_job(2, measure(points))
    assert not any(isinstance(r, BaseException) for r in results), results
    root, other = results
    for r0, r1 in zip(root, other):
        assert (r0.status, r1.status) == (STATUS_OK, STATUS_OK), (r0.error, r1.error)
        assert r0.check.startswith("ok") and r0.wrong == 0
        assert sorted(t.rank for t in r0.ranks) == [0, 1]
        assert all(t.samples >= FAST.min_samples for t in r0.ranks)
        worst = max(r0.ranks, key=lambda t: t.median)
        assert r0.duration_us == worst.median and r0.straggler_rank == worst.rank
        low, _, high = r0.rank_spread()
        assert low <= r0.duration_us == high
        assert r0.stop_reason in (STOP_BUDGET, STOP_PRECISION, STOP_MAX_SAMPLES)
        assert r0.ops_per_sample >= 1 and "barrier" in r0.method
        assert r0.timed_calls >= sum(t.samples for t in r0.ranks) // 2  # every sample >= 1 call
        n, m, t = 2, r0.point.message_bytes, r0.duration_us
        assert r0.algbw_gbps() == pytest.approx(m / t / 1e3)
        assert r0.busbw_gbps() == pytest.approx(m / t / 1e3 * OPS[r0.point.op].busbw_factor(n))
        # Only rank 0 assembles the figures; every rank knows the outcome.
        assert r1.ranks == [] and math.isnan(r1.duration_us)


def test_a_subgroup_runs_while_the_other_ranks_only_keep_step():
    points = [point("all_gather", 1024, ranks=(0, 2)), point("reduce_scatter", 3072, (0, 1, 2)),
              point("broadcast", 512, ranks=(1, 2))]
    results = run_job(3, measure(points))
    assert not any(isinstance(r, BaseException) for r in results), results
    for index, p in enumerate(points):
        statuses = {r[index].status for r in results}
        assert statuses == {STATUS_OK}, [r[index].error for r in results]
        assert sorted(t.rank for t in results[0][index].ranks) == list(p.ranks)


class CorruptingChannel(Channel):
    """Rank 1's all_reduce adds 1 to its result afterwards: a wrong answer, as a broken link
    or a buggy backend would give."""

    def all_reduce(self, tensor):
        super().all_reduce(tensor)
        tensor.add_(1)


def test_a_wrong_result_fails_the_case_on_every_rank():
    results = run_job(2, measure([point("all_reduce", 1024)]),
                      channel_types={1: CorruptingChannel})
    r0, r1 = (r[0] for r in results)
    assert r0.status == r1.status == STATUS_FAILED
    assert r0.wrong == 1024 // 4  # every element of rank 1's result
    assert "rank 1 element 0 is 2, expected 1" in r0.error


def test_an_op_the_backend_refuses_is_skipped_and_the_group_stays_usable():
    """gloo in torch 2.13 has no float8 reductions ("Invalid scalar type"); the next case on
    the same group measures normally."""
    points = [point("all_reduce", 1024, dtype="DT_FLOAT8_E4M3"), point("all_reduce", 1024),
              point("all_gather", 1024, dtype="DT_FLOAT8_E5M2"), point("all_gather", 1024)]
    results = run_job(2, measure(points))
    for rank_results in results:
        assert [r.status for r in rank_results] == [STATUS_SKIPPED, STATUS_OK,
                                                    STATUS_SKIPPED, STATUS_OK]
    reason = results[0][0].error
    assert reason.startswith("gloo does not run all_reduce on DT_FLOAT8_E4M3")
    assert "Invalid scalar type" in reason


class NoAllToAll(Channel):
    """gloo as torch 2.11 has it: no all_to_all (the list form)."""

    def all_to_all(self, outputs, inputs):
        raise RuntimeError("Backend gloo does not support alltoall")


def test_a_gloo_without_all_to_all_skips_it_and_the_next_case_runs():
    results = run_job(2, measure([point("all_to_all", 1024), point("all_reduce", 1024)]),
                      channel_types={0: NoAllToAll, 1: NoAllToAll})
    for rank_results in results:
        assert [r.status for r in rank_results] == [STATUS_SKIPPED, STATUS_OK]
    assert results[0][0].error == ("gloo does not run all_to_all on DT_FLOAT: RuntimeError: "
                                   "Backend gloo does not support alltoall")


def test_a_dead_rank_fails_the_case_on_the_others_at_once():
    def body(fabric):
        if fabric.rank == 1:
            CaseMeasurement(fabric, DEVICE, point("all_reduce", 1024), FAST).run()
            fabric.close()  # the rank dies: its connections close
            gc.collect()
            return "died"
        first = CaseMeasurement(fabric, DEVICE, point("all_reduce", 1024), FAST).run()
        try:
            CaseMeasurement(fabric, DEVICE, point("all_reduce", 2048), FAST).run()
        except CommFault as exc:
            return first, exc
        return first, None

    first, fault = run_job(2, body, timeout_s=30.0)[0]
    assert first.status == STATUS_OK
    assert isinstance(fault, CommFault), fault
    assert str(fault).startswith("rank 0: ")
    assert "Connection closed" in str(fault) and "Timed out" not in str(fault)  # not the 30 s


def test_a_hung_rank_fails_the_case_once_the_timeout_passes():
    def body(fabric):
        CaseMeasurement(fabric, DEVICE, point("all_reduce", 1024), FAST).run()
        if fabric.rank == 1:
            time.sleep(1.5)  # alive, holding its connections, not joining the next case
            return "hung"
        start = time.monotonic()
        try:
            CaseMeasurement(fabric, DEVICE, point("all_reduce", 2048), FAST).run()
        except CommFault as exc:
            return exc, time.monotonic() - start
        return None, 0.0

    fault, waited = run_job(2, body, timeout_s=0.5)[0]
    assert isinstance(fault, CommFault), fault
    assert "timed out" in str(fault).lower()
    assert waited >= 0.5


def test_an_interrupted_session_stops_between_steps():
    def body(fabric):
        with pytest.raises(CommFault, match="terminated by the launcher"):
            CaseMeasurement(fabric, DEVICE, point("all_reduce", 1024), FAST,
                            interrupted=lambda: "terminated by the launcher").run()
        return "ok"

    assert run_job(2, body) == ["ok", "ok"]


def test_ranks_with_different_selections_are_told_before_any_collective():
    selections = {0: ["all_reduce-1KiB-2r-BF16-tier1", "all_reduce-2KiB-2r-BF16-tier1"],
                  1: ["all_reduce-1KiB-2r-BF16-tier1"]}
    same = run_job(2, lambda f: compare_selection(f.control, selections[0]))
    assert same == [None, None]
    differ = run_job(2, lambda f: compare_selection(f.control, selections[f.rank]))
    assert differ[0] == differ[1]
    assert "rank 0: 2 case(s)" in differ[0] and "rank 1: 1 case(s)" in differ[0]


def test_the_plan_keeps_the_barrier_under_a_fortieth_of_a_sample():
    fast = plan(per_call_us=10.0, barrier_us=50.0, policy=FAST)
    assert fast.ops_per_sample == 200  # 40 barriers = 2000 us of calls
    slow = plan(per_call_us=200_000.0, barrier_us=50.0, policy=FAST)
    assert slow.ops_per_sample == 1 and slow.samples_per_round == 1
    assert plan(per_call_us=math.nan, barrier_us=0.0, policy=FAST).ops_per_sample >= 1
    assert next_round(1_000.0, taken=10, policy=FAST) == 2  # capped by max samples left
    assert next_round(10_000.0, taken=0, policy=FAST) == 10  # a round of about 0.1 s


def test_the_stopping_rule_is_the_kernel_cases_rule():
    policy = SamplingPolicy(min_samples=5, max_samples=8, budget_s=1.0, min_time_s=0.0,
                            precision=0.05)
    assert decide([100.0] * 4, 1e-3, policy)[0] == ""  # fewer than min samples
    assert decide([100.0] * 5, 1e-3, policy)[0] == STOP_PRECISION
    assert decide([100.0] * 8, 1e-3, policy)[0] == STOP_MAX_SAMPLES
    noisy = [100.0, 300.0, 50.0, 900.0, 10.0, 700.0]
    assert decide(noisy, 0.5, policy)[0] == ""
    assert decide(noisy, 2.0, policy)[0] == STOP_BUDGET


def test_a_result_survives_its_dict_form():
    op = "all_reduce" if gloo_refuses("all_to_all") else "all_to_all"  # a measured result
    results = run_job(2, measure([point(op, 1024)]))
    original: CommResult = results[0][0]
    assert original.status == STATUS_OK and len(original.ranks) == 2
    again = CommResult.from_dict(original.to_dict())
    assert again == original
    assert torch.distributed.is_available()
