"""What the simulator needs from a database (`npuperf validate --consumer`).

The simulator that costs a model from this database (msmodeling's `ProfilingDataSource`)
reads it with plain `pandas.read_csv` and its own small parsers. These checks say where it
would miss rows or fail (facts of its reader; docs/format.md §1-3, §12):

- `op_mapping.yaml` in the version directory, naming every kernel table (it reads no table an
  operator mapping does not name) and, when collective tables sit beside the database, a
  `communication_data_ref` that points at them;
- shape cells its parser accepts: pandas reads an empty cell, `N/A`, `NULL`, `None`, ... as NaN
  and the parser then fails on `nan`; a slot is `d1,d2,...` of integers or `()`;
- dtype tokens in the spelling it matches (`DT_BF16`, but `FLOAT`, `INT8`, `INT32`, `INT64`,
  `BOOL`): a `DT_FLOAT` row is never found by a float32 query; formats as it compares them
  (`FRACTAL_NZ`, not `FORMAT_FRACTAL_NZ`);
- FusedInferAttentionScore, SparseFlashAttention and LightningIndexer files with every
  `Runtime ...` column (a query carrying a phase or topk is refused by rows without the column;
  the sparse-attention rows need `Runtime avg_seq_len` to be read at all) and numbers where it
  converts cells with int(); DispatchFFNCombine's `EP Size` an integer.
"""

from __future__ import annotations

import math
import os
from pathlib import Path

import pandas as pd

from .columns import (
    DISPATCH_FFN_COMBINE,
    EP_SIZE,
    FIA_RUNTIME_COLUMNS,
    FORMAT_COLUMNS,
    INPUT_DTYPES,
    OUTPUT_DTYPES,
    RUNTIME_KERNELS,
    SHAPE_COLUMNS,
    runtime_column,
)
from .errors import NpuperfError
from .layout import OP_MAPPING_FILE
from .op_mapping import (
    COLLECTIVE_PREFIX,
    default_hccl_dir,
    load_op_mapping,
    referenced_kernel_types,
)
from .shapes import normalize_format, profiler_dtype, split_list

try:  # the cell texts pandas.read_csv turns into NaN by default
    from pandas._libs.parsers import STR_NA_VALUES as _NA_TEXTS
except ImportError:  # pragma: no cover - a pandas that moved it
    _NA_TEXTS = frozenset({"", "#N/A", "#N/A N/A", "#NA", "-1.#IND", "-1.#QNAN", "-NaN", "-nan",
                           "1.#IND", "1.#QNAN", "<NA>", "N/A", "NA", "NULL", "NaN", "None", "n/a",
                           "nan", "null"})

# Runtime cells the simulator converts with int() when they are not NaN.
_INT_RUNTIME = tuple(runtime_column(f) for f in (
    "avg_seq_len", "sparse_mode", "num_key_value_heads", "topk", "block_size", "num_heads",
    "sparse_block_size", "sparse_indices_valid_count", "batch_size"))
_DTYPE_COLUMNS = (INPUT_DTYPES, OUTPUT_DTYPES)


def _consumer_shape_problem(text: str) -> str | None:
    """Why the simulator's shape parser fails on a cell pandas gave it, or None."""
    if text in _NA_TEXTS:
        return (f"shape cell {text!r} reads as NaN in pandas and the simulator's shape parser "
                f"fails on it; a scalar or empty slot is written \"\" (as the profiler does)")
    for part in text.strip().strip('"').split(";"):
        part = part.strip()
        if not part or part == "()":
            continue
        for dim in part.split(","):
            try:
                int(dim)
            except ValueError:
                return (f"shape slot {part!r} is not a list of integers the simulator can read "
                        f"(write it as d1,d2,... ; an absent slot as nothing between the ;)")
    return None


def _consumer_shape_problems(text: str) -> list[str]:
    problem = _consumer_shape_problem(text)
    return [problem] if problem else []


def _dtype_problems(text: str) -> list[str]:
    out = []
    for token in (t.strip() for t in split_list(text)):
        want = profiler_dtype(token) if token else token
        if want != token:
            out.append(f"dtype {token!r}: real profiler output and the simulator spell it "
                       f"{want!r} (a query for it misses this row)")
    return list(dict.fromkeys(out))


def _format_problems(text: str) -> list[str]:
    out = []
    for token in (t.strip() for t in split_list(text)):
        want = normalize_format(token) if token else token
        if want not in (token, "NULL"):
            out.append(f"format {token!r}: the simulator compares {want!r}")
    return list(dict.fromkeys(out))


def _is_number(text: str) -> bool:
    try:
        return math.isfinite(float(text))
    except ValueError:
        return False


def kernel_table_warnings(frame: pd.DataFrame, kernel_type: str) -> list[tuple[int | None, str, str]]:
    """(row or None, column, message) for what the simulator cannot read in one kernel table;
    each distinct message once per column, at its first row, with a count."""
    found: dict[tuple[str, str], list[int]] = {}

    def note(row: int | None, column: str, message: str) -> None:
        rows = found.setdefault((column, message), [])
        if not rows or rows[-1] != (row or 0):  # a row says it once per column
            rows.append(row or 0)

    for column in (*SHAPE_COLUMNS, *_DTYPE_COLUMNS, *FORMAT_COLUMNS):
        if column not in frame.columns:
            continue
        check = _consumer_shape_problems if column in SHAPE_COLUMNS else \
            _dtype_problems if column in _DTYPE_COLUMNS else _format_problems
        seen: dict[str, list[str]] = {}  # a real table repeats a few thousand cells
        for i, text in enumerate(frame[column].tolist(), start=1):
            if text not in seen:
                seen[text] = check(text)
            for message in seen[text]:
                note(i, column, message)
    if kernel_type in RUNTIME_KERNELS:
        missing = [c for c in FIA_RUNTIME_COLUMNS if c not in frame.columns]
        if missing:
            note(None, "", f"missing column(s) {', '.join(missing)}: the simulator's attention "
                           f"queries that carry these refuse rows without them (npuperf parse "
                           f"or grid adds them, empty where unknown)")
        for column in _INT_RUNTIME:
            if column in frame.columns:
                for i, text in enumerate(frame[column].tolist(), start=1):
                    if text.strip() not in _NA_TEXTS and not _is_number(text):
                        note(i, column, f"{text!r} is not a number: the simulator reads this "
                                        f"column with int()")
    if kernel_type == DISPATCH_FFN_COMBINE and EP_SIZE in frame.columns:
        for i, text in enumerate(frame[EP_SIZE].tolist(), start=1):
            if not text.strip().isdigit():
                note(i, EP_SIZE, f"EP Size {text!r}: the simulator matches it as an integer")
    out = []
    for (column, message), rows in found.items():
        more = f" ({len(rows)} rows)" if len(rows) > 1 else ""
        out.append((rows[0] or None, column, message + more))
    return out


def _kernel_tables(directory: Path) -> list[str]:
    return sorted(n[:-4] for n in os.listdir(directory)
                  if n.endswith(".csv") and not n.startswith((".", COLLECTIVE_PREFIX)))


def op_mapping_warnings(directory: Path) -> list[str]:
    """What the simulator misses in a version directory because of its op_mapping.yaml."""
    tables = _kernel_tables(directory)
    path = directory / OP_MAPPING_FILE
    hccl = default_hccl_dir(directory)
    collectives = hccl is not None and hccl.is_dir() and any(
        n.startswith(COLLECTIVE_PREFIX) and n.endswith(".csv") for n in os.listdir(hccl))
    if not path.is_file():
        return [f"no {OP_MAPPING_FILE}: the simulator maps no operator to these {len(tables)} "
                f"table(s) and every lookup misses (npuperf parse and grid write one; or copy "
                f"the reference database's)"]
    try:
        doc = load_op_mapping(path)
    except NpuperfError as exc:
        return [str(exc).removeprefix(f"{path}: ")]
    out = []
    if not isinstance(doc.get("operator_mappings"), dict) or not doc["operator_mappings"]:
        out.append("no operator_mappings: the simulator maps no operator to any table")
    named = referenced_kernel_types(doc)
    unnamed = [t for t in tables if t not in named]
    if unnamed:
        shown = ", ".join(f"{t}.csv" for t in unnamed[:10])
        more = f" and {len(unnamed) - 10} more" if len(unnamed) > 10 else ""
        out.append(f"no operator mapping names {shown}{more}: the simulator never reads "
                   f"{'it' if len(unnamed) == 1 else 'them'} (add a mapping, e.g. "
                   f"\"profiling.{unnamed[0]}\": {{kernel_type: {unnamed[0]}}})")
    ref = doc.get("communication_data_ref")
    if ref:
        target = directory / str(ref)
        if not target.is_dir():
            out.append(f"communication_data_ref {ref!r}: no such directory ({target}); the "
                       f"simulator finds no collective table")
    elif collectives:
        out.append(f"collective tables in {hccl} but no communication_data_ref: the simulator "
                   f"looks for them in this directory and misses")
    return out
