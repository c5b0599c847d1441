"""op_mapping.yaml in every database npuperf writes (issue 9, deliverable 1)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from pytest_npuperf.db.errors import NpuperfError
from pytest_npuperf.db.op_mapping import (
    COPIED,
    GENERATED,
    KEPT,
    REGENERATED,
    is_unedited_generated,
    load_op_mapping,
    referenced_kernel_types,
    version_dirs_for_hccl,
)
from pytest_npuperf.db.transaction import Transaction
from pytest_npuperf.kernels import catalog
from pytest_npuperf.kernels.entry import VECTOR, KernelEntry, SlotLayout
from pytest_npuperf.kernels.mapping_writer import ensure_op_mapping
from pytest_npuperf.replay.write import write_results

from .conftest import kd_row, write_kernel_details
from .replay_project import MATMUL_ROWS, VERSION, write_db

DEVICE_DIRS = ("ATLAS_800_A3_752T_128G_DIE", "vllm_ascend", VERSION)
REFERENCE = "version: '0.18.0'\noperator_mappings:\n  aten.mm.default: {kernel_type: MatMulV2}\n"


def _ensure(directory: Path, **kw) -> str:
    with Transaction(directory, "test") as tx:
        return ensure_op_mapping(tx, directory, **kw)


def _doc(directory: Path) -> dict:
    return yaml.safe_load((directory / "op_mapping.yaml").read_text())


def test_a_new_database_gets_one_generated_from_the_catalog(tmp_path):
    db = tmp_path.joinpath(*DEVICE_DIRS)
    db.mkdir(parents=True)
    (db / "FlashAttentionScore.csv").write_text("Input Shapes\n")  # a type the catalog lacks
    assert _ensure(db) == GENERATED
    text = (db / "op_mapping.yaml").read_text()
    assert is_unedited_generated(text)
    doc = _doc(db)
    assert (doc["version"], doc["device"], doc["cann_version"], doc["pytorch_version"]) == (
        "0.18.0", "ATLAS_800_A3_752T_128G_DIE", "8.5", "2.9.0")
    assert "communication_data_ref" not in doc  # no collective tables beside it
    mappings = doc["operator_mappings"]
    # every kernel type of the catalog, and every table of the directory, is named
    assert referenced_kernel_types(doc) >= set(catalog.kernel_types()) | {"FlashAttentionScore"}
    assert mappings["aten.mm.default"] == {"kernel_type": "MatMulV2",
                                           "alternate_kernel_types": ["MatMulV3", "MatMulCommon"]}
    assert mappings["tensor_cast.attention.default"]["query_mode"] == "attention_special"
    # compared up to the first optional slot: the simulator drops absent slots from shapes only
    assert mappings["profiling.GroupedMatmul"]["tc_input_count"] == 2
    assert mappings["profiling.FusedInferAttentionScore"]["tc_input_count"] == 3
    assert "tc_input_count" not in mappings["profiling.SoftmaxV2"]
    assert mappings["profiling.FlashAttentionScore"]["kernel_type"] == "FlashAttentionScore"
    # the same directory gives the same bytes (the embedded database depends on it)
    assert _ensure(db) == KEPT and (db / "op_mapping.yaml").read_text() == text


def test_a_kernel_type_added_to_the_catalog_appears_in_it(tmp_path, monkeypatch):
    entry = KernelEntry(("FancyNorm",), "norm", VECTOR, (SlotLayout("x"), SlotLayout("w")),
                        (SlotLayout("y"),), "torch_npu.npu_fancy_norm(x, w)")
    monkeypatch.setitem(catalog._BY_TYPE, "FancyNorm", entry)
    _ensure(tmp_path)
    assert _doc(tmp_path)["operator_mappings"]["profiling.FancyNorm"] == {
        "kernel_type": "FancyNorm", "notes": "npuperf replays it as torch_npu.npu_fancy_norm(x, w)"}


def test_collective_tables_beside_it_are_referenced_and_mapped(tmp_path):
    db = tmp_path.joinpath(*DEVICE_DIRS)
    hccl = tmp_path / "ATLAS_800_A3_752T_128G_DIE" / "hccl" / "v8.5"
    hccl.mkdir(parents=True)
    db.mkdir(parents=True)
    for name in ("hcom_allReduce_", "hcom_alltoall_", "hcom_alltoallv_"):
        (hccl / f"{name}.csv").write_text("message_bytes,num_devices,Duration(us)\n")
    _ensure(db)
    doc = _doc(db)
    assert doc["communication_data_ref"] == "../../hccl/v8.5/"
    assert (db / doc["communication_data_ref"]).resolve() == hccl.resolve()
    assert doc["communication_fallback"] == "analytic"
    assert doc["operator_mappings"]["tensor_cast.all_reduce.default"] == {
        "kernel_type": "hcom_allReduce_", "category": "communication"}
    assert doc["operator_mappings"]["tensor_cast.all_to_all.default"] == {
        "kernel_type": "hcom_alltoallv_", "category": "communication",
        "alternate_kernel_types": ["hcom_alltoall_"]}
    assert "tensor_cast.all_gather.default" not in doc["operator_mappings"]


def test_collective_tables_staged_with_it_count_and_an_explicit_hccl_dir(tmp_path):
    """The collectives writer stages its tables and the mapping in one transaction."""
    root = tmp_path / "ATLAS_800_A3_752T_128G_DIE"
    db, hccl = root / "vllm_ascend" / VERSION, tmp_path / "elsewhere" / "v8.5"
    with Transaction(tmp_path, "collectives") as tx:
        tx.stage_text(hccl / "hcom_allGather_.csv", "message_bytes,num_devices,Duration(us)\n")
        assert ensure_op_mapping(tx, db, hccl_dir=hccl) == GENERATED
    assert _doc(db)["communication_data_ref"] == "../../../elsewhere/v8.5/"
    assert "tensor_cast.all_gather.default" in _doc(db)["operator_mappings"]


def test_an_existing_file_is_kept_byte_for_byte(tmp_path):
    (tmp_path / "op_mapping.yaml").write_bytes(REFERENCE.encode() + b"# no final newline")
    before = (tmp_path / "op_mapping.yaml").read_bytes()
    (tmp_path / "Add.csv").write_text("Input Shapes\n")
    assert _ensure(tmp_path) == KEPT
    assert (tmp_path / "op_mapping.yaml").read_bytes() == before


def test_a_generated_file_follows_new_tables_until_someone_edits_it(tmp_path):
    _ensure(tmp_path)
    (tmp_path / "Conv2D.csv").write_text("Input Shapes\n")
    assert _ensure(tmp_path) == REGENERATED
    assert "profiling.Conv2D" in _doc(tmp_path)["operator_mappings"]
    edited = (tmp_path / "op_mapping.yaml").read_text().replace("profiling.Conv2D",
                                                                "my_tc.conv2d.default")
    (tmp_path / "op_mapping.yaml").write_text(edited)
    (tmp_path / "Pack.csv").write_text("Input Shapes\n")
    assert _ensure(tmp_path) == KEPT
    assert (tmp_path / "op_mapping.yaml").read_text() == edited


def test_a_copy_of_a_database_gets_the_source_file(tmp_path):
    source, copy = tmp_path / "source", tmp_path / "copy"
    source.mkdir()
    (source / "op_mapping.yaml").write_bytes(b"\xef\xbb\xbf" + REFERENCE.encode())
    assert _ensure(copy, source=source) == COPIED
    assert (copy / "op_mapping.yaml").read_bytes() == (source / "op_mapping.yaml").read_bytes()
    (source / "op_mapping.yaml").unlink()
    other = tmp_path / "other"
    assert _ensure(other, source=source) == GENERATED


def test_it_is_all_or_nothing_with_the_tables(tmp_path):
    with pytest.raises(RuntimeError), Transaction(tmp_path, "test") as tx:
        tx.stage_text(tmp_path / "Add.csv", "Input Shapes\n")
        ensure_op_mapping(tx, tmp_path)
        raise RuntimeError("interrupted")
    assert list(tmp_path.iterdir()) == []


def test_a_broken_file_is_a_one_line_error(tmp_path):
    (tmp_path / "op_mapping.yaml").write_text("operator_mappings: [\n")
    with pytest.raises(NpuperfError, match="invalid YAML"):
        load_op_mapping(tmp_path / "op_mapping.yaml")
    (tmp_path / "op_mapping.yaml").write_text("- a list\n")
    with pytest.raises(NpuperfError, match="not a YAML mapping"):
        load_op_mapping(tmp_path / "op_mapping.yaml")
    source = tmp_path / "src"
    source.mkdir()
    (source / "op_mapping.yaml").write_bytes(b"\xff\xfe binary")
    with pytest.raises(NpuperfError, match="not UTF-8"):
        _ensure(tmp_path / "dst", source=source)


def test_parse_grid_and_device_copies_write_it(tmp_path, npuperf):
    parsed = tmp_path.joinpath("parsed", *DEVICE_DIRS)
    kd = write_kernel_details(tmp_path / "kernel_details.csv", [kd_row("MatMulV2", 40.0)])
    code, out, _ = npuperf("parse", "--quiet", "--profile", kd, "--db", parsed)
    assert code == 0 and "op_mapping.yaml: generated" in out
    assert "profiling.MatMulV2" in _doc(parsed)["operator_mappings"]
    code, out, _ = npuperf("grid", "--db", parsed, "--kernels", "SwiGlu", "--rows", "2",
                           "--quiet")
    assert code == 0 and "op_mapping.yaml" not in out  # kept: it already names SwiGlu

    source = write_db(tmp_path / "src", {"MatMulV2": MATMUL_ROWS})
    target = tmp_path / "cpu" / VERSION
    write_results(source, target, [], native=False)
    assert _doc(target)["operator_mappings"]["profiling.MatMulV2"]["kernel_type"] == "MatMulV2"
    assert not (source / "op_mapping.yaml").exists()  # the source is not written


def test_the_version_directories_a_collective_table_serves(tmp_path):
    device = tmp_path / "ATLAS_800_A3_752T_128G_DIE"
    for name in ("vllm0.18.0_torch2.9.0_cann8.5", "vllm0.15.0_torch2.9.0_cann8.5",
                 "vllm0.13.0_torch2.8.0_cann8.3", "notes"):
        (device / "vllm_ascend" / name).mkdir(parents=True)
    assert [d.name for d in version_dirs_for_hccl(device / "hccl" / "v8.5")] == [
        "vllm0.15.0_torch2.9.0_cann8.5", "vllm0.18.0_torch2.9.0_cann8.5"]
    assert version_dirs_for_hccl(tmp_path / "elsewhere" / "v8.5") == []


def test_what_the_simulator_reads_beyond_the_catalog(tmp_path):
    """Zero-cost operators (views, steps fused into another kernel), aten.cat and
    aten.native_layer_norm where the database has ConcatD / LayerNormV3 tables (aten.cat costs
    0 without one), the grouped GEMMs compared on x and the weight, and the reference's
    interpolation policy (issue 30)."""
    db = tmp_path.joinpath(*DEVICE_DIRS)
    db.mkdir(parents=True)
    assert _ensure(db) == GENERATED
    doc = _doc(db)
    mappings = doc["operator_mappings"]
    zero = {op for op, m in mappings.items() if m.get("zero_cost")}
    assert {"aten.view.default", "aten.permute.default", "aten.topk.default",
            "aten.copy_.default", "aten.cat.default", "tensor_cast.cat.default"} <= zero
    assert len(zero) >= 34 and all(mappings[op].get("notes") for op in zero)
    assert not any("kernel_type" in mappings[op] for op in zero)
    assert "aten.native_layer_norm.default" not in mappings
    grouped = {op: m for op, m in mappings.items() if op.startswith("tensor_cast.grouped_matmul")}
    assert len(grouped) == 10 and all(m["tc_input_count"] == 2 for m in grouped.values())
    policy = doc["interpolation_policy"]["kernel_overrides"]
    assert policy["FusedInferAttentionScore"] == {"axis_transform": "sqrt_seq"}
    assert policy["MatMulV2"] == {"max_interpolation_dim": 1}
    assert policy["GatherV2"] == {"generic_compute": {"axis": "output_numel"}}
    assert "ConcatD" not in policy and "&id" not in (db / "op_mapping.yaml").read_text()

    for name in ("ConcatD", "LayerNormV3"):  # tables a parsed profile brings
        (db / f"{name}.csv").write_text("Input Shapes\n")
    assert _ensure(db) == REGENERATED
    doc = _doc(db)
    mappings = doc["operator_mappings"]
    assert mappings["aten.cat.default"] == {"kernel_type": "ConcatD"}
    assert mappings["tensor_cast.cat.default"] == {"kernel_type": "ConcatD"}
    assert mappings["aten.native_layer_norm.default"] == {"kernel_type": "LayerNormV3",
                                                          "tc_input_count": 3}
    assert doc["interpolation_policy"]["kernel_overrides"]["ConcatD"] == {
        "generic_compute": {"axis": "output_numel"}}
