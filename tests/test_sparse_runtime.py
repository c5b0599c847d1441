"""The `Runtime ...` cells of LightningIndexer and SparseFlashAttention rows: from a profiled
row's shapes (`inferred_only`), from the replay's own arguments (`complete`), written by
`npuperf grid` and `npuperf parse`, checked by `validate --consumer`."""

from __future__ import annotations

from pytest_npuperf.db.columns import FIA_RUNTIME_COLUMNS
from pytest_npuperf.kernels import sparse_runtime
from pytest_npuperf.kernels.case import case_from_row
from pytest_npuperf.kernels.registry import spec_for

from .conftest import kd_row, read_rows, write_kernel_details
from .coverage_data import VERSION_DIR
from .kernel_rows import row

F32, I32 = "DT_FLOAT", "DT_INT32"
# DeepSeek-V3.2's calls as vLLM-Ascend makes them: TND query, paged key of 4-token blocks.
INDEXER = row([((6, 4, 16), F32), ((5, 4, 1, 16), F32), ((6, 4), F32), ((2,), I32),
               ((2,), I32), ((2, 3), I32)], [((6, 1, 8), I32), None])
SPARSE = row([((6, 4, 32), F32), ((5, 4, 1, 32), F32), ((5, 4, 1, 32), F32), ((6, 1, 4), I32),
              ((2, 3), I32), ((2,), I32), ((2,), I32), ((6, 4, 8), F32), ((5, 4, 1, 8), F32)],
             [((6, 4, 32), F32), ((1, 6, 4), F32), ((1, 6, 4), F32)],
             actual_seq_lengths_kv_values="7,10")


def _runtime(cells: dict[str, str]) -> dict[str, str]:
    return {k.removeprefix("Runtime "): v for k, v in cells.items() if v}


def test_the_replays_arguments_are_complete_runtime():
    case = case_from_row("LightningIndexer", INDEXER)
    cells = spec_for("LightningIndexer").runtime_cells(case)
    assert set(cells) == set(FIA_RUNTIME_COLUMNS)
    # no lengths in the row: the replay splits 6 tokens over the 2 block-table rows and gives
    # each its share of the 5-block pool (10 of 20 tokens)
    assert _runtime(cells) == {
        "source_profile": "replay_arguments", "metadata_completeness": "complete",
        "input_layout": "TND", "num_heads": "4", "num_key_value_heads": "1",
        "block_size": "4", "cache_layout": "PA_BSND", "kv_cache_mode": "paged",
        "block_table_shape": "2,3", "batch_size": "2", "actual_seq_lengths_shape": "2",
        "actual_seq_lengths_kv_shape": "2", "topk": "8", "actual_seq_lengths_values": "3,6",
        "actual_seq_lengths_kv_values": "10,10", "avg_seq_len": "10", "sparse_mode": "3",
        "phase": "mixed", "block_table_valid_blocks": "3,3"}
    # a row carrying them is replayed with the same arguments
    again = case_from_row("LightningIndexer", {**INDEXER, **cells})
    assert spec_for("LightningIndexer").runtime_cells(again) == cells


def test_sparse_flash_attention_adds_its_sparse_arguments():
    cells = _runtime(spec_for("SparseFlashAttention").runtime_cells(
        case_from_row("SparseFlashAttention", SPARSE)))
    assert cells["actual_seq_lengths_kv_values"] == "7,10" and cells["avg_seq_len"] == "8"
    assert (cells["sparse_block_size"], cells["sparse_indices_pattern"],
            cells["sparse_indices_valid_count"], cells["topk"]) == ("1", "uniform", "4", "4")
    assert cells["metadata_completeness"] == "complete"


def test_a_profiled_rows_shapes_say_what_they_can():
    cells = _runtime(sparse_runtime.from_shapes(case_from_row("SparseFlashAttention", SPARSE),
                                                source="run_ascend_pt"))
    assert cells["metadata_completeness"] == "inferred_only"
    assert "avg_seq_len" not in cells and "actual_seq_lengths_values" not in cells
    assert (cells["num_heads"], cells["num_key_value_heads"], cells["block_size"],
            cells["topk"]) == ("4", "1", "4", "4")


def test_grid_and_parse_write_them(tmp_path, npuperf):
    directory = tmp_path.joinpath(*VERSION_DIR)
    code, _, err = npuperf("grid", "--db", directory, "--config", "embedded_db", "--kernels",
                           "SparseFlashAttention,LightningIndexer", "--quiet")
    assert code == 0, err
    for kernel_type in ("SparseFlashAttention", "LightningIndexer"):
        rows = read_rows(directory / f"{kernel_type}.csv")
        assert rows and all(r["Runtime metadata_completeness"] == "complete" for r in rows)
        assert all(int(r["Runtime avg_seq_len"]) > 0 for r in rows)
    code, out, _ = npuperf("validate", "--consumer", directory)
    assert code == 0, out

    shapes = SPARSE["Input Shapes"]
    kd = write_kernel_details(tmp_path / "run_ascend_pt" / "kernel_details.csv", [kd_row(
        "SparseFlashAttention", 55.0, in_shapes=shapes, in_dtypes=SPARSE["Input Data Types"],
        in_formats=SPARSE["Input Formats"], out_shapes=SPARSE["Output Shapes"],
        out_dtypes=SPARSE["Output Data Types"], out_formats=SPARSE["Output Formats"])])
    parsed = tmp_path / "parsed" / VERSION_DIR[-1]
    assert npuperf("parse", "--quiet", "--profile", kd, "--db", parsed)[0] == 0
    (profiled,) = read_rows(parsed / "SparseFlashAttention.csv")
    assert profiled["Runtime metadata_completeness"] == "inferred_only"
    assert profiled["Runtime topk"] == "4" and profiled["Runtime avg_seq_len"] == ""
    assert profiled["Runtime source_profile"] == "run_ascend_pt"


def test_validate_consumer_asks_sparse_attention_tables_for_the_runtime_columns(
        tmp_path, npuperf):
    from pytest_npuperf.db.columns import contract_columns_for

    from .conftest import write_csv

    directory = tmp_path.joinpath(*VERSION_DIR)
    header = [c for c in contract_columns_for("LightningIndexer")
              if c not in FIA_RUNTIME_COLUMNS]  # a file written before the columns existed
    write_csv(directory / "LightningIndexer.csv", header, [INDEXER])
    code, out, _ = npuperf("validate", "--consumer", directory)
    assert code == 1 and "missing column(s) Runtime source_profile" in out
