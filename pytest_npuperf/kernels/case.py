"""A database row as a replayable kernel call: parsed slots, dtypes, formats, runtime fields.

Parsing happens when a case runs, not at collection, so that collecting 10^5 rows stays cheap
and a malformed cell fails only its own case, with a message naming file, row and column.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from ..db.columns import (
    EP_SIZE,
    FIA_RUNTIME_FIELDS,
    INPUT_DTYPES,
    INPUT_FORMATS,
    INPUT_SHAPES,
    INPUT_STRIDES,
    OUTPUT_DTYPES,
    OUTPUT_FORMATS,
    OUTPUT_SHAPES,
    runtime_column,
)
from ..db.errors import CellError
from ..db.shapes import (
    NULL_FORMAT,
    UNDEFINED_DTYPE,
    Slot,
    dtype_bytes,
    numel,
    parse_dtypes,
    parse_formats,
    parse_shapes,
    strip_cell,
)


@dataclass(frozen=True)
class TensorSlot:
    """One input or output slot of a kernel call."""

    shape: Slot
    dtype: str
    format: str

    @property
    def present(self) -> bool:
        """False for an absent optional input (an empty slot).

        Exporters also write "" for a 0-d tensor; a kernel that takes scalars checks
        `maybe_scalar` for empty slots that still carry a dtype.
        """
        return self.shape is not None

    @property
    def maybe_scalar(self) -> bool:
        return self.shape is None and self.dtype != UNDEFINED_DTYPE

    @property
    def dims(self) -> tuple[int, ...]:
        return self.shape if self.shape is not None else ()

    @property
    def numel(self) -> int:
        return numel(self.dims) if self.present else 0

    @property
    def nbytes(self) -> float:
        return self.numel * dtype_bytes(self.dtype) if self.present else 0.0


@dataclass(frozen=True)
class KernelCase:
    kernel_type: str
    inputs: tuple[TensorSlot, ...]
    outputs: tuple[TensorSlot, ...]
    runtime: Mapping[str, str] = field(default_factory=dict)
    ep_size: str = ""
    file: str = ""
    row: int | None = None
    # Per input slot, the strides the model's tensor had where it was a view that is not
    # contiguous (`Input Strides`); () or None: contiguous.
    strides: tuple[tuple[int, ...] | None, ...] = ()

    def input_strides(self, index: int) -> tuple[int, ...] | None:
        return self.strides[index] if index < len(self.strides) else None

    def input(self, index: int) -> TensorSlot:
        """Slot `index`, or an absent slot when the row lists fewer."""
        if index < len(self.inputs):
            return self.inputs[index]
        return TensorSlot(None, UNDEFINED_DTYPE, NULL_FORMAT)

    def output(self, index: int) -> TensorSlot:
        if index < len(self.outputs):
            return self.outputs[index]
        return TensorSlot(None, UNDEFINED_DTYPE, NULL_FORMAT)

    def error(self, message: str, column: str | None = INPUT_SHAPES) -> CellError:
        """An error about this case's row, located in its file."""
        return CellError(message, column=column, row=self.row, path=self.file or None)

    @property
    def io_bytes(self) -> float:
        """Bytes of every present input and output slot (the memory a replay touches)."""
        return sum(s.nbytes for s in (*self.inputs, *self.outputs))


def _side(row: Mapping[str, str], shapes_col: str, dtypes_col: str, formats_col: str
          ) -> tuple[TensorSlot, ...]:
    shapes = _parse(row, shapes_col, parse_shapes)
    # An empty dtype or format cell means "not recorded", not one empty entry.
    dtypes = _parse(row, dtypes_col, parse_dtypes) if _text(row, dtypes_col) else ()
    formats = _parse(row, formats_col, parse_formats) if _text(row, formats_col) else ()
    n = len(shapes)
    for column, values in ((dtypes_col, dtypes), (formats_col, formats)):
        if values and len(values) != n:
            raise CellError(f"{len(values)} entries for {n} shape slot(s)", column=column)
    slots = []
    for i, shape in enumerate(shapes):
        dtype = dtypes[i] if dtypes else UNDEFINED_DTYPE
        fmt = formats[i] if formats else ("ND" if shape is not None else NULL_FORMAT)
        slots.append(TensorSlot(shape, dtype, fmt))
    return tuple(slots)


def _text(row: Mapping[str, str], column: str) -> str:
    return strip_cell(row.get(column, "") or "")


def _parse(row: Mapping[str, str], column: str, parse):
    try:
        return parse(row.get(column, "") or "")
    except CellError as exc:
        raise exc.located(column=column) from None


def case_from_row(kernel_type: str, row: Mapping[str, str], *, file: str = "",
                  row_number: int | None = None) -> KernelCase:
    """Parse a row's identity cells. Raises CellError naming file, row and column."""
    try:
        inputs = _side(row, INPUT_SHAPES, INPUT_DTYPES, INPUT_FORMATS)
        outputs = _side(row, OUTPUT_SHAPES, OUTPUT_DTYPES, OUTPUT_FORMATS)
    except CellError as exc:
        raise exc.located(path=file or None, row=row_number) from None
    runtime = {f: str(row.get(runtime_column(f), "") or "").strip() for f in FIA_RUNTIME_FIELDS
               if str(row.get(runtime_column(f), "") or "").strip()}
    return KernelCase(kernel_type=kernel_type, inputs=inputs, outputs=outputs, runtime=runtime,
                      ep_size=str(row.get(EP_SIZE, "") or "").strip(), file=file, row=row_number,
                      strides=_strides(row, inputs, file, row_number))


def _strides(row: Mapping[str, str], inputs: tuple[TensorSlot, ...], file: str,
             row_number: int | None) -> tuple[tuple[int, ...] | None, ...]:
    """The `Input Strides` cell: per slot, strides as many as the slot's dims, or empty."""
    text = strip_cell(row.get(INPUT_STRIDES, "") or "")
    if not text:
        return ()
    found: list[tuple[int, ...] | None] = []
    for i, token in enumerate(text.split(";")):
        token = token.strip()
        if not token:
            found.append(None)
            continue
        try:
            strides = tuple(int(v) for v in token.split(","))
        except ValueError:
            strides = ()
        dims = inputs[i].dims if i < len(inputs) else ()
        if len(strides) != len(dims) or any(v < 0 for v in strides):
            raise CellError(f"slot {i}: strides {token!r} do not fit the shape {dims}",
                            column=INPUT_STRIDES, row=row_number, path=file or None)
        found.append(strides)
    return tuple(found)
