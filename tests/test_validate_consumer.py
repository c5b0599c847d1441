"""`npuperf validate --consumer`: what the simulator reading a database needs (issue 9)."""

from __future__ import annotations

from pytest_npuperf.db.validate import validate_path
from pytest_npuperf.harness.options import DEFAULT_DB

from .conftest import read_rows
from .msmodeling_consumer import write_pre_issue9_database

EMBEDDED = DEFAULT_DB
VERSION_DIR = ("ATLAS_800_A3_752T_128G_DIE", "vllm_ascend", "vllm0.18.0_torch2.9.0_cann8.5")


def test_the_four_problems_of_a_pre_issue9_database_are_flagged(tmp_path, npuperf):
    db = write_pre_issue9_database(tmp_path / "db")
    code, out, _ = npuperf("validate", "--consumer", db)
    assert code == 1
    # 1. no op_mapping.yaml
    assert "op_mapping.yaml (operator mappings, 1 problem(s))" in out
    assert "no op_mapping.yaml: the simulator maps no operator to these 4 table(s)" in out
    # 2. a scalar output written as an empty cell
    assert ("row 1, column 'Output Shapes': shape cell '' reads as NaN in pandas and the "
            "simulator's shape parser fails on it") in out
    # 3. dtype spellings the simulator does not match
    assert "row 1, column 'Input Data Types': dtype 'DT_FLOAT': real profiler output and the " \
           "simulator spell it 'FLOAT'" in out
    assert "dtype 'DT_INT64': real profiler output and the simulator spell it 'INT64'" in out
    # 4. attention rows without the Runtime columns the simulator reads
    assert "missing column(s) Runtime phase, Runtime topk, Runtime cache_layout" in out
    assert "5 file(s) checked: 0 ok, 5 with problems (6 in all)" in out
    # Without --consumer the same findings are warnings: the contract itself is kept.
    code, out, _ = npuperf("validate", db)
    assert code == 0
    assert "5 file(s) checked: 5 ok, 0 with problems (0 in all); 6 warning(s)" in out
    assert "warning: no op_mapping.yaml" in out


def test_databases_this_project_writes_are_clean_for_the_simulator(tmp_path, realdata, npuperf):
    parsed = tmp_path.joinpath(*VERSION_DIR)
    assert npuperf("parse", "--quiet", "--profile", realdata / "kernel_details",
                   "--db", parsed)[0] == 0
    for database in (parsed, EMBEDDED):
        code, out, _ = npuperf("validate", "--consumer", database)
        assert code == 0, out
        assert "warning" not in out


def test_op_mapping_coverage_and_collective_reference(tmp_path):
    db = tmp_path.joinpath(*VERSION_DIR)
    write_pre_issue9_database(db)
    (db / "op_mapping.yaml").write_text(
        'communication_data_ref: "../../hccl/v9.9/"\n'
        "operator_mappings:\n  aten.mm.default: {kernel_type: MatMulV2}\n"
        "  tensor_cast.attention.default: {kernel_type: FusedInferAttentionScore,\n"
        "                                  alternate_kernel_types: [Add]}\n")
    report = next(r for r in validate_path(db, consumer=True) if r.path.name == "op_mapping.yaml")
    messages = [p.message for p in report.problems]
    assert messages[0].startswith("no operator mapping names GroupedMatmul.csv: the simulator "
                                  "never reads it")
    assert messages[1].startswith("communication_data_ref '../../hccl/v9.9/': no such directory")
    (db / "op_mapping.yaml").write_text(
        "operator_mappings:\n  profiling.all: {composite: true, sub_kernels: [Add, MatMulV2,\n"
        "    GroupedMatmul, FusedInferAttentionScore]}\n")
    hccl = tmp_path / "ATLAS_800_A3_752T_128G_DIE" / "hccl" / "v8.5"
    hccl.mkdir(parents=True)
    (hccl / "hcom_allReduce_.csv").write_text("message_bytes,num_devices,Duration(us)\n1,2,3\n")
    report = next(r for r in validate_path(db) if r.path.name == "op_mapping.yaml")
    assert report.ok and [p.message for p in report.warnings] == [
        f"collective tables in {hccl} but no communication_data_ref: the simulator looks for "
        f"them in this directory and misses"]
    (db / "op_mapping.yaml").write_text("operator_mappings: [\n")
    report = next(r for r in validate_path(db) if r.path.name == "op_mapping.yaml")
    assert [p.message for p in report.warnings] == ["invalid YAML (line 2)"]


def test_grid_rows_use_the_spellings_of_real_profiler_output():
    """The embedded database is the grid's output (test_grid_cli regenerates it byte for byte)."""
    rows = {k: read_rows(EMBEDDED / f"{k}.csv")
            for k in ("DispatchFFNCombine", "FusedInferAttentionScore", "GroupedMatmul")}
    tokens = {t for kernel_rows in rows.values() for row in kernel_rows
              for column in ("Input Data Types", "Output Data Types")
              for t in row[column].split(";")}
    assert tokens == {"DT_BF16", "FLOAT", "INT8", "INT32", "INT64", "DT_UNDEFINED"}
    fia = rows["FusedInferAttentionScore"]
    assert {(r["Runtime phase"], r["Runtime cache_layout"]) for r in fia} >= {
        ("prefill", ""), ("decode", "PA_BNSD")}
    assert all(r["Runtime batch_size"].isdigit() and r["Runtime topk"] == "" for r in fia)
