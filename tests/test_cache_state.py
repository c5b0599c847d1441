"""The cache state a replay measures in (issue 19): streamed inputs rotated through enough
copies to exceed the device's cache, activations kept warm, the condition recorded in the row
and the history, warm mode as before."""

from __future__ import annotations

import itertools

import pytest
import torch

from pytest_npuperf.db.columns import MICROBENCH_CACHE
from pytest_npuperf.devices import CpuBackend
from pytest_npuperf.history.baseline import cache_mode, judge_samples
from pytest_npuperf.history.compare import NEW, SAME
from pytest_npuperf.history.records import KIND_KERNEL, CaseRecord
from pytest_npuperf.kernels import catalog
from pytest_npuperf.kernels.cache_state import MAX_COPIES, RotationArena, input_sets, plan
from pytest_npuperf.kernels.case import case_from_row
from pytest_npuperf.kernels.registry import spec_for
from pytest_npuperf.measure.graph import capture_batch
from pytest_npuperf.measure.sampler import SamplingPolicy
from pytest_npuperf.replay.cases import CaseRef
from pytest_npuperf.replay.runner import CaseRunner, RunnerOptions
from tests.conftest import read_rows
from tests.replay_project import BENCH, FAST, cells, write_db
from tests.test_measure_graph import StandInGraphs

# A GEMM whose weight (256 x 1024 bf16, 512 KiB) fits many times in the cache below.
GEMM = cells("8,1024;256,1024", "DT_BF16;DT_BF16", "ND;ND", "8,256", "DT_BF16")
CACHE = 4 << 20


class SmallCache(CpuBackend):
    """A CPU that reports a 4 MiB last-level cache."""

    def l2_cache_bytes(self) -> int:
        return CACHE


def _prepare(cache: str):
    case = case_from_row("MatMulV2", GEMM, file="MatMulV2.csv", row_number=1)
    return spec_for("MatMulV2").prepare(case, SmallCache(), cache=cache)


def _operands_of_each_call(prepared, calls: int, monkeypatch) -> list[tuple[int, int]]:
    seen = []
    real = torch.mm

    def mm(a, b):
        seen.append((a.data_ptr(), b.data_ptr()))
        return real(a, b)
    monkeypatch.setattr(torch, "mm", mm)
    for _ in range(calls):
        prepared.call()
    return seen


def test_a_streamed_weight_is_a_new_buffer_at_every_call_and_the_copies_exceed_the_cache(
        monkeypatch):
    prepared = _prepare("model")
    rotation = prepared.rotation
    assert rotation.names == ("b",)  # the weight; the activation `a` stays one buffer
    assert rotation.copies * rotation.set_bytes > CACHE
    seen = _operands_of_each_call(prepared, 3 * rotation.copies, monkeypatch)
    weights = [b for _, b in seen]
    assert all(x != y for x, y in itertools.pairwise(weights))  # never twice in a row
    assert len(set(weights)) == rotation.copies
    assert len({a for a, _ in seen}) == 1  # warm: the op before just wrote it
    assert prepared.rotation.describe().startswith("model (b cold: ")


def test_copies_hold_the_same_values_so_checks_of_the_output_still_hold():
    prepared = _prepare("model")
    first = prepared.call()
    for _ in range(prepared.rotation.copies - 1):
        assert torch.equal(prepared.call(), first)


def test_cold_rotates_every_input_and_warm_is_the_plain_call(monkeypatch):
    cold = _prepare("cold")
    assert set(cold.rotation.names) == {"a", "b"}
    seen = _operands_of_each_call(cold, 4, monkeypatch)
    assert len({a for a, _ in seen}) == 4
    warm = _prepare("warm")
    assert warm.rotation.copies == 1 and not hasattr(warm.call, "rotation")
    assert warm.rotation.describe() == "warm"
    seen = _operands_of_each_call(warm, 4, monkeypatch)
    assert len(set(seen)) == 1  # one set of inputs, as before this option existed


def test_an_input_larger_than_twice_the_cache_is_not_copied():
    big = {"b": torch.empty(3 << 20, dtype=torch.uint8)}
    assert plan("model", big, ("b",), 1 << 20).copies == 1
    tiny = {"b": torch.empty(16, dtype=torch.uint8)}
    capped = plan("model", tiny, ("b",), 1 << 20)
    assert capped.copies == MAX_COPIES and "capped" in capped.describe()
    with pytest.raises(ValueError, match="not one of"):
        plan("lukewarm", big, ("b",), 1)


def test_every_streamed_input_the_catalog_names_is_a_slot_and_gemm_weights_are_streamed():
    for entry in catalog.entries():
        assert set(entry.streamed) <= {s.name for s in entry.inputs}, entry.name
    assert catalog.entry_for("MatMulV2").streamed == ("b", "bias")
    assert "x" not in catalog.entry_for("RmsNorm").streamed  # the activation stays warm


def test_a_graph_batch_holds_every_copy_of_a_rotated_input():
    graphs = StandInGraphs(kernel_us=50.0, launch_us=1.0)  # one call per replay would do
    assert capture_batch(lambda: None, graphs, min_calls=37).calls == 37
    assert capture_batch(lambda: None, graphs).calls < 37


def test_the_runner_records_the_condition_and_the_row_gets_it(pytester):
    policy = SamplingPolicy(warmup=1, min_samples=3, max_samples=5, budget_s=0.05, min_time_s=0,
                            reject_preempted=False)  # the host's load is not under test
    ref = CaseRef("MatMulV2-8x1024x256-BF16-00000000", "MatMulV2", "MatMulV2.csv", 0, "s", True)
    result = CaseRunner(SmallCache(), RunnerOptions(policy=policy)).run(ref, GEMM, "n", "f")
    assert result.cache.startswith("model (b cold: ")
    pytester.makepyfile(**{"bench/test_kernels": BENCH})
    db = write_db(pytester.path / "db", {"MatMulV2": [GEMM]})
    out = pytester.path / "out"
    for mode in ("warm", "model"):
        pytester.runpytest("bench", "--npuperf-db", str(db), "--npuperf-out", str(out), *FAST,
                           "--npuperf-cache", mode).assert_outcomes(passed=1)
        [copy] = out.glob("CPU_*/vllm_ascend/*")
        assert cache_mode(read_rows(copy / "MatMulV2.csv")[0][MICROBENCH_CACHE]) == mode


def test_a_baseline_measured_in_another_cache_state_does_not_judge():
    record = CaseRecord(kind=KIND_KERNEL, key="k", kernel="MatMulV2", samples=[10.0] * 20,
                        status="ok", run_id="r1", extra={})  # no cache recorded: warm

    class Base:
        ref = "r1"

        def case(self, kind, key):
            return record
    cold = judge_samples(KIND_KERNEL, "k", [14.0] * 20, Base(), 0.05, condition="model")
    assert cold.verdict == NEW and "cache warm, this run model" in cold.reason
    same = judge_samples(KIND_KERNEL, "k", [10.0] * 20, Base(), 0.05, condition="warm")
    assert same.verdict == SAME


def test_copies_in_an_arena_hold_the_same_values_in_buffers_of_their_own():
    """The runner's copies on a CPU go to memory reused from case to case (no page faults
    per case): each copy a buffer of its own inside the arena, the same values, the same
    strides, and the next case's copies in the same memory."""
    arena = RotationArena()
    case = case_from_row("MatMulV2", GEMM, file="MatMulV2.csv", row_number=1)
    prepared = spec_for("MatMulV2").prepare(case, SmallCache(), cache="model", arena=arena)
    buffer = arena._buffer
    start, end = buffer.data_ptr(), buffer.data_ptr() + buffer.numel()
    copies = [s["b"] for s in prepared.sets[1:]]
    assert len(copies) == prepared.rotation.copies - 1 > 1
    assert all(start <= c.data_ptr() < end for c in copies)
    assert len({c.data_ptr() for c in copies}) == len(copies)
    assert all(torch.equal(c, prepared.tensors["b"]) for c in copies)
    first = prepared.call()
    for _ in range(prepared.rotation.copies - 1):
        assert torch.equal(prepared.call(), first)
    del prepared, copies
    spec_for("MatMulV2").prepare(case, SmallCache(), cache="model", arena=arena)
    assert arena._buffer is buffer  # the same memory, not a new allocation


def test_an_arena_copy_keeps_a_transposed_weights_strides():
    weight = torch.randn(64, 48).t()
    tensors = {"a": torch.randn(8, 64), "b": weight}
    rotation = plan("model", tensors, ("b",), 1 << 16)
    sets = input_sets(tensors, rotation, RotationArena())
    for copy in (s["b"] for s in sets[1:]):
        assert copy.stride() == weight.stride() and torch.equal(copy, weight)
        assert copy.data_ptr() != weight.data_ptr()
