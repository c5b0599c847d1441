"""A model's composite modules become rows of their kernel types (issue 28, item 2): an RMS
norm, a rotary embedding, a gated activation, an attention are each one call of RmsNorm,
ApplyRotaryPosEmb, SwiGlu, FusedInferAttentionScore, with the shapes the simulator queries;
never pieces scattered into `Add` rows. With npuperf's module ranges (checked against an
independent sum over the trace's raw events) and, in a user's plain trace, by the eager
decompositions."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from pytest_npuperf.db.columns import INPUT_SHAPES, INPUT_STRIDES, RAW_DURATION
from pytest_npuperf.db.errors import NpuperfError
from pytest_npuperf.ingest.trace_rows import trace_rows
from pytest_npuperf.kernels.module_kinds import load_kinds, parse_range, range_name
from pytest_npuperf.kernels.torch_ops import TorchOperators
from pytest_npuperf.profiling.workload import profile_callable
from tests import model_traces as M

# LAYERS blocks: two norms, a rotation, an attention, an MLP each; a final nn.RMSNorm.
PER_STEP = {"RmsNorm": 2 * M.LAYERS + 1, "ApplyRotaryPosEmb": M.LAYERS,
            "FusedInferAttentionScore": M.LAYERS, "SwiGlu": M.LAYERS}
STEPS = 2


@pytest.fixture(scope="module")
def kinds(tmp_path_factory) -> object:
    path = tmp_path_factory.mktemp("kinds") / "kinds.yaml"
    path.write_text(M.KINDS_YAML)
    return load_kinds(path)


@pytest.fixture(scope="module")
def ranged(tmp_path_factory, kinds) -> Path:
    out = tmp_path_factory.mktemp("ranged") / "block.json"
    return profile_callable(M.block_step(), out, kind="cpu", warmup=1, steps=STEPS,
                            kinds=kinds).path


@pytest.fixture(scope="module")
def plain(tmp_path_factory) -> Path:
    return M.plain_trace(tmp_path_factory.mktemp("plain") / "block.json", M.block_step(), STEPS)


def _composites(rows) -> Counter:
    return Counter(t for t in rows["Type"] if t in PER_STEP)


def test_each_module_range_is_one_row_of_its_kind_with_all_the_time_inside_it(ranged, kinds):
    rows, summary = trace_rows(ranged, TorchOperators(), kinds)
    assert summary.steps == STEPS
    assert _composites(rows) == {k: n * STEPS for k, n in PER_STEP.items()}
    # Each RMS norm's time is what ran inside its range, summed independently from the events.
    for kind, kernel_type in (("rms_norm", "RmsNorm"), ("rotary", "ApplyRotaryPosEmb"),
                              ("gated_activation", None)):
        sums = M.range_sums(ranged, f"npuperf:{kind}:")
        if kernel_type is None:
            assert len(sums) == M.LAYERS * STEPS  # the MLP: its GEMMs stay rows of their own
            continue
        got = sorted(rows.loc[rows["Type"] == kernel_type, RAW_DURATION])
        expected = sorted(sums)
        if kernel_type == "RmsNorm":  # the final norm is torch's own (aten::rms_norm) module
            assert len(got) == len(expected)
        assert got == pytest.approx(expected, rel=1e-6, abs=1e-3)
    # The norm's `+ eps` and the rotation's adds are parts, not rows of the Add table.
    adds = set(rows.loc[rows["Type"] == "Add", INPUT_SHAPES])
    assert adds == {f"1,{M.TOKENS},{M.HIDDEN};1,{M.TOKENS},{M.HIDDEN}"}  # the residuals
    assert not {k.split(" (", 1)[0] for k in summary.unmapped} & M.PIECES


def test_rows_carry_the_shapes_the_simulator_queries_and_the_models_strides(ranged, kinds):
    rows, summary = trace_rows(ranged, TorchOperators(), kinds)
    shapes = {t: set(rows.loc[rows["Type"] == t, INPUT_SHAPES]) for t in PER_STEP}
    s, h, d, heads, kv = M.TOKENS, M.HIDDEN, M.HEAD_DIM, M.HEADS, M.KV_HEADS
    assert shapes["RmsNorm"] == {f"1,{s},{h};{h}"}
    assert shapes["SwiGlu"] == {f"1,{s},{2 * M.FFN}"}
    assert shapes["ApplyRotaryPosEmb"] == {f"1,{heads},{s},{d};1,{kv},{s},{d};1,1,{s},{d};"
                                           f"1,1,{s},{d}"}
    assert shapes["FusedInferAttentionScore"] == {
        f"1,{heads},{s},{d};1,{kv},{s},{d};1,{kv},{s},{d};;2048,2048"}  # causal: sparse mode 3
    # q and k are transposed views of (B, S, N, D) projections: the row says so.
    [rotary] = [v for (kind, _), v in summary.extras.items() if kind == "ApplyRotaryPosEmb"]
    assert rotary[INPUT_STRIDES] == (f"{s * heads * d},{d},{heads * d},1;"
                                     f"{s * kv * d},{d},{kv * d},1;;")


def test_a_plain_trace_maps_the_same_calls_by_their_eager_decompositions(plain, ranged, kinds):
    rows, summary = trace_rows(plain, TorchOperators(), kinds)
    ranged_rows, _ = trace_rows(ranged, TorchOperators(), kinds)
    assert summary.steps == 0 and _composites(rows) == _composites(ranged_rows)
    for kernel_type in PER_STEP:
        assert set(rows.loc[rows["Type"] == kernel_type, INPUT_SHAPES]) == \
            set(ranged_rows.loc[ranged_rows["Type"] == kernel_type, INPUT_SHAPES])
    assert set(rows.loc[rows["Type"] == "Add", INPUT_SHAPES]) == {
        f"1,{M.TOKENS},{M.HIDDEN};1,{M.TOKENS},{M.HIDDEN}"}
    assert not {k.split(" (", 1)[0] for k in summary.unmapped} & M.PIECES
    # Without the table of kinds the pieces stay what they were: the `+ eps` is an Add row.
    bare, _ = trace_rows(plain, TorchOperators(), load_kinds().__class__())
    assert not {"ApplyRotaryPosEmb", "SwiGlu", "FusedInferAttentionScore"} & set(bare["Type"])
    assert f"1,{M.TOKENS},1;" in set(bare[INPUT_SHAPES])


def test_what_stays_unmapped_is_named_with_its_shapes(plain, kinds):
    _, summary = trace_rows(plain, TorchOperators(), kinds)
    assert all("(" in label or label.startswith("aten::") for label in summary.unmapped)
    assert any(label.startswith("aten::unsqueeze (") or label.startswith("aten::transpose (")
               for label in summary.unmapped)


# -- the table of kinds ----------------------------------------------------------------------------
def test_the_table_covers_torch_and_the_usual_transformers_models():
    kinds = load_kinds()
    for name in ("RMSNorm", "LlamaRMSNorm", "Qwen2RMSNorm", "Qwen3RMSNorm", "MistralRMSNorm",
                 "DeepseekV3RMSNorm"):
        assert kinds.of_module(name).kernel_type == "RmsNorm"
    for name in ("LlamaMLP", "Qwen3MLP", "MistralMLP", "DeepseekV3MLP"):
        assert kinds.of_module(name).kernel_type == "SwiGlu"
    assert kinds.of_operator("aten::scaled_dot_product_attention").kernel_type == \
        "FusedInferAttentionScore"
    functions = dict(kinds.functions())
    assert functions["transformers.models.qwen3.modeling_qwen3.apply_rotary_pos_emb"].name == \
        "rotary"


def test_a_users_file_extends_a_kind_or_adds_one_and_a_bad_one_is_one_line(tmp_path):
    extra = tmp_path / "mine.yaml"
    extra.write_text("rms_norm:\n  modules: [MyNorm]\nmy_norm:\n  converter: rms_norm\n"
                     "  kernel_type: AddRmsNormBias\n  modules: [FusedNorm]\n")
    kinds = load_kinds(extra)
    assert kinds.of_module("MyNorm").name == "rms_norm"
    assert kinds.of_module("LlamaRMSNorm").name == "rms_norm"  # the package's stay
    assert kinds.of_module("FusedNorm").kernel_type == "AddRmsNormBias"
    for text, problem in (("rms_norm: [1, 2]", "expected a mapping"),
                          ("x:\n  converter: nope\n  kernel_type: K", "converter 'nope'"),
                          ("rms_norm:\n  module: [A]", "unknown key"), ("a: [", "not YAML")):
        extra.write_text(text)
        with pytest.raises(NpuperfError, match=problem):
            load_kinds(extra)


def test_range_names_carry_the_inputs_and_read_back():
    name = range_name("rotary", "apply|rope", [([1, 4, 16, 8], [512, 8, 32, 1], "bfloat16"),
                                               None, ([16, 8], [8, 1], "float32")])
    kind, label, tensors = parse_range(name)
    assert (kind, label) == ("rotary", "apply_rope")
    assert tensors == [([1, 4, 16, 8], [512, 8, 32, 1], "bfloat16"), None,
                       ([16, 8], [8, 1], "float32")]
    assert parse_range("ProfilerStep#3") is None
