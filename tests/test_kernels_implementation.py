"""Which implementation ran travels from the spec to the row (`MicroBench Implementation`);
a row that cannot run here is a skip with its reason; a small database with a row of every
attention, MoE and quantisation kernel replays on the CPU (in process)."""

from __future__ import annotations

import pytest

# In-process pytester runs drop the modules first imported inside them: torch and the replay
# modules are imported here, at collection.
import torch  # noqa: F401

from pytest_npuperf.db.columns import MICROBENCH_IMPLEMENTATION, MICROBENCH_STATUS
from pytest_npuperf.db.signature import short_hash
from pytest_npuperf.db.table import read_table
from pytest_npuperf.db.upsert import row_signatures
from pytest_npuperf.devices import CpuBackend
from pytest_npuperf.kernels import catalog, registry
from pytest_npuperf.kernels.entry import SlotLayout
from pytest_npuperf.kernels.spec import KernelSpec, ReplaySkipped, implemented
from pytest_npuperf.measure.policy import SamplingPolicy
from pytest_npuperf.measure.result import STATUS_OK, STATUS_SKIPPED, CaseResult
from pytest_npuperf.replay.cases import CaseRef
from pytest_npuperf.replay.runner import CaseRunner, RunnerOptions
from pytest_npuperf.replay.write import write_results
from tests.kernel_rows import prepare, row, slots
from tests.replay_project import BENCH, FAST, VERSION, write_db

F32, BF16, I8, I32, I64 = "DT_FLOAT", "DT_BF16", "DT_INT8", "DT_INT32", "DT_INT64"
POLICY = SamplingPolicy(warmup=0, min_samples=2, max_samples=2, budget_s=5, min_time_s=0,
                        reject_preempted=False)  # the host's load is not under test


@pytest.fixture
def scratch_catalog(monkeypatch):
    monkeypatch.setattr(catalog, "_BY_TYPE", dict(catalog._BY_TYPE))
    monkeypatch.setattr(registry, "REGISTRY", dict(registry.REGISTRY))


class _Doubling(KernelSpec):
    kernel_type = "DoublingForTest"
    inputs = (SlotLayout("x", F32),)
    outputs = (SlotLayout("y", F32),)
    npu_api = "torch_npu.npu_doubling(x)"
    reason = ""

    def build_inputs(self, case, backend, generator):
        return {"x": self.tensor(case, 0, backend, generator)}

    def portable_call(self, tensors, case):
        if self.reason:
            raise ReplaySkipped(self.reason)
        x = tensors["x"]
        return implemented("torch.add (test)", lambda: x + x)

    npu_call = portable_call


def run_case(spec_class) -> CaseResult:
    registry.register(spec_class)
    ref = CaseRef("DoublingForTest-4", "DoublingForTest", "DoublingForTest.csv", 0, "sig", True)
    runner = CaseRunner(CpuBackend(), RunnerOptions(policy=POLICY))
    return runner.run(ref, row([((4,), F32)], [((4,), F32)]), "node", "db/DoublingForTest.csv")


def test_the_implementation_reaches_the_result_and_the_row(scratch_catalog, tmp_path):
    result = run_case(_Doubling)
    assert (result.status, result.implementation) == (STATUS_OK, "eager: torch.add (test)")
    assert CaseResult.from_dict(result.to_dict()).implementation == "eager: torch.add (test)"
    db = write_db(tmp_path / "db", {"DoublingForTest": [row([((4,), F32)], [((4,), F32)])]})
    signatures, _ = row_signatures(read_table(db / "DoublingForTest.csv"), "DoublingForTest")
    result.signature = short_hash(signatures[0])  # the row it was collected from
    write_results(db, db, [result], native=True, run_id="r", stamp="s")
    assert read_table(db / "DoublingForTest.csv")[MICROBENCH_IMPLEMENTATION][0] == \
        "eager: torch.add (test)"


def test_a_call_that_names_nothing_is_its_portable_path_and_an_npu_call_its_api(
        scratch_catalog):
    _, prepared = prepare("MatMulV2", row([((4, 8), F32), ((6, 8), F32)], [((4, 6), F32)]))
    assert prepared.implementation == "eager: torch.mm / torch.addmm"  # MatMul.portable

    class Unnamed(_Doubling):
        kernel_type = "UnnamedForTest"

        def portable_call(self, tensors, case):
            x = tensors["x"]
            return lambda: x + x

    registry.register(Unnamed)
    _, prepared = prepare("UnnamedForTest", row([((4,), F32)], [((4,), F32)]))
    assert prepared.implementation == "eager: plain torch"  # a spec that does not say
    from tests.npu_standin import npu_backend

    _, prepared = prepare("AscendQuantV2", row([((4, 16), BF16), ((16,), BF16), None],
                                               [((4, 16), I8)]), npu_backend([]))
    assert prepared.implementation == "npu: torch_npu.npu_quantize"


def test_a_row_that_cannot_run_here_is_skipped_with_its_reason(scratch_catalog):
    class Unrunnable(_Doubling):
        reason = "needs a process group of 4 ranks"

    result = run_case(Unrunnable)
    assert (result.status, result.error) == (STATUS_SKIPPED, "needs a process group of 4 ranks")


# -- a database with one row of each kernel type, replayed in process ---------------------------
def fia_cells():
    filled = {0: ((4, 4, 16), BF16), 1: ((8, 4, 32), BF16), 2: ((8, 4, 32), BF16),
              4: ((2048, 2048), I8), 5: ((4,), I64), 6: ((4,), I64), 14: ((4, 2), I32)}
    return row(slots(catalog.FIA_INPUT_SLOTS, filled), [((4, 4, 16), BF16), ((4, 4, 1), F32)],
               input_layout="TND", num_heads="4", num_key_value_heads="2", block_size="4",
               sparse_mode="3", actual_seq_lengths_values="1,2,3,4",
               actual_seq_lengths_kv_values="5,8,3,6")


ROWS = {
    "FusedInferAttentionScore": fia_cells(),
    "RINGMLAPrefillBF16Kernel": row(
        [((8, 2, 16), BF16), ((8, 2, 8), BF16), ((8, 2, 16), BF16), ((8, 2, 8), BF16),
         ((8, 2, 16), BF16), ((512, 512), BF16), ((2,), I32)],
        [((8, 2, 16), BF16), ((2, 8), F32)]),
    "LightningIndexer": row(
        [((4, 4, 16), BF16), ((6, 4, 1, 16), BF16), ((4, 4), BF16), ((2,), I32), ((2,), I32),
         ((2, 3), I32)], [((4, 1, 4), I32), None]),
    "SparseFlashAttention": row(
        [((4, 4, 32), BF16), ((6, 4, 1, 32), BF16), ((6, 4, 1, 32), BF16), ((4, 1, 4), I32),
         ((2, 3), I32), ((2,), I32), ((2,), I32), ((4, 4, 8), BF16), ((6, 4, 1, 8), BF16)],
        [((4, 4, 32), BF16), None, None]),
    "GroupedMatmul": row([((8, 32), BF16), ((2, 32, 16), BF16), None, None, None, None, None,
                          ((2,), I64)], [((8, 16), BF16)]),
    "GroupedMatmulSwigluQuant": row(
        [((8, 32), I8), ((2, 2, 2, 16, 32), I8, "FRACTAL_NZ"), ((2, 64), F32), ((8,), F32),
         None, ((2,), I64)], [((8, 32), I8), ((8,), F32)]),
    "QuantBatchMatmulV3": row([((8, 32), I8), ((2, 2, 16, 32), I8, "FRACTAL_NZ"),
                               ((64,), F32)], [((8, 64), BF16)]),
    "TransposeBatchMatMul": row([((4, 3, 16), BF16), ((3, 16, 8), BF16)], [((4, 3, 8), BF16)]),
    "MoeTokenPermute": row([((4, 16), BF16), ((4, 2), I32)], [((8, 16), BF16), ((8,), I32)]),
    "MoeTokenUnpermute": row([((8, 16), BF16), ((8,), I32), ((4, 2), BF16)], [((4, 16), BF16)]),
    "DispatchFFNCombine": row(
        [((2, 32), BF16), ((2, 32, 16), I8), ((2, 8, 32), I8), ((2, 2), I32), ((32,), I64),
         ((64,), I64), ((2, 2), F32)], [((2, 32), BF16), ((2,), I32)], **{"EP Size": "2"}),
    "AscendQuantV2": row([((4, 16), BF16), ((16,), BF16), ((16,), BF16)], [((4, 16), I8)]),
    "DynamicQuant": row([((4, 16), BF16)], [((4, 16), I8), ((4,), F32)]),
}


@pytest.mark.slow
def test_a_row_of_every_kernel_type_replays_on_the_cpu(pytester):
    assert set(ROWS) == {t for t in catalog.replayable_types()
                         if catalog.entry_for(t).replay.split(":")[0].rsplit(".", 1)[1]
                         in ("attention", "sparse_attention", "moe", "quant")} | {
        "TransposeBatchMatMul"}
    pytester.makepyfile(**{"bench/test_kernels": BENCH})
    db = write_db(pytester.path / "db", {k: [v] for k, v in ROWS.items()})
    out = pytester.path / "out"
    result = pytester.runpytest("bench", "--npuperf-db", str(db), "--npuperf-out", str(out),
                                *FAST)
    result.assert_outcomes(passed=len(ROWS))
    (copy,) = out.glob(f"CPU_*/vllm_ascend/{VERSION}")
    for kernel_type in ROWS:
        table = read_table(copy / f"{kernel_type}.csv")
        # "ok", or "ok (machine oversubscribed: ...)" on a busy machine
        assert table[MICROBENCH_STATUS][0].split(" (")[0] == STATUS_OK, kernel_type
        assert table[MICROBENCH_IMPLEMENTATION][0], kernel_type
    table = read_table(copy / "DispatchFFNCombine.csv")
    assert "EP 2 emulated" in table[MICROBENCH_IMPLEMENTATION][0]
