"""Hand-made kernel tables for the coverage tests: rows in the database's own format (the
contract's columns, cells as the profiler spells them), with a latency or without one."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from pytest_npuperf.db.columns import contract_columns_for

from .conftest import write_csv

STANDARD = Path(__file__).parent / "data" / "density_standard" / "msmodeling-84fec85" / \
    "axis_collection_density.yaml"
VERSION_DIR = ("ATLAS_800_A3_752T_128G_DIE", "vllm_ascend", "vllm0.18.0_torch2.9.0_cann8.5")


def gemm_row(m: int, n: int, k: int, latency: float | str | None, *, dtype: str = "DT_BF16",
             column: str = "Average Duration(us)") -> dict[str, str]:
    """A MatMulV2 row `(M, K) x (N, K) -> (M, N)`, the reference replay's layout."""
    row = {"OP State": "dynamic", "Accelerator Core": "AI_CORE",
           "Input Shapes": f"{m},{k};{n},{k}", "Input Data Types": f"{dtype};{dtype}",
           "Input Formats": "ND;ND", "Output Shapes": f"{m},{n}", "Output Data Types": dtype,
           "Output Formats": "ND"}
    if latency is not None:
        row[column] = str(latency)
    return row


def attention_row(tokens: int, heads: int, head_dim: int, seq: int, batch: int,
                  latency: float | None) -> dict[str, str]:
    """A FusedInferAttentionScore row (TND query, 31 slots) with the Runtime cells the
    simulator's attention interpolation reads."""
    empty = ";" * 28
    row = {"OP State": "dynamic", "Accelerator Core": "MIX_AIC",
           "Input Shapes": f"{tokens},{heads},{head_dim};{tokens},{heads},{head_dim};"
                           f"{tokens},{heads},{head_dim}{empty}",
           "Input Data Types": "DT_BF16;DT_BF16;DT_BF16" + ";DT_UNDEFINED" * 28,
           "Input Formats": "ND;ND;ND" + ";NULL" * 28,
           "Output Shapes": f"{tokens},{heads},{head_dim}", "Output Data Types": "DT_BF16",
           "Output Formats": "ND", "Runtime avg_seq_len": str(seq),
           "Runtime batch_size": str(batch), "Runtime sparse_mode": "3",
           "Runtime num_key_value_heads": str(heads), "Runtime input_layout": "TND"}
    if latency is not None:
        row["Average Duration(us)"] = str(latency)
    return row


def write_table(directory: Path, kernel_type: str, rows: Iterable[dict[str, str]]) -> Path:
    rows = list(rows)
    header = list(contract_columns_for(kernel_type))
    header += [c for row in rows for c in row if c not in header]
    header = list(dict.fromkeys(header))
    return write_csv(directory / f"{kernel_type}.csv", header, rows)


def database(tmp_path: Path, tables: dict[str, Iterable[dict[str, str]]]) -> Path:
    """A version directory holding `tables` (kernel type -> rows)."""
    directory = tmp_path.joinpath(*VERSION_DIR)
    directory.mkdir(parents=True, exist_ok=True)
    for kernel_type, rows in tables.items():
        write_table(directory, kernel_type, rows)
    return directory
