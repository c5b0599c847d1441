"""What we write, the simulator reads: msmodeling's ProfilingDataSource finds every row.

Runs against an msmodeling export named by NPUPERF_MSMODELING (see tests/msmodeling_consumer.py
for how it is loaded); skipped without one. For a database parsed from the real kernel table
and for the device copy a CPU replay of the embedded database writes, every row that has a
duration is looked up through the data source's own entry point (`lookup`, plain and behind
`InterpolatingDataSource`) and must come back with exactly that duration.
"""

from __future__ import annotations

import shutil
import types
from pathlib import Path

import pandas as pd
import pytest

from pytest_npuperf.cli import main as cli_main
from pytest_npuperf.harness.options import DEFAULT_DB

from . import msmodeling_consumer as consumer_module
from .conftest import kd_row, write_kernel_details
from .replay_project import BENCH, FAST, VERSION, run_json

ROOT = consumer_module.export_root()
pytestmark = pytest.mark.skipif(
    ROOT is None, reason=f"set {consumer_module.ENV} to an export of the msmodeling repository "
                         f"to check databases with its ProfilingDataSource")

VERSION_DIR = ("ATLAS_800_A3_752T_128G_DIE", "vllm_ascend", VERSION)
EMBEDDED = DEFAULT_DB
# A few cheap rows of the embedded database covering every dtype family the simulator maps
# (bf16, FLOAT, INT8, INT32, INT64, BOOL), FRACTAL_NZ weights, absent slots before present
# ones, a fused RoPE kernel and both attention scenes.
REPLAYED = ("FusedInferAttentionScore-128x16x128", "FusedInferAttentionScore-1x16x1x512",
            "GroupedMatmul-4x128", "GroupedMatmulSwigluQuant-4x7168",
            "split_qkv_rmsnorm_rope_kernel-1x768", "QuantBatchMatmulV3-1x512", "MaskedFill-1x151936",
            "Slice-1x5120", "GatherV2-1024x5120-BF16-f4af6a4e", "DispatchFFNCombine-1x7168",
            "MatMulV2-1x512x2048", "ArgMaxV2-1x129280",
            # DeepSeek-V3.2's sparse attention: the indexer's two decode rows (KV 256 and 1024)
            "SparseFlashAttention-1x8x512", "LightningIndexer-1x64x128")


@pytest.fixture(scope="module")
def consumer():
    return consumer_module.load(ROOT)


def _missed(probes) -> list[str]:
    return [f"{p.kernel_type} row {p.row + 1}: expected {p.expected}, got {p.got} "
            f"(interpolating: {p.interpolating}) {p.reason} {p.query}"
            for p in probes if not p.found]


def _validate_consumer(database: Path, capsys) -> str:
    capsys.readouterr()
    code = cli_main(["validate", "--consumer", str(database)])
    out = capsys.readouterr().out
    assert code == 0, out
    return out


def test_a_parsed_real_kernel_table_is_found_row_by_row(consumer, realdata, tmp_path, capsys):
    database = tmp_path.joinpath(*VERSION_DIR)
    assert cli_main(["parse", "--profile", str(realdata / "kernel_details"),
                     "--db", str(database), "--quiet"]) == 0
    probes = consumer_module.probe_database(consumer, database)
    assert _missed(probes) == []
    # Every aggregated group of the real table: MatMulV2/V3, flash attention forward and
    # backward, Add with tensors and with scalars (its output shape a lone empty slot).
    assert len(probes) == 8
    assert {p.kernel_type for p in probes} == {"Add", "FlashAttentionScore",
                                              "FlashAttentionScoreGrad", "MatMulV2", "MatMulV3"}
    _validate_consumer(database, capsys)


def test_a_replayed_device_copy_is_found_row_by_row(consumer, pytester, capsys):
    pytester.makepyfile(**{"bench/test_kernels": BENCH})
    out = pytester.path / "out"
    result = pytester.runpytest_inprocess(
        "bench", "--npuperf-db", str(EMBEDDED), "--npuperf-out", str(out), *FAST,
        "-k", " or ".join(REPLAYED))
    outcomes = result.parseoutcomes()
    assert outcomes.get("passed", 0) >= len(REPLAYED) and "failed" not in outcomes
    (copy,) = out.glob(f"CPU_*/vllm_ascend/{VERSION}")
    assert (copy / "op_mapping.yaml").read_bytes() == (EMBEDDED / "op_mapping.yaml").read_bytes()
    probes = consumer_module.probe_database(consumer, copy)
    assert _missed(probes) == []
    # every measurement the session stored (an `ok` case writes Average Duration(us))
    ok = [c for c in run_json(out)["cases"] if c["status"] == "ok"]
    assert len(probes) == len(ok) >= len(REPLAYED)
    _validate_consumer(copy, capsys)
    _attention_rows_answer_queries_that_carry_their_runtime(consumer, copy, tmp=pytester.path)
    _sparse_attention_rows_answer_the_runtime_path(consumer, copy)


def _measured(frame: pd.DataFrame) -> pd.DataFrame:
    return frame[pd.to_numeric(frame["Average Duration(us)"], errors="coerce") > 0]


def _sparse_attention_rows_answer_the_runtime_path(consumer, copy: Path):
    """SparseFlashAttention and LightningIndexer rows carry the Runtime columns the simulator
    reads (`Runtime avg_seq_len` first): the query its DSA decomposers build for the row's call
    finds its measurement; its interpolation takes every row as a point (metadata complete) and
    answers a KV length between the indexer's two decode rows linearly."""
    source = consumer.ProfilingDataSource(copy)
    wrapped = consumer.InterpolatingDataSource(source)
    for kernel_type, sparse in (("SparseFlashAttention", True), ("LightningIndexer", False)):
        measured = _measured(source._load_csv(kernel_type))
        assert len(measured) >= 1, kernel_type
        for _, row in measured.iterrows():
            params, dtype = consumer_module.sparse_params(consumer, row, sparse=sparse)
            hit = source._query_by_attn_params([kernel_type], params, dtype)
            assert hit == (float(row["Average Duration(us)"]), kernel_type), (
                kernel_type, source.last_miss_reason)
        index, rejected = (wrapped._get_sparse_attention_index if sparse
                           else wrapped._get_lightning_indexer_index)(kernel_type)
        # every measured row is a point; only rows not replayed here lack a latency
        assert set(rejected) <= {"latency_invalid"} and len(index.points) == len(measured), (
            rejected)
    decode = _measured(source._load_csv("LightningIndexer"))
    decode = decode[decode["Input Shapes"].str.startswith("1,64,128;")]
    (low, a), (high, b) = sorted(
        (int(r["Runtime avg_seq_len"]), float(r["Average Duration(us)"]))
        for _, r in decode.iterrows())
    params, dtype = consumer_module.sparse_params(consumer, decode.iloc[0], sparse=False,
                                                 kv_lengths=[(low + high) // 2])
    result = wrapped._interpolate_runtime_attention_by_params_one(
        "LightningIndexer", params, dtype, include_sparse_fields=False)
    assert result is not None and result.source == consumer.QuerySource.INTERPOLATED, (
        wrapped.last_miss_reason)
    assert result.latency_us == pytest.approx(a + (b - a) * ((low + high) // 2 - low)
                                              / (high - low))


def _attention_rows_answer_queries_that_carry_their_runtime(consumer, copy: Path, tmp: Path):
    """The attention path matches on the Runtime columns: a query that requires the phase is
    answered by these rows, and refused by the same rows without the column."""
    source = consumer.ProfilingDataSource(copy)
    frame = source._load_csv("FusedInferAttentionScore")
    measured = frame[pd.to_numeric(frame["Average Duration(us)"], errors="coerce") > 0]
    assert len(measured) >= 2
    for _, row in measured.iterrows():
        params, dtype = consumer_module.attention_params(consumer, row)
        hit = source._query_by_attn_params(["FusedInferAttentionScore"], params, dtype)
        assert hit == (float(row["Average Duration(us)"]), "FusedInferAttentionScore"), (
            params, source.last_miss_reason)
    stripped = tmp / "without_phase"
    shutil.copytree(copy, stripped)
    path = stripped / "FusedInferAttentionScore.csv"
    pd.read_csv(path, dtype=str, keep_default_na=False).drop(columns=["Runtime phase"]).to_csv(
        path, index=False)
    source = consumer.ProfilingDataSource(stripped)
    params, dtype = consumer_module.attention_params(consumer, measured.iloc[0])
    assert source._query_by_attn_params(["FusedInferAttentionScore"], params, dtype) is None
    assert source.last_miss_reason == "semantic_context_missing:csv:Runtime phase"


def test_what_the_simulator_tripped_on_before_and_finds_now(consumer, tmp_path, npuperf):
    """The issue's findings, with the simulator itself: a database as written before misses
    (no op_mapping.yaml; `DT_FLOAT` rows) and crashes it (an empty shape cell); the same rows
    written by `npuperf parse` now are found."""
    import torch

    def call(name, *shapes, dtype=torch.float32, out=None):
        args = tuple(torch.empty(s, dtype=dtype, device="meta") for s in shapes)
        return types.SimpleNamespace(func=consumer_module.Operator(name), args=args, kwargs={},
                                     out=out)

    mm = call("aten.mm.default", (8, 128), (128, 64))  # float32: the row spelled DT_FLOAT
    add = call("aten.add.Tensor", (8, 16), (8, 16), dtype=torch.bfloat16,
               out=torch.empty((8, 16), dtype=torch.bfloat16, device="meta"))
    old = consumer_module.write_pre_issue9_database(tmp_path.joinpath("old", *VERSION_DIR))
    source = consumer.ProfilingDataSource(old)
    assert source.lookup(mm) is None and source.last_miss_reason == "unmapped"
    shutil.copy(EMBEDDED / "op_mapping.yaml", old / "op_mapping.yaml")  # a mapping, as by hand
    source = consumer.ProfilingDataSource(old)
    assert source.lookup(mm) is None  # DT_FLOAT: a float32 query misses the row
    with pytest.raises(ValueError, match="nan"):
        source.lookup(add)  # the empty Output Shapes cell of the scalar Add row

    rows = [kd_row("MatMulV2", 12.5, in_shapes="8,128;64,128", in_dtypes="DT_FLOAT;DT_FLOAT",
                   out_shapes="8,64", out_dtypes="DT_FLOAT"),
            kd_row("Add", 1.5, in_shapes=";", in_dtypes="FLOAT;FLOAT", out_shapes="",
                   out_dtypes="FLOAT"),
            kd_row("Add", 2.5, in_shapes="8,16;8,16", in_dtypes="DT_BF16;DT_BF16",
                   out_shapes="8,16", out_dtypes="DT_BF16")]
    kd = write_kernel_details(tmp_path / "kernel_details.csv", rows)
    new = tmp_path.joinpath("new", *VERSION_DIR)
    assert npuperf("parse", "--quiet", "--profile", kd, "--db", new)[0] == 0
    source = consumer.ProfilingDataSource(new)
    assert source.lookup(mm).latency_us == 12.5
    assert source.lookup(add).latency_us == 2.5


def test_the_generated_mapping_entries_reach_the_simulator(consumer, tmp_path, npuperf):
    """What the generated op_mapping.yaml now says, asked of the simulator: views cost 0
    (`zero_cost`); aten.cat reads ConcatD.csv where the database has one (else costs 0);
    aten.native_layer_norm reads LayerNormV3.csv on its three tensors; the grouped GEMMs
    compare x and the weight only (`tc_input_count: 2`), where before they missed."""
    import torch
    import yaml

    undefined = ";DT_UNDEFINED" * 5
    rows = [kd_row("ConcatD", 2.5, in_shapes="4,8;4,8", in_dtypes="DT_BF16;DT_BF16",
                   out_shapes="8,8", out_dtypes="DT_BF16"),
            kd_row("LayerNormV3", 3.5, in_shapes="8,512;512;512",
                   in_dtypes="FLOAT;FLOAT;FLOAT", in_formats="ND;ND;ND",
                   out_shapes="8,512;8,1;8,1", out_dtypes="FLOAT;FLOAT;FLOAT",
                   out_formats="ND;ND;ND"),
            kd_row("GroupedMatmul", 4.5, in_shapes="4,128;2,128,64;;;;;;2;",
                   in_dtypes=f"DT_BF16;DT_BF16{undefined};INT64;DT_UNDEFINED",
                   in_formats="ND;ND;NULL;NULL;NULL;NULL;NULL;ND;NULL", out_shapes="4,64",
                   out_dtypes="DT_BF16")]
    database = tmp_path.joinpath(*VERSION_DIR)
    kd = write_kernel_details(tmp_path / "kernel_details.csv", rows)
    assert npuperf("parse", "--quiet", "--profile", kd, "--db", database)[0] == 0
    mappings = yaml.safe_load((database / "op_mapping.yaml").read_text())["operator_mappings"]
    assert mappings["aten.cat.default"] == {"kernel_type": "ConcatD"}
    assert mappings["aten.native_layer_norm.default"] == {"kernel_type": "LayerNormV3",
                                                          "tc_input_count": 3}
    assert mappings["tensor_cast.grouped_matmul.default"]["tc_input_count"] == 2
    assert mappings["aten.view.default"]["zero_cost"] is True

    def meta(shape, dtype=torch.bfloat16):
        return torch.empty(shape, dtype=dtype, device="meta")

    def ask(source, name, *args):
        return source.lookup(types.SimpleNamespace(func=consumer_module.Operator(name),
                                                   args=args, kwargs={}, out=None))

    source = consumer.ProfilingDataSource(database)
    assert ask(source, "aten.cat.default", [meta((4, 8)), meta((4, 8))], 0).latency_us == 2.5
    layer_norm = ask(source, "aten.native_layer_norm.default", meta((8, 512), torch.float32),
                     [512], meta((512,), torch.float32), meta((512,), torch.float32), 1e-5)
    assert layer_norm.latency_us == 3.5
    gmm = ("tensor_cast.grouped_matmul.default", [meta((4, 128))], [meta((2, 128, 64))], [None])
    assert ask(source, *gmm).latency_us == 4.5
    view = ask(source, "aten.view.default", meta((4, 8)), [32])
    assert view.latency_us == 0.0 and view.details["zero_cost"]

    before = tmp_path / "before"  # the same mapping without tc_input_count: the GEMM misses
    shutil.copytree(database, before)
    doc = yaml.safe_load((database / "op_mapping.yaml").read_text())
    del doc["operator_mappings"]["tensor_cast.grouped_matmul.default"]["tc_input_count"]
    (before / "op_mapping.yaml").write_text(yaml.safe_dump(doc))
    assert ask(consumer.ProfilingDataSource(before), *gmm) is None

    plain = tmp_path / "plain" / VERSION  # a database without ConcatD: cat costs 0
    assert npuperf("parse", "--quiet", "--profile",
                   write_kernel_details(tmp_path / "kd2.csv", rows[1:]), "--db", plain)[0] == 0
    cat = ask(consumer.ProfilingDataSource(plain), "aten.cat.default", [meta((4, 8))] * 2, 0)
    assert cat.latency_us == 0.0 and cat.details["zero_cost"]
