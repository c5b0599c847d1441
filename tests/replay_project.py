"""A small replay project for pytester: a bench suite and a database in the contract layout."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pandas as pd

from pytest_npuperf.db.columns import contract_columns_for

DEVICE = "ATLAS_800_A3_752T_128G_DIE"
VERSION = "vllm0.18.0_torch2.9.0_cann8.5"
BENCH = '''
def test_kernel(npuperf_case, npuperf_replay):
    npuperf_replay(npuperf_case)
'''
# Fast sampling for tests: the behaviour is under test here, not the numbers. Fewer samples
# than the noise rule judges (measure/noise.py): whether this shared machine happened to be
# quiet must not decide where a test's numbers go.
# No figures either: the tests of the figures and of the html page ask for them (and
# test_msprof_wrap checks that the flag is obeyed). Samples during which this busy machine ran
# other processes are kept (counted) for the same reason: tests/test_preemption.py tests the
# rejection.
FAST = ["--npuperf-device", "cpu", "--npuperf-warmup", "1", "--npuperf-min-samples", "3",
        "--npuperf-max-samples", "9", "--npuperf-budget", "0.05", "--npuperf-min-time", "0",
        "--npuperf-no-figures", "--npuperf-preempted", "keep", "-p", "no:cacheprovider"]


def no_value_count(result) -> int:
    """Cases a session reported `no value` (pytest's summary line says `1 no value`, which its
    outcome parser reads as the noun `no`)."""
    return result.parseoutcomes().get("no", 0)


def measured_count(result) -> int:
    """Cases that ran and measured: passed, or `no value` when this busy host left one noisy."""
    return result.parseoutcomes().get("passed", 0) + no_value_count(result)


def cells(shapes, dtypes, formats, out_shapes, out_dtypes, out_formats="ND", **extra):
    row = {"OP State": "dynamic", "Accelerator Core": "AI_CORE", "Input Shapes": shapes,
           "Input Data Types": dtypes, "Input Formats": formats, "Output Shapes": out_shapes,
           "Output Data Types": out_dtypes, "Output Formats": out_formats}
    row.update(extra)
    return row


MATMUL_ROWS = [
    cells("16,64;32,64", "DT_BF16;DT_BF16", "ND;ND", "16,32", "DT_BF16",
          **{"Profiling Average Duration(us)": "0.001"}),
    cells("8,128;64,128", "DT_FLOAT;DT_FLOAT", "ND;ND", "8,64", "DT_FLOAT",
          **{"Average Duration(us)": "12.5"}),
]
RMSNORM_ROWS = [
    cells("4,256;256", "DT_BF16;DT_BF16", "ND;ND", "4,256;4,1", "DT_BF16;DT_FLOAT", "ND;ND"),
]
UNREPLAYABLE_ROWS = [
    cells("8,16", "DT_BF16", "ND", "8,16", "DT_BF16"),
]


def write_db(root: Path, tables: dict[str, list[dict]], extra_columns: tuple[str, ...] = (),
             device: str = DEVICE) -> Path:
    db = root / device / "vllm_ascend" / VERSION
    db.mkdir(parents=True, exist_ok=True)
    for kernel_type, rows in tables.items():
        columns = [*contract_columns_for(kernel_type), *extra_columns]
        frame = pd.DataFrame(rows, columns=columns, dtype=object).fillna("")
        frame.to_csv(db / f"{kernel_type}.csv", index=False, lineterminator="\n")
    return db


def default_tables() -> dict[str, list[dict]]:
    return {"MatMulV2": MATMUL_ROWS, "RmsNorm": RMSNORM_ROWS, "Unreplayable": UNREPLAYABLE_ROWS}


def tree_digest(path: Path) -> dict[str, str]:
    """Every file under `path` (hidden ones included) and the hash of its bytes."""
    return {str(p.relative_to(path)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(path.rglob("*")) if p.is_file()}


def run_json(out: Path) -> dict:
    runs = sorted((out / "reports").glob("run_*.json"))
    assert runs, f"no run json under {out}/reports"
    return json.loads(runs[-1].read_text())
