"""Generators' invariants (FIA, GroupedMatmul, DispatchFFNCombine, split_qkv) and the validity
of every row the packaged configs produce."""

from __future__ import annotations

import math

import pytest

from pytest_npuperf.db.columns import EP_SIZE, FIA_RUNTIME_COLUMNS, contract_columns_for
from pytest_npuperf.db.shapes import parse_dtypes, parse_formats, parse_shapes
from pytest_npuperf.grid import BUILTIN_MODELS, generate_rows
from pytest_npuperf.grid.generators import GENERATORS
from pytest_npuperf.grid.models import ModelRegistry
from pytest_npuperf.kernels.case import case_from_row
from pytest_npuperf.kernels.registry import spec_for

MODELS = list(BUILTIN_MODELS)


def run(name: str, models=MODELS, **params):
    spec = GENERATORS[name]
    values = {k: tuple(v) for k, v in spec.params.items()}
    values.update({k: tuple(v) for k, v in params.items()})
    return list(spec.run(values, models))


def runtime(cand, field):
    return cand.extra[f"Runtime {field}"]


# --- FusedInferAttentionScore ----------------------------------------------------------------

def test_fia_slot_layout_and_runtime_columns():
    cands = run("fused_infer_attention_score")
    assert cands
    scenes = {runtime(c, "source_profile") for c in cands}
    assert scenes == {"shape_grid:dense_prefill", "shape_grid:dense_decode",
                      "shape_grid:mla_prefill", "shape_grid:mla_decode"}
    for c in cands:
        assert len(c.inputs) == len(c.in_dtypes) == len(c.in_formats) == 31
        assert set(c.extra) == set(FIA_RUNTIME_COLUMNS)
        for slot in (0, 1, 2, 5, 6):
            assert c.inputs[slot] is not None
        for i, shape in enumerate(c.inputs):
            if shape is None:
                assert (c.in_dtypes[i], c.in_formats[i]) == ("DT_UNDEFINED", "NULL")
        batch = c.variables["batch"]
        assert c.inputs[5] == (batch,) and c.inputs[6] == (batch,)
        assert c.in_dtypes[5] == c.in_dtypes[6] == "DT_INT64"
        assert runtime(c, "actual_seq_lengths_shape") == str(batch)
        assert len(runtime(c, "actual_seq_lengths_kv_values").split(",")) == batch
        assert runtime(c, "metadata_completeness") == "shape_grid_scene_generated"
        assert runtime(c, "num_heads") == str(c.variables["heads"])
        assert int(runtime(c, "num_heads")) % int(runtime(c, "num_key_value_heads")) == 0
        # The rope slots carry MLA's positional part, and only MLA's.
        mla = bool(c.variables["mla"])
        assert (c.inputs[24] is not None) == mla and (c.inputs[25] is not None) == mla


def test_fia_decode_block_tables_cover_the_kv_length():
    cands = [c for c in run("fused_infer_attention_score", decode_kv_len=(1, 127, 128, 129, 5000))
             if c.variables["decode"]]
    assert cands
    for c in cands:
        batch, kv_len = c.variables["batch"], c.variables["kv_len"]
        block_size = int(runtime(c, "block_size"))
        table = c.inputs[14]
        assert table[0] == batch and c.in_dtypes[14] == "DT_INT32"
        assert table[1] * block_size >= kv_len > (table[1] - 1) * block_size
        assert runtime(c, "block_table_shape") == f"{table[0]},{table[1]}"
        assert int(runtime(c, "block_table_valid_blocks")) == math.ceil(kv_len / block_size)
        blocks = c.inputs[1][0]
        assert blocks >= batch * table[1] and blocks >= 16  # the pool holds every table
        assert runtime(c, "kv_cache_mode") == "paged_cache_pool"
        assert runtime(c, "actual_seq_lengths_kv_values") == ",".join([str(kv_len)] * batch)
        if c.variables["mla"]:
            assert c.inputs[1][2] == block_size and runtime(c, "input_layout") == "BNSD_NBSD"
            assert c.inputs[25][:3] == c.inputs[1][:3]
        else:
            assert c.inputs[1][1] == block_size and runtime(c, "input_layout") == "TND"
            kv_heads = int(runtime(c, "num_key_value_heads"))
            assert c.inputs[1][2] == kv_heads * c.variables["head_dim"]


def test_fia_prefill_sequence_lengths():
    for c in run("fused_infer_attention_score", scenes=("prefill",)):
        batch, seq = c.variables["batch"], c.variables["seq"]
        assert c.inputs[0][0] == c.inputs[1][0] == batch * seq
        assert runtime(c, "actual_seq_lengths_values") == ",".join(
            str(seq * (i + 1)) for i in range(batch))
        assert runtime(c, "input_layout") == "TND" and runtime(c, "sparse_mode") == "3"
        assert c.inputs[4] == (2048, 2048) and c.inputs[14] is None
        assert c.outputs[0] == c.inputs[0][:2] + (c.outputs[0][2],)


def test_fia_gqa_heads_divide():
    qwen = ModelRegistry().get("qwen3-32b")
    for c in run("fused_infer_attention_score", models=[qwen]):
        heads, kv_heads = c.variables["heads"], c.variables["kv_heads"]
        assert heads == qwen.heads // c.variables["tp"]
        assert kv_heads == max(1, qwen.kv_heads // c.variables["tp"])
        assert heads % kv_heads == 0


# --- MoE -------------------------------------------------------------------------------------

def test_grouped_matmul_experts_per_rank():
    cands = run("grouped_matmul", ep=(1, 2, 3, 4, 8, 256, 512))
    assert cands
    for c in cands:
        experts, ep, per_rank = (c.variables[k] for k in ("experts", "ep", "experts_per_rank"))
        assert experts % ep == 0 and per_rank * ep == experts  # EP 3 and 512 were dropped
        x, w, group_list = c.inputs[0], c.inputs[1], c.inputs[7]
        assert len(c.inputs) == 9 and group_list == (per_rank,) and c.in_dtypes[7] == "DT_INT64"
        assert c.inputs[8] is None  # per_token_scale: W8A8 rows only
        assert w[0] == per_rank and x[1] == w[1] and c.outputs[0] == (x[0], w[2])
    assert {c.variables["ep"] for c in cands} == {1, 2, 4, 8, 256}


def test_dispatch_ffn_combine_ep_sizes():
    cands = run("dispatch_ffn_combine", ep=(1, 2, 3, 16, 32))
    assert cands
    for c in cands:
        ep, experts, per_rank = (c.variables[k] for k in ("ep", "experts", "experts_per_rank"))
        assert ep >= 2 and experts % ep == 0 and per_rank == experts // ep
        assert c.extra == {EP_SIZE: str(ep)}
        assert len(c.inputs) == 8 and len(c.outputs) == 2 and c.inputs[7] is None  # no mask
        tokens, hidden = c.inputs[0]
        assert c.inputs[1] == (per_rank, hidden, c.variables["n"])
        assert c.inputs[2] == (per_rank, c.variables["n"] // 2, hidden)
        assert c.inputs[3] == c.inputs[6] == (tokens, c.variables["top_k"])
        assert c.outputs == ((tokens, hidden), (per_rank,))


def test_dispatch_ffn_combine_rows_carry_ep_size():
    rows = generate_rows(["DispatchFFNCombine"], target_models="dsv3", rows=0)
    rows = rows["DispatchFFNCombine"]
    assert rows and all(r[EP_SIZE] in {"16", "32", "64", "128", "256"} for r in rows)
    # Same shapes under another EP size are another row (EP Size is part of the identity).
    assert "EP Size" in contract_columns_for("DispatchFFNCombine")


def test_split_qkv_widths():
    cands = run("split_qkv_rmsnorm_rope")
    assert cands
    assert not any(c.variables["head_dim"] == 0 for c in cands)
    for c in cands:
        q, kv, d = c.variables["q_hidden"], c.variables["kv_hidden"], c.variables["head_dim"]
        assert q % d == 0 and kv % d == 0
        assert c.inputs == ((c.variables["tokens"], q + 2 * kv), (d,))
        assert [s[1] for s in c.outputs] == [q, kv, kv]
    # MLA models (DeepSeek-V3, GLM-5.1) have no fused QKV split.
    assert not run("split_qkv_rmsnorm_rope", models=[ModelRegistry().get("dsv3")])


def test_generator_constraints(tmp_path):
    path = tmp_path / "g.yaml"
    path.write_text("""\
patterns:
  fia:
    generator: fused_infer_attention_score
    params: {scenes: [decode], decode_batch: [1, 2, 4], decode_kv_len: [1024, 4096]}
    constraints: ["batch * kv_len <= 4096", "heads >= 16"]
assignments: {FusedInferAttentionScore: fia}
""")
    rows = generate_rows(None, config_path=path, rows=0)["FusedInferAttentionScore"]
    assert rows
    for row in rows:
        kv = [int(v) for v in row["Runtime actual_seq_lengths_kv_values"].split(",")]
        assert sum(kv) <= 4096 and int(row["Runtime num_heads"]) >= 16


def test_generator_param_errors(tmp_path):
    path = tmp_path / "g.yaml"
    path.write_text("""\
patterns:
  fia:
    generator: fused_infer_attention_score
    params: {scenes: [decode, warmup]}
assignments: {FusedInferAttentionScore: fia}
""")
    with pytest.raises(Exception, match=r"g.yaml:4:.*unknown scenes value 'warmup'"):
        generate_rows(None, config_path=path, rows=0)


# --- every packaged row is valid -------------------------------------------------------------

def _check_row(kernel_type: str, row: dict[str, str]) -> None:
    shapes = parse_shapes(row["Input Shapes"])
    assert len(parse_dtypes(row["Input Data Types"])) == len(shapes)
    assert len(parse_formats(row["Input Formats"])) == len(shapes)
    out = parse_shapes(row["Output Shapes"])
    assert len(parse_dtypes(row["Output Data Types"])) == len(out)
    assert len(parse_formats(row["Output Formats"])) == len(out)
    case = case_from_row(kernel_type, row)
    spec = spec_for(kernel_type)
    if spec is not None:
        spec.check(case)
    allowed = set(contract_columns_for(kernel_type))
    assert set(row) <= allowed
    # Theory rows: identity only, no performance values.
    assert not any(k.endswith("(us)") for k in row)


def test_every_default_config_row_is_valid():
    rows = generate_rows(None, rows=40)
    assert len(rows) >= 31
    for kernel_type, kernel_rows in rows.items():
        assert kernel_rows, kernel_type
        for row in kernel_rows:
            _check_row(kernel_type, row)


def test_every_embedded_config_row_is_valid():
    rows = generate_rows(None, config_path="embedded_db")
    for kernel_type, kernel_rows in rows.items():
        assert kernel_rows, kernel_type
        for row in kernel_rows:
            _check_row(kernel_type, row)
