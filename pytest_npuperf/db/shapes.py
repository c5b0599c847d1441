"""Shape, dtype and format cells (docs/format.md §3).

A shape cell is a `;`-separated list of tensor slots; each slot is a `,`-separated list of
dims or an empty token (an absent optional input). The slot count carries meaning, so parsing
and formatting keep it: `format_shapes(parse_shapes(c))` has as many slots as `c`.

Parsing is cached: a real database repeats the same few thousand cells across 10^5 rows.
"""

from __future__ import annotations

import math
import re
from functools import lru_cache

from .errors import CellError

Slot = tuple[int, ...] | None
"""One tensor slot: its dims, or None for an absent (optional) input."""
Shapes = tuple[Slot, ...]
"""All slots of a cell. The empty tuple means the whole cell was `N/A`: the kernel has no shape."""

NO_SHAPE_TEXT = "N/A"
UNDEFINED_DTYPE = "DT_UNDEFINED"
NULL_FORMAT = "NULL"
EMPTY_SHAPE_CELL = '""'
"""A cell of one scalar or empty slot, as the profiler writes it (literal quotes kept): an
empty CSV cell instead reads as NaN in pandas, and the simulator's shape parser fails on it."""

# Tokens that mean "nothing here", for a slot or for a whole cell. Compared upper-cased.
_EMPTY_TOKENS = frozenset({"", "()", "[]", "N/A", "NA", "NULL", "NONE", "UNDEFINED"})
# A whole cell of one of these means "no shape at all" (HCCL rows, level-0 exports).
_NO_SHAPE_CELLS = frozenset({"N/A", "NA", "NULL", "NONE", "UNDEFINED"})
_QUOTES = "\"'"
_LIST_SPLIT = re.compile(r"\s*;\s*")


def strip_cell(cell: object) -> str:
    """The cell text without surrounding whitespace and literal quotes (`"a;b"` -> `a;b`)."""
    if cell is None or (isinstance(cell, float) and math.isnan(cell)):
        return ""
    text = str(cell).strip()
    # Some exports keep the CSV quotes as literal characters, possibly nested.
    while len(text) >= 2 and text[0] in _QUOTES and text[-1] == text[0]:
        text = text[1:-1].strip()
    if text and text[0] in _QUOTES and text.count(text[0]) == 1:
        text = text[1:].strip()  # a stray opening quote left by a broken exporter
    return text



def _parse_slot(token: str, cell: str) -> Slot:
    token = token.strip()
    if token.upper() in _EMPTY_TOKENS:
        return None
    inner = token
    if inner[:1] in "([" and inner[-1:] in ")]":
        inner = inner[1:-1]
    parts = [p.strip() for p in inner.split(",")]
    if parts and parts[-1] == "" and len(parts) > 1:
        parts.pop()  # Python-style 1-tuples: "(128,)"
    dims = []
    for part in parts:
        if not (part.isascii() and part.isdigit()):
            raise CellError(f"bad dimension {part!r} in shape slot {token!r} of {cell!r}")
        dims.append(int(part))
    return tuple(dims)


# The canonical spelling, by far the most common: digits, `,` between dims, `;` between slots.
_PLAIN = re.compile(r"(?:[0-9]+(?:,[0-9]+)*)?(?:;(?:[0-9]+(?:,[0-9]+)*)?)*")


@lru_cache(maxsize=65536)
def parse_shapes(cell: str) -> Shapes:
    """Parse a shape cell into slots. Raises CellError on a malformed dimension."""
    if _PLAIN.fullmatch(cell):
        return tuple([tuple(map(int, token.split(","))) if token else None
                      for token in cell.split(";")])
    text = strip_cell(cell)
    if text.upper() in _NO_SHAPE_CELLS:
        return ()
    return tuple(_parse_slot(token, text) for token in text.split(";"))


def format_slot(slot: Slot) -> str:
    return "" if slot is None else ",".join(str(d) for d in slot)


def format_shapes(shapes: Shapes) -> str:
    """Canonical text of a shape cell: `136,7168;7168,3584`, `;`-joined, empty slots empty;
    a lone scalar or empty slot is `""` (EMPTY_SHAPE_CELL), never an empty cell."""
    if not shapes:
        return NO_SHAPE_TEXT
    return ";".join(format_slot(s) for s in shapes) or EMPTY_SHAPE_CELL


def split_list(cell: object) -> tuple[str, ...]:
    """Raw tokens of a `;` list cell (dtypes, formats); `()` when the whole cell is `N/A`."""
    text = strip_cell(cell)
    if text.upper() in _NO_SHAPE_CELLS:
        return ()
    return tuple(_LIST_SPLIT.split(text))


_DTYPE_ALIASES = {
    "FLOAT32": "FLOAT", "FP32": "FLOAT", "F32": "FLOAT",
    "HALF": "FLOAT16", "FP16": "FLOAT16", "F16": "FLOAT16",
    "BFLOAT16": "BF16",
    "FLOAT64": "DOUBLE", "FP64": "DOUBLE",
    "BOOLEAN": "BOOL",
    "FLOAT8_E4M3FN": "FLOAT8_E4M3", "FLOAT8_E5M2FNUZ": "FLOAT8_E5M2",
    "FLOAT8_E4M3FNUZ": "FLOAT8_E4M3",
    "LONG": "INT64", "INT": "INT32", "SHORT": "INT16", "BYTE": "UINT8", "CHAR": "INT8",
    # torch.profiler's `Input type`: c10 type names (`c10::` already stripped).
    "UNSIGNED CHAR": "UINT8", "SIGNED CHAR": "INT8", "SHORT INT": "INT16",
    "SHORT UNSIGNED INT": "UINT16", "UNSIGNED SHORT": "UINT16", "UNSIGNED INT": "UINT32",
    "LONG INT": "INT64", "LONG LONG INT": "INT64", "LONG UNSIGNED INT": "UINT64",
    "UNSIGNED LONG": "UINT64", "COMPLEX<FLOAT>": "COMPLEX64", "COMPLEX<DOUBLE>": "COMPLEX128",
    "COMPLEX<HALF>": "COMPLEX32", "FLOAT8_E8M0FNU": "FLOAT8_E8M0",
    # torch's own names (`torch.` already stripped).
    "CFLOAT": "COMPLEX64", "CDOUBLE": "COMPLEX128", "CHALF": "COMPLEX32", "COMPLEX32": "COMPLEX32",
}

DTYPE_BYTES: dict[str, float] = {
    "DT_FLOAT": 4, "DT_FLOAT16": 2, "DT_BF16": 2, "DT_DOUBLE": 8,
    "DT_INT8": 1, "DT_UINT8": 1, "DT_INT16": 2, "DT_UINT16": 2,
    "DT_INT32": 4, "DT_UINT32": 4, "DT_INT64": 8, "DT_UINT64": 8,
    "DT_BOOL": 1, "DT_COMPLEX64": 8, "DT_COMPLEX128": 16,
    "DT_FLOAT8_E4M3": 1, "DT_FLOAT8_E5M2": 1, "DT_FLOAT8_E8M0": 1, "DT_HIFLOAT8": 1,
    "DT_INT4": 0.5, "DT_FLOAT4_E2M1": 0.5, "DT_FLOAT4_E1M2": 0.5,
    # The rest of the data types CANN (ge::DataType) and torch_npu name for tensors.
    "DT_COMPLEX32": 4, "DT_QINT8": 1, "DT_QUINT8": 1, "DT_QINT16": 2, "DT_QUINT16": 2,
    "DT_QINT32": 4, "DT_DUAL_SUB_INT8": 1, "DT_DUAL_SUB_UINT8": 1, "DT_UINT1": 0.125,
    "DT_INT2": 0.25, "DT_UINT2": 0.25, "DT_FLOAT6_E3M2": 0.75, "DT_FLOAT6_E2M3": 0.75,
    UNDEFINED_DTYPE: 0,
}


@lru_cache(maxsize=4096)
def normalize_dtype(token: str) -> str:
    """`FLOAT16`, `DT_FLOAT16`, `torch.float16`, `fp16` -> `DT_FLOAT16`; empty -> `DT_UNDEFINED`.

    Unknown names keep their spelling (upper-cased, `DT_`-prefixed) so that signatures still
    compare; `dtype_bytes` is where an unknown dtype becomes an error.
    """
    text = strip_cell(token).upper()
    if text in _EMPTY_TOKENS or text == UNDEFINED_DTYPE:
        return UNDEFINED_DTYPE
    if text.startswith("TORCH."):
        text = text[6:]
    text = text.replace("C10::", "")
    if text.startswith("DT_"):
        text = text[3:]
    text = _DTYPE_ALIASES.get(text, text)
    return "DT_" + text


@lru_cache(maxsize=4096)
def normalize_format(token: str) -> str:
    """`FORMAT_ND` -> `ND`, `fractal_nz` -> `FRACTAL_NZ`; empty and `N/A` -> `NULL`."""
    text = strip_cell(token).upper()
    if text in _EMPTY_TOKENS or text == "FORMAT_NULL":
        return NULL_FORMAT
    if text.startswith("FORMAT_"):
        text = text[7:]
    return text


# The spelling real profiler output uses, which is also the one the simulator reading this
# database matches (docs/format.md §3): the types CANN's profiler has named since before bf16
# (ge::DataType values below DT_BF16) go without the `DT_` prefix (FLOAT, FLOAT16, INT8,
# INT32, INT64, UINT8 and BOOL are seen in real kernel tables; the other bare names are the
# same family, inferred), bf16, the absent slot and the newer types keep it (`DT_BF16`,
# `DT_UNDEFINED`, `DT_FLOAT8_E4M3`, `DT_HIFLOAT8`, `DT_INT4`, `DT_COMPLEX32`).
_BARE_DTYPES = frozenset({
    "FLOAT", "FLOAT16", "DOUBLE", "INT8", "INT16", "INT32", "INT64", "UINT8", "UINT16",
    "UINT32", "UINT64", "BOOL", "COMPLEX64", "COMPLEX128", "QINT8", "QUINT8", "QINT16",
    "QUINT16", "QINT32", "DUAL_SUB_INT8", "DUAL_SUB_UINT8",
})


@lru_cache(maxsize=4096)
def profiler_dtype(token: str) -> str:
    """The dtype token to write: `DT_FLOAT` / `float32` -> `FLOAT`, `BF16` -> `DT_BF16`,
    empty -> `DT_UNDEFINED`."""
    name = normalize_dtype(token)
    bare = name.removeprefix("DT_")
    return bare if bare in _BARE_DTYPES else name


def tensor_dtype(name: object) -> str | None:
    """The database dtype of a tensor type as a profiler or torch names it (`unsigned char`,
    `short unsigned int`, `c10::BFloat16`, `torch.uint16`, `DT_INT32`), in the profiler's
    spelling; None for what is not a tensor's type (`Scalar`, `ScalarList`, empty)."""
    name = normalize_dtype(str(name))
    return profiler_dtype(name) if name in DTYPE_BYTES and name != UNDEFINED_DTYPE else None


def dtype_cell(tokens) -> str:
    """A `;` list of dtypes in the profiler's spelling (one token per slot)."""
    return ";".join(profiler_dtype(t) for t in tokens)


def format_cell(tokens) -> str:
    """A `;` list of formats as written: `FORMAT_ND` -> `ND`, empty -> `NULL`."""
    return ";".join(normalize_format(t) for t in tokens)


@lru_cache(maxsize=16384)
def parse_dtypes(cell: str) -> tuple[str, ...]:
    return tuple(normalize_dtype(t) for t in split_list(cell))


@lru_cache(maxsize=16384)
def parse_formats(cell: str) -> tuple[str, ...]:
    return tuple(normalize_format(t) for t in split_list(cell))



def is_known_dtype(dtype: str) -> bool:
    return normalize_dtype(dtype) in DTYPE_BYTES


def dtype_bytes(dtype: str) -> float:
    """Bytes per element; raises CellError for a dtype this project does not know."""
    name = normalize_dtype(dtype)
    try:
        return DTYPE_BYTES[name]
    except KeyError:
        raise CellError(f"unknown dtype {dtype!r}") from None


def numel(slot: Slot) -> int:
    if slot is None:
        return 0
    return math.prod(slot)



def nz_to_nd(slot: Slot) -> Slot:
    """The ND matrix behind a FRACTAL_NZ shape: `(..., a, b, c, d)` -> `(..., b*c, a*d)`.

    `a` counts column blocks of `d` columns and `b` row blocks of `c` rows (the reference
    replay convention; docs/format.md §3 asks to confirm the orientation on hardware).
    """
    if slot is None or len(slot) < 4:
        return slot
    *batch, a, b, c, d = slot
    return (*batch, b * c, a * d)
