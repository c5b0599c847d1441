"""Columns of the compute CSVs and legacy migration (CONTRACT.md §2)."""

from __future__ import annotations

import pytest

from pytest_npuperf.db import columns as C
from pytest_npuperf.db.table import read_table
from pytest_npuperf.db.upsert import migrate_legacy

from .conftest import COUNTERS

IDENTITY = ["OP State", "Accelerator Core", "Input Shapes", "Input Data Types", "Input Formats",
            "Output Shapes", "Output Data Types", "Output Formats"]
FIA_RUNTIME = ["Runtime source_profile", "Runtime actual_seq_lengths_shape",
               "Runtime actual_seq_lengths_values", "Runtime actual_seq_lengths_kv_shape",
               "Runtime actual_seq_lengths_kv_values", "Runtime avg_seq_len",
               "Runtime block_table_shape", "Runtime block_table_valid_blocks",
               "Runtime num_heads", "Runtime num_key_value_heads", "Runtime sparse_mode",
               "Runtime input_layout", "Runtime block_size", "Runtime attn_state",
               "Runtime kv_cache_mode", "Runtime metadata_completeness",
               "Runtime operator_input_shapes_raw", "Runtime phase", "Runtime topk",
               "Runtime cache_layout", "Runtime sparse_block_size",
               "Runtime sparse_indices_pattern", "Runtime sparse_indices_valid_count",
               "Runtime quant_mode", "Runtime batch_size"]


def _expected_new_file_columns() -> list[str]:
    cols = IDENTITY + ["Average Duration(us)", "Profiling Average Duration(us)",
                       "Profiling Median Duration(us)", "Profiling Std Duration(us)"]
    for m in COUNTERS:
        cols += [f"MicroBench {m}", f"Profiling Average {m}"]
    return cols


def test_contract_columns_are_the_62_in_contract_order() -> None:
    expected = _expected_new_file_columns()
    assert len(expected) == 62
    assert list(C.CONTRACT_COLUMNS) == expected
    assert list(C.contract_columns_for("MatMulV2")) == expected


def test_dispatch_ffn_combine_has_ep_size_in_its_identity() -> None:
    cols = C.contract_columns_for("DispatchFFNCombine")
    assert cols[:9] == (*IDENTITY, "EP Size")
    assert list(cols[9:]) == _expected_new_file_columns()[8:]


def test_fia_runtime_columns_follow_the_contract_columns() -> None:
    cols = list(C.contract_columns_for("FusedInferAttentionScore"))
    assert cols[:62] == _expected_new_file_columns()
    assert cols[62:] == FIA_RUNTIME


@pytest.mark.parametrize("text, value", [
    ("1.5", 1.5), (" 2 ", 2.0), ("1e3", 1000.0), (3, 3.0), (0.25, 0.25),
    ("", None), ("0", None), ("0.0", None), ("N/A", None), ("junk", None), ("-1", None),
    ("nan", None), ("inf", None), (None, None), (0, None),
])
def test_parse_duration(text, value) -> None:
    assert C.parse_duration(text) == value
    assert C.is_valid_duration(text) is (value is not None)


def test_readers_take_the_first_valid_duration_in_priority_order() -> None:
    assert C.first_valid_duration({"Average Duration(us)": "5", "Duration(us)": "9"}) == 5.0
    assert C.first_valid_duration({"Average Duration(us)": "0",
                                   "Profiling Average Duration(us)": "N/A",
                                   "Duration(us)": "7.5"}) == 7.5
    assert C.first_valid_duration({"Average Duration(us)": "",
                                   "Profiling Average Duration(us)": "3"}) == 3.0
    assert C.first_valid_duration({"Average Duration(us)": "junk"}) is None


def test_current_header_needs_no_migration() -> None:
    header = _expected_new_file_columns()
    assert not C.is_legacy_profiling_schema(header)
    assert C.legacy_renames(header) == {}


def test_microbench_duration_is_renamed_to_average_duration() -> None:
    header = IDENTITY + ["MicroBench Duration(us)", "Profiling Average Duration(us)",
                         "MicroBench Task Duration(us)", "Notes"]
    assert C.legacy_renames(header) == {"MicroBench Duration(us)": "Average Duration(us)"}


def test_rename_never_lands_on_a_column_that_stays() -> None:
    # Both the old and the new name exist: renaming would drop one of them.
    header = IDENTITY + ["MicroBench Duration(us)", "Average Duration(us)",
                         "Profiling Average Duration(us)"]
    assert C.legacy_renames(header) == {}


def test_old_fixture_schema_is_detected_and_mapped_to_profiling_columns() -> None:
    header = IDENTITY + ["Average Duration(us)", "Median Duration(us)", "Std Duration(us)",
                         *(f"Average {m}" for m in COUNTERS), "avg_seq_len"]
    assert C.is_legacy_profiling_schema(header)
    renames = C.legacy_renames(header)
    assert renames["Average Duration(us)"] == "Profiling Average Duration(us)"
    assert renames["Median Duration(us)"] == "Profiling Median Duration(us)"
    assert renames["Std Duration(us)"] == "Profiling Std Duration(us)"
    assert renames["Average aicore_time(us)"] == "Profiling Average aicore_time(us)"
    assert len(renames) == 3 + 25
    assert "avg_seq_len" not in renames


def test_old_schema_with_microbench_duration_moves_both(tmp_path) -> None:
    path = tmp_path / "Add.csv"
    path.write_text("OP State,Average Duration(us),Median Duration(us),MicroBench Duration(us)\n"
                    "dynamic,12.5,12.0,9.5\n")
    frame, renames = migrate_legacy(read_table(path))
    assert list(frame.columns) == ["OP State", "Profiling Average Duration(us)",
                                   "Profiling Median Duration(us)", "Average Duration(us)"]
    row = frame.iloc[0].to_dict()
    assert row["Profiling Average Duration(us)"] == "12.5"   # profiling, not replay
    assert row["Average Duration(us)"] == "9.5"              # the replay value
    assert renames["MicroBench Duration(us)"] == "Average Duration(us)"


def test_real_msmodeling_fixture_is_read_as_profiling_values(realdata) -> None:
    path = realdata / "msmodeling" / "msmodeling_fixture_fia_raw_test_FusedInferAttentionScore.csv"
    frame = read_table(path)
    assert C.is_legacy_profiling_schema(frame.columns)
    migrated, _renames = migrate_legacy(frame)
    assert "Average Duration(us)" not in migrated.columns      # nothing mistaken for a replay
    assert migrated["Profiling Average Duration(us)"].tolist() == \
        frame["Average Duration(us)"].tolist()
    assert migrated["Profiling Average Duration(us)"].iloc[0] == "58.2"
    assert list(migrated.columns)[-1] == "avg_seq_len"          # unknown column kept in place
    assert len(migrated.columns) == len(frame.columns)


def test_merge_column_order_keeps_existing_and_places_contract_columns() -> None:
    existing = ["OP State", "Input Shapes", "Notes", "Profiling Average Duration(us)", "Extra"]
    canonical = C.CONTRACT_COLUMNS
    out = C.merge_column_order(existing, ["Accelerator Core", "Average Duration(us)",
                                          "Profiling Median Duration(us)", "My Column"],
                               canonical)
    # nothing moved or dropped
    assert [c for c in out if c in existing] == existing
    # contract columns land after their nearest predecessor present in the file
    assert out.index("Accelerator Core") == out.index("OP State") + 1
    # (the nearest *contract* column: an unknown column in between stays where it is)
    assert out.index("Average Duration(us)") == out.index("Input Shapes") + 1
    assert out.index("Notes") == out.index("Average Duration(us)") + 1
    assert out.index("Profiling Median Duration(us)") == \
        out.index("Profiling Average Duration(us)") + 1
    assert out[-1] == "My Column"                              # unknown: at the end


def test_merge_column_order_without_predecessor_goes_before_the_first_successor() -> None:
    out = C.merge_column_order(["Input Shapes", "Notes"], ["OP State"], C.CONTRACT_COLUMNS)
    assert out == ["OP State", "Input Shapes", "Notes"]
