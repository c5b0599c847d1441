"""Row identity (docs/format.md §4).

A signature is computed from a row's identity cells. Two rows (or a profiler row and a database
row) describe the same kernel call when their signatures are equal. Each kind is a typed,
immutable record (a NamedTuple: hashing and equality are a tuple's, as fast, and its fields have
names); code outside `db/` reads the fields by name or through `shape_label` / `dtype_label`,
never by position. Slots inside are plain tuples: `(dims, dtype, format)` for inputs,
`(dims, dtype)` for outputs, dims None for an absent slot.

- generic: per input slot (dims, dtype, format), per output slot (dims, dtype); trailing
  empty slots trimmed and the dtype/format of an empty slot blanked, so that exporters that
  do or do not list absent optional inputs agree.
- MatMulV2 / MatMulV3 / MatMulCommon: the canonical GEMM `(M, K) x (N, K) -> (M, N)`, the same
  for the three types and for both stored orientations of the second operand.
- DispatchFFNCombine: generic plus `EP Size`.
- Index: input slot 0 plus the index length.
- Slice / Transpose (and their AiCore variants): input slot 0 only, format forced to ND.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from functools import lru_cache
from typing import NamedTuple

from .shapes import (
    NULL_FORMAT,
    UNDEFINED_DTYPE,
    Slot,
    numel,
    nz_to_nd,
    parse_dtypes,
    parse_formats,
    parse_shapes,
    strip_cell,
)

InputSlot = tuple  # (dims | None, dtype, format)
OutputSlot = tuple  # (dims | None, dtype)


def _dims_label(slot: Slot) -> str:
    if slot is None:
        return "none"
    return "x".join(map(str, slot)) if slot else "scalar"


def _dtype_text(dtype: str) -> str:
    return (dtype or "NA").removeprefix("DT_")


class GenericSignature(NamedTuple):
    """Every input slot (dims, dtype, format) and output slot (dims, dtype)."""

    kind: str
    inputs: tuple[InputSlot, ...]
    outputs: tuple[OutputSlot, ...]

    def shape_label(self) -> str:
        return _dims_label(self.inputs[0][0]) if self.inputs else "noinput"

    def dtype_label(self) -> str:
        return _dtype_text(next((d for s, d, _ in self.inputs if s is not None), ""))


class EpSignature(NamedTuple):
    """DispatchFFNCombine: the generic signature plus `EP Size` (as `("ep", size)`)."""

    kind: str
    inputs: tuple[InputSlot, ...]
    outputs: tuple[OutputSlot, ...]
    ep: tuple[str, str]

    @property
    def ep_size(self) -> str:
        return self.ep[1]

    def shape_label(self) -> str:
        return GenericSignature.shape_label(self)  # type: ignore[arg-type]

    def dtype_label(self) -> str:
        return GenericSignature.dtype_label(self)  # type: ignore[arg-type]


class GemmSignature(NamedTuple):
    """MatMulV2/V3/Common: the canonical GEMM `(M, K) x (N, K) -> (M, N)`."""

    kind: str
    mkn: tuple[int, int, int]
    dtypes: tuple[str, str, str]  # a, b, out
    formats: tuple[str, str]  # a, b
    extra_inputs: tuple[InputSlot, ...]  # bias, scales...

    def shape_label(self) -> str:
        return "x".join(map(str, self.mkn))

    def dtype_label(self) -> str:
        return _dtype_text(self.dtypes[0])


class IndexSignature(NamedTuple):
    """Index: the first input slot and the number of gathered rows."""

    kind: str
    first: InputSlot
    index_length: int

    def shape_label(self) -> str:
        return _dims_label(self.first[0])

    def dtype_label(self) -> str:
        return _dtype_text(self.first[1])


class SliceSignature(NamedTuple):
    """Slice / Transpose (and AiCore variants): the first input only, format ND."""

    kind: str
    dims: Slot
    dtype: str
    format: str

    def shape_label(self) -> str:
        return _dims_label(self.dims)

    def dtype_label(self) -> str:
        return _dtype_text(self.dtype)


Signature = GenericSignature | EpSignature | GemmSignature | IndexSignature | SliceSignature


def generic_signature(inputs: tuple, outputs: tuple, ep: str | None = None) -> Signature:
    """The generic signature of already trimmed slots (`ep`: DispatchFFNCombine's EP Size)."""
    if ep is None:
        return GenericSignature("generic", inputs, outputs)
    return EpSignature("generic", inputs, outputs, ("ep", ep))

MATMUL_FAMILY: tuple[str, ...] = ("MatMulV2", "MatMulV3", "MatMulCommon")
SLICE_LIKE: tuple[str, ...] = ("Slice", "SliceAiCore", "Transpose", "TransposeAiCore")
INDEX_KERNEL = "Index"
_FRACTAL_NZ = "FRACTAL_NZ"
_KIND_OF_TYPE = {**dict.fromkeys(MATMUL_FAMILY, "gemm"), **dict.fromkeys(SLICE_LIKE, "slice"),
                 INDEX_KERNEL: "index"}


def signature_kind(kernel_type: str) -> str:
    """Which rule identifies rows of `kernel_type`: "gemm", "slice", "index" or "generic", the
    `kind` of the signatures it makes (a MatMul row whose operands form no GEMM falls back to
    a generic signature; DispatchFFNCombine's generic one carries the EP Size)."""
    return _KIND_OF_TYPE.get(kernel_type, "generic")


def _align(items: tuple[str, ...], n: int, filler: str) -> tuple[str, ...]:
    if len(items) >= n:
        return items[:n]
    return items + (filler,) * (n - len(items))


def _slots(shapes_cell: str, dtypes_cell: str, formats_cell: str | None
           ) -> tuple[tuple[Slot, str, str], ...]:
    """(dims, dtype, format) per slot, empty slots blanked, trailing empty slots trimmed."""
    shapes = parse_shapes(shapes_cell)
    n = len(shapes)
    dtypes = _align(parse_dtypes(dtypes_cell), n, UNDEFINED_DTYPE)
    formats = _align(parse_formats(formats_cell), n, NULL_FORMAT) if formats_cell is not None \
        else ("",) * n
    if None not in shapes:  # the usual row: every slot present, nothing to blank or trim
        return tuple(zip(shapes, dtypes, formats))
    out = [(s, d, f) if s is not None else (None, "", "")
           for s, d, f in zip(shapes, dtypes, formats)]
    while out and out[-1][0] is None:
        out.pop()
    return tuple(out)


def _generic(in_shapes: str, in_dtypes: str, in_formats: str, out_shapes: str,
             out_dtypes: str) -> Signature:
    inputs = _slots(in_shapes, in_dtypes, in_formats)
    outputs = tuple([(s, d) for s, d, _ in _slots(out_shapes, out_dtypes, None)])
    return GenericSignature("generic", inputs, outputs)


def _as_nd(slot: Slot, fmt: str) -> Slot:
    return nz_to_nd(slot) if fmt == _FRACTAL_NZ else slot


@dataclass(frozen=True)
class GemmLayout:
    """`out(M, N) = op(a) @ op(b)`: the dims and how each operand is stored."""

    m: int
    k: int
    n: int
    a_transposed: bool  # a stored as (K, M)
    b_transposed: bool  # b stored as (N, K), the layout torch.mm(a, b.t()) reads


def gemm_layout(a: Slot, b: Slot, out: Slot) -> GemmLayout | None:
    """The GEMM behind two 2-D operands, or None if they do not form one.

    The output shape, when known, decides between orientations (a square weight matches
    both); without it the stored orientation of `a` is trusted and (N, K) is tried first
    for `b`, the layout of the reference replays.
    """
    if a is None or b is None or len(a) != 2 or len(b) != 2:
        return None
    out2 = tuple(out[-2:]) if out is not None and len(out) >= 2 else None
    for a_t, (m, k) in ((False, (a[0], a[1])), (True, (a[1], a[0]))):
        for b_t, (n, kb) in ((True, (b[0], b[1])), (False, (b[1], b[0]))):
            if kb == k and (out2 is None or out2 == (m, n)):
                return GemmLayout(m, k, n, a_t, b_t)
        if out2 is None:
            break
    return None


def _matmul(in_shapes: str, in_dtypes: str, in_formats: str, out_shapes: str,
            out_dtypes: str) -> Signature:
    inputs = _slots(in_shapes, in_dtypes, in_formats)
    outputs = _slots(out_shapes, out_dtypes, None)
    if len(inputs) >= 2 and inputs[0][0] is not None and inputs[1][0] is not None:
        (a, da, fa), (b, db, fb) = inputs[0], inputs[1]
        out = outputs[0][0] if outputs else None
        layout = gemm_layout(_as_nd(a, fa), _as_nd(b, fb), out)
        if layout is not None:
            out_dtype = outputs[0][1] if outputs else ""
            return GemmSignature("gemm", (layout.m, layout.k, layout.n), (da, db, out_dtype),
                                 (fa, fb), inputs[2:])
    return _generic(in_shapes, in_dtypes, in_formats, out_shapes, out_dtypes)


def _first_input(in_shapes: str, in_dtypes: str, in_formats: str) -> tuple[Slot, str, str]:
    inputs = _slots(in_shapes, in_dtypes, in_formats)
    return inputs[0] if inputs else (None, "", "")


def _index(in_shapes: str, in_dtypes: str, in_formats: str) -> Signature:
    inputs = _slots(in_shapes, in_dtypes, in_formats)
    if not inputs:
        return IndexSignature("index", (None, "", ""), 0)
    # The index tensor is the last input that is present (aclnnIndex: self, indexed_sizes,
    # indexed_strides, indices...); its element count is the number of gathered rows.
    index_slot = inputs[-1][0] if len(inputs) > 1 else None
    return IndexSignature("index", inputs[0], numel(index_slot))


def _slice(in_shapes: str, in_dtypes: str, in_formats: str) -> Signature:
    slot, dtype, _ = _first_input(in_shapes, in_dtypes, in_formats)
    return SliceSignature("slice", slot, dtype, "ND" if slot is not None else "")


@lru_cache(maxsize=262144)
def signature(kernel_type: str, in_shapes: str, in_dtypes: str, in_formats: str,
              out_shapes: str, out_dtypes: str, ep_size: str = "") -> Signature:
    """The identity of a row of `kernel_type` (a normalised type name). Raises CellError."""
    kind = signature_kind(kernel_type)
    if kind == "gemm":
        return _matmul(in_shapes, in_dtypes, in_formats, out_shapes, out_dtypes)
    if kind == "slice":
        return _slice(in_shapes, in_dtypes, in_formats)
    if kind == "index":
        return _index(in_shapes, in_dtypes, in_formats)
    sig = _generic(in_shapes, in_dtypes, in_formats, out_shapes, out_dtypes)
    if kernel_type == "DispatchFFNCombine":
        return EpSignature("generic", sig.inputs, sig.outputs, ("ep", _normalize_ep(ep_size)))
    return sig


uncached_signature = signature.__wrapped__
"""`signature` without the process-wide cache (for a caller that keeps its own)."""


def _normalize_ep(text: str) -> str:
    value = strip_cell(text)
    try:
        as_float = float(value)
    except ValueError:
        return value
    return str(int(as_float)) if as_float.is_integer() else value



def signature_text(sig: Signature) -> str:
    """The signature as plain tuple text: what case-id hashes are computed from (the same
    text as before signatures were typed, so that ids stay stable across releases)."""
    return tuple.__repr__(sig)


def short_hash(sig: Signature | str, length: int = 8) -> str:
    """A short, stable (across runs and processes) hash of a signature (or of its
    `signature_text`, when the caller has it already), for case ids and as the check that a
    result still refers to the row it was collected from."""
    text = sig if isinstance(sig, str) else signature_text(sig)
    return hashlib.blake2s(text.encode(), digest_size=length // 2 or 1).hexdigest()[:length]
