"""The kernel catalog: well-formed entries for every kernel type the project names, replays
that resolve to their entries, and the one set of slot positions ingest and the grid use."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

from pytest_npuperf.db import columns
from pytest_npuperf.db.shapes import DTYPE_BYTES, parse_shapes
from pytest_npuperf.db.signature import MATMUL_FAMILY, signature_kind
from pytest_npuperf.grid import job
from pytest_npuperf.grid.config import PACKAGED_CONFIGS, load_config
from pytest_npuperf.grid.generators import GENERATORS
from pytest_npuperf.ingest import fia_runtime
from pytest_npuperf.kernels import catalog, registry
from pytest_npuperf.kernels.entry import KernelEntry, SlotLayout
from pytest_npuperf.kernels.spec import KernelSpec
from tests.test_grid_config import CONTRACT_KERNELS
from tests.test_grid_generators import MODELS, runtime
from tests.test_grid_generators import run as run_generator

# Of the custom operators the reference tool lists, only the torch.ops._C_ascend ones need
# vllm-ascend's custom OPP (KvRmsNormRopeCache is op-plugin's, RINGMLA an ATB operator,
# split_qkv_rmsnorm_rope a Triton one: see kernels/custom_ops.py).
CUSTOM_OPP = "torch.ops._C_ascend."
REPLAYED = {
    "MatMulV2", "MatMulV3", "MatMulCommon", "BatchMatMulV2", "RmsNorm", "SwiGlu", "SoftmaxV2",
    "Add",
    "AddRmsNormBias",
    "ArgMaxV2",
    "AscendQuantV2",
    "DispatchFFNCombine",
    "DynamicQuant",
    "FusedInferAttentionScore",
    "GatherV2",
    "GroupedMatmul",
    "GroupedMatmulSwigluQuant",
    "Index",
    "InterleaveRope",
    "KvRmsNormRopeCache",
    "LightningIndexer",
    "MaskedFill",
    "MoeTokenPermute",
    "MoeTokenUnpermute",
    "PadV3",
    "QuantBatchMatmulV3",
    "ReshapeAndCacheNdKernel",
    "RINGMLAPrefillBF16Kernel",
    "ScatterNdUpdate",
    "Slice",
    "Sort",
    "SparseFlashAttention",
    "split_qkv_rmsnorm_rope_kernel",
    "TensorMove",
    "Transpose",
    "TransposeBatchMatMul",
}
FORMATS = {"ND", "FRACTAL_NZ", "NCHW", "NHWC", "NC1HWC0"}
FAMILIES = {"gemm", "moe", "attention", "rope", "cache", "norm", "activation", "quant",
            "softmax", "sampling", "elementwise", "movement"}


@pytest.fixture
def scratch_catalog(monkeypatch):
    """Entries and specs a test adds are gone after it."""
    monkeypatch.setattr(catalog, "_BY_TYPE", dict(catalog._BY_TYPE))
    monkeypatch.setattr(registry, "REGISTRY", dict(registry.REGISTRY))


def test_every_entry_is_well_formed():
    seen: set[str] = set()
    for entry in catalog.entries():
        assert entry.kernel_types and not seen & set(entry.kernel_types), entry.kernel_types
        seen |= set(entry.kernel_types)
        assert entry.family in FAMILIES, entry.name
        assert entry.core in catalog.CORES, entry.name
        assert entry.npu_api.strip(), entry.name
        assert entry.inputs and entry.outputs, entry.name
        for side in (entry.inputs, entry.outputs):
            assert all(isinstance(slot, SlotLayout) for slot in side)
            names = [slot.name for slot in side]
            assert len(set(names)) == len(names) and all(re.fullmatch(r"[a-z][a-z0-9_]*", n)
                                                         for n in names), (entry.name, names)
            for slot in side:
                assert slot.dtype in DTYPE_BYTES and slot.format in FORMATS, (entry.name, slot)
        assert entry.launches, entry.name
        if entry.replay is not None:
            assert re.fullmatch(r"[\w.]+:\w+", entry.replay), entry.replay
    assert seen == set(catalog.kernel_types())


def test_the_catalog_covers_the_contract_and_every_packaged_grid_config():
    known = set(catalog.kernel_types())
    assert set(CONTRACT_KERNELS) <= known
    for name in PACKAGED_CONFIGS:
        assert set(load_config(name).kernel_types) <= known, name
    custom = {t for t in known if catalog.entry_for(t).custom_op}
    assert custom == {t for t in known if catalog.entry_for(t).npu_api.startswith(CUSTOM_OPP)}
    assert {"AddRmsNormBias", "DispatchFFNCombine"} <= custom
    assert set(catalog.replayable_types()) == REPLAYED
    assert catalog.entry_for("NoSuchKernel") is None and not catalog.replayable("NoSuchKernel")
    with pytest.raises(KeyError, match="NoSuchKernel"):
        catalog.require("NoSuchKernel")


@pytest.mark.parametrize("kernel_type", sorted(REPLAYED))
def test_every_replay_resolves_to_its_entry(kernel_type):
    entry = catalog.entry_for(kernel_type)
    spec = registry.spec_for(kernel_type)
    assert type(spec) is registry.load_replay(entry.replay)
    assert spec.kernel_types() == entry.kernel_types
    assert (spec.inputs, spec.outputs) == (entry.inputs, entry.outputs)
    assert (spec.npu_api, spec.custom_op) == (entry.npu_api, entry.custom_op)
    assert all(registry.spec_for(t) is spec for t in entry.kernel_types)
    # What `npuperf kernels` shows: the portable path and the work formulas.
    assert spec.has_portable_path() and spec.portable.strip()
    assert "flops" in spec.work and "bytes" in spec.work


def test_kernels_without_a_replay_have_metadata_and_no_spec():
    for kernel_type in sorted(set(catalog.kernel_types()) - REPLAYED):
        assert registry.spec_for(kernel_type) is None
        assert catalog.slot_layout(kernel_type) is not None


def test_a_bad_replay_target_is_a_clear_error():
    with pytest.raises(ImportError, match="not a KernelSpec class"):
        registry.load_replay("pytest_npuperf.kernels.catalog:KernelEntry")


def test_a_registered_spec_enters_the_catalog_and_becomes_replayable(scratch_catalog):
    class Negate(KernelSpec):
        kernel_type = "NegateForTest"
        inputs = (SlotLayout("x", "DT_FLOAT"),)
        outputs = (SlotLayout("y", "DT_FLOAT"),)
        npu_api = "torch.neg(x)"

        def build_inputs(self, case, backend, generator):
            return {"x": self.tensor(case, 0, backend, generator)}

        def portable_call(self, tensors, case):
            return lambda: -tensors["x"]

        npu_call = portable_call

    assert not catalog.replayable("NegateForTest")
    registry.register(Negate)
    entry = catalog.entry_for("NegateForTest")
    assert catalog.replayable("NegateForTest") and entry.replay.endswith(":" + Negate.__qualname__)
    assert entry.inputs == Negate.inputs and entry.core == catalog.VECTOR
    assert isinstance(registry.spec_for("NegateForTest"), Negate)


def test_collection_and_the_catalog_need_no_torch():
    code = ("import sys\n"
            "from pytest_npuperf.kernels import catalog\n"
            "import pytest_npuperf.replay.cases, pytest_npuperf.grid.template\n"
            "assert catalog.replayable('MatMulV3') and not catalog.replayable('NoSuchKernel')\n"
            "assert catalog.slot_layout('RmsNorm')[1][1].dtype == 'DT_FLOAT'\n"
            "print('torch' in sys.modules)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout
    assert out.strip() == "False"


# -- one place for per-kernel constants ----------------------------------------------------------
def test_fia_slots_are_the_catalogs_and_ingest_and_grid_read_them():
    fia = catalog.entry_for(columns.FIA_KERNEL)
    assert catalog.FIA_INPUT_SLOTS == len(fia.inputs) == 31
    expected = {"FIA_QUERY": 0, "FIA_KEY": 1, "FIA_VALUE": 2, "FIA_MASK": 4, "FIA_SEQ_LENS": 5,
                "FIA_KV_SEQ_LENS": 6, "FIA_BLOCK_TABLE": 14, "FIA_QUERY_ROPE": 24,
                "FIA_KEY_ROPE": 25}
    assert {name: getattr(catalog, name) for name in expected} == expected
    from pytest_npuperf.grid import generators

    assert (fia_runtime.QUERY, fia_runtime.KEY, fia_runtime.MASK, fia_runtime.SEQ,
            fia_runtime.SEQ_KV, fia_runtime.BLOCK_TABLE, fia_runtime.QUERY_ROPE,
            fia_runtime.KEY_ROPE) == (0, 1, 4, 5, 6, 14, 24, 25)
    assert (generators.FIA_SLOTS, generators.Q, generators.K, generators.V, generators.MASK,
            generators.SEQ, generators.KV_SEQ, generators.BLOCK_TABLE, generators.Q_ROPE,
            generators.K_ROPE) == (31, 0, 1, 2, 4, 5, 6, 14, 24, 25)
    # Nowhere else: the database layer no longer carries its own copy.
    assert not [n for n in dir(columns) if re.fullmatch(r"FIA_(QUERY|KEY|VALUE|MASK).*", n)]


def test_ingest_reads_grid_attention_rows_as_the_grid_wrote_them():
    """Both sides address the same slots: what ingest infers from a generated row's shapes is
    what the generator recorded about it."""
    fields = ("num_heads", "input_layout", "attn_state", "kv_cache_mode", "sparse_mode",
              "block_table_shape", "actual_seq_lengths_shape", "actual_seq_lengths_kv_shape",
              "phase", "batch_size", "cache_layout", "topk", "quant_mode")
    scenes = set()
    for cand in run_generator("fused_infer_attention_score", MODELS, prefill_batch=(2,),
                              prefill_seq=(512,), decode_batch=(4,), decode_kv_len=(1024,)):
        inferred = fia_runtime.infer_runtime(cand.inputs)
        scene = runtime(cand, "source_profile")
        scenes.add(scene)
        for field in fields:
            assert inferred[f"Runtime {field}"] == runtime(cand, field), (scene, field)
        if "decode" in scene:
            assert inferred["Runtime block_size"] == runtime(cand, "block_size")
            assert inferred["Runtime num_key_value_heads"] == runtime(cand, "num_key_value_heads")
    assert len(scenes) == 4


def test_generators_fill_the_catalog_slots_of_moe_and_split_qkv_kernels():
    for generator, kernel_type in (("grouped_matmul", "GroupedMatmul"),
                                   ("dispatch_ffn_combine", "DispatchFFNCombine"),
                                   ("split_qkv_rmsnorm_rope", "split_qkv_rmsnorm_rope_kernel")):
        entry = catalog.entry_for(kernel_type)
        cands = run_generator(generator)
        assert cands, generator
        for cand in cands[:50]:
            assert len(cand.inputs) == len(entry.inputs)
            assert len(cand.outputs) == len(entry.outputs)
            for slot, shape, dtype in zip(entry.inputs, cand.inputs, cand.in_dtypes):
                if shape is None:
                    assert slot.optional, (kernel_type, slot)
                elif slot.dtype != "DT_BF16":  # a fixed-type slot (indices, scales)
                    assert dtype == slot.dtype, (kernel_type, slot)
    gmm = run_generator("grouped_matmul")[0]
    group_list = catalog.entry_for("GroupedMatmul").input_index("group_list")
    assert group_list == 7 and gmm.inputs[group_list] == (gmm.variables["experts_per_rank"],)


def test_grid_cores_and_families_come_from_the_catalog():
    for kernel_type in catalog.kernel_types():
        assert job.default_core(kernel_type) == catalog.entry_for(kernel_type).core
    assert job.default_core("FusedInferAttentionScore") == "MIX_AIC"
    assert job.default_core("MatMulV3") == "AI_CORE"
    assert job.default_core("SomethingNew") == "AI_VECTOR_CORE"
    assert job.family_of("MatMulCommon") == list(MATMUL_FAMILY)
    assert job.family_of("RmsNorm") == ["RmsNorm"]


def test_types_of_one_call_share_one_signature_space():
    # db keeps its own GEMM family (it imports nothing of the project): it must be the
    # catalog's, or a measurement would be routed to a row of a type that is not its call.
    for kernel_type in MATMUL_FAMILY:
        assert catalog.same_call_types(kernel_type) == MATMUL_FAMILY
    for entry in catalog.entries():
        kinds = {signature_kind(t) for t in entry.kernel_types}
        assert len(kinds) == 1, entry.kernel_types
        for kernel_type in entry.kernel_types:
            assert catalog.same_call_types(kernel_type) == entry.kernel_types
    assert catalog.same_call_types("SomethingNew") == ("SomethingNew",)


def test_template_rows_take_dtypes_the_pattern_leaves_open_from_the_catalog(tmp_path):
    from pytest_npuperf.grid import generate_rows

    config = tmp_path / "grid.yaml"
    config.write_text("""\
patterns:
  quant:
    iterators: {M: [16], N: [64], K: [32]}
    inputs: ["(M, K)", "(N // 32, K // 16, 16, 32)", "(N,)"]
    outputs: ["(M, N)"]
assignments: {QuantBatchMatmulV3: quant}
""")
    row = generate_rows(None, config_path=config)["QuantBatchMatmulV3"][0]
    assert row["Input Data Types"] == "INT8;INT8;FLOAT"   # the profiler's spelling
    assert row["Input Formats"] == "ND;FRACTAL_NZ;ND"
    assert row["Accelerator Core"] == "AI_CORE"
    assert parse_shapes(row["Input Shapes"])[1] == (2, 2, 16, 32)


def test_an_entry_names_its_slots():
    entry = KernelEntry(("K",), "norm", catalog.VECTOR, (SlotLayout("x"),), (SlotLayout("y"),),
                        "k(x)")
    assert entry.name == "K" and entry.launches == ("K",)
    assert entry.input_index("x") == 0 and entry.output_index("y") == 0
    with pytest.raises(KeyError, match="K has no slot 'z'"):
        entry.input_index("z")
    assert GENERATORS  # the generators module imported above reads the catalog at import
