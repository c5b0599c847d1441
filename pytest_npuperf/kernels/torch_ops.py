"""Which kernel type a profiled torch operator call is, and the cells of its database row.

A trace names operators as torch dispatched them (`aten::mm`, with each input's dims and type);
the database has one table per kernel type. The operator's kernel type comes from the
database's `op_mapping.yaml` (`operator_mappings`, keyed `aten.mm.default`: the simulator's own
operator names) or, without one, from the mapping npuperf generates from its catalog
(mapping_writer.py), plus the aten operators of catalog kernel types the simulator has no
operator for (softmax, RMS norm, sort, argmax): each catalog entry names its operators
(`KernelEntry.operators`), and one whose call this module has no conversion for names its own
(`Operator.slots`). Its row lists the kernel's inputs and outputs
in the kernel table's slot order (the catalog's layouts): a GEMM `(M,K) x (K,N) -> (M,N)`, an
RMS norm `(x, gamma) -> (y, rstd)`, and so on.

Only operators with a conversion here become rows; every other call is listed by the trace
reader as unmapped, with its device time.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

from ..db.columns import (
    INPUT_DTYPES,
    INPUT_FORMATS,
    INPUT_SHAPES,
    INPUT_STRIDES,
    OUTPUT_DTYPES,
    OUTPUT_FORMATS,
    OUTPUT_SHAPES,
)
from ..db.shapes import dtype_cell, format_shapes, tensor_dtype
from . import catalog
from .mapping_writer import simulator_operators


@dataclass(frozen=True)
class KernelOf:
    kernel_type: str
    alternates: tuple[str, ...] = ()  # tables the row may already be in (one call, one space)


# dims as stored, database dtype, transposed view (of a GEMM weight), strides where the model
# passed a view that is not contiguous (None: contiguous, or not recorded)
Tensor = tuple[tuple[int, ...], str, bool, tuple[int, ...] | None]
Slots = tuple[list[Tensor], list[Tensor]]  # inputs, outputs


def contiguous_strides(dims) -> tuple[int, ...]:
    out, step = [], 1
    for d in reversed(tuple(dims)):
        out.append(step)
        step *= max(int(d), 1)
    return tuple(reversed(out))


def view_strides(dims, strides) -> tuple[int, ...] | None:
    """The strides of a view that is not contiguous (dims of size 1 do not count); None for a
    contiguous tensor or strides that do not fit the dims."""
    if not isinstance(strides, (list, tuple)) or len(strides) != len(dims) or \
            not all(isinstance(s, int) and s >= 0 for s in strides):
        return None
    plain = contiguous_strides(dims)
    if all(d == 1 or s == p for d, s, p in zip(dims, strides, plain)):
        return None
    return tuple(strides)


def tensor_of(dims, torch_type, strides=None) -> Tensor | None:
    """A traced tensor argument (its dims, profiler type name and strides) as a slot."""
    if not isinstance(dims, list) or not all(isinstance(d, int) for d in dims):
        return None
    dtype = tensor_dtype(torch_type)  # torch.profiler's `Input type`: a c10 type name
    if dtype is None:
        return None
    if len(dims) == 2 and strides == [1, dims[0]] and dims[0] > 1:
        # The transposed view of a row-major (N, K) weight, as `x @ w.t()` passes it: the
        # kernel tables list the weight as stored, (N, K).
        return (dims[1], dims[0]), dtype, True, None
    return tuple(dims), dtype, False, view_strides(dims, strides)


_tensor = tensor_of


def _broadcast(a: tuple[int, ...], b: tuple[int, ...]) -> tuple[int, ...] | None:
    out = []
    for x, y in zip(((1,) * (len(b) - len(a)) + a), ((1,) * (len(a) - len(b)) + b)):
        if x != y and 1 not in (x, y):
            return None
        out.append(max(x, y))
    return tuple(out)


def _mm(t: list[Tensor]) -> Slots | None:
    (a, da, ta, _), (b, _, tb, _) = t[0], t[1]
    if len(a) != 2 or len(b) != 2 or ta:
        return None
    k, n = (b[1], b[0]) if tb else b
    if a[1] != k:
        return None
    return [t[0], t[1]], [((a[0], n), da, False, None)]


def _addmm(t: list[Tensor]) -> Slots | None:
    slots = _mm(t[1:3])
    return None if slots is None else ([*slots[0], t[0]], slots[1])


def _bmm(t: list[Tensor]) -> Slots | None:
    (a, da, _, _), (b, _, _, _) = t[0], t[1]
    if len(a) != 3 or len(b) != 3 or a[0] != b[0] or a[2] != b[1]:
        return None
    return [t[0], t[1]], [((a[0], a[1], b[2]), da, False, None)]


def _embedding(t: list[Tensor]) -> Slots | None:
    (weight, dw, _, _), (indices, _, _, _) = t[0], t[1]
    if len(weight) != 2:
        return None
    # The kernel (GatherV2) takes the axis as a third input, as the NPU's tables list it.
    return [t[0], t[1], ((1,), "INT64", False, None)], [((*indices, weight[1]), dw, False, None)]


def _add(t: list[Tensor]) -> Slots | None:
    # `x + 1`: the number arrives as a 0-dim tensor, an input slot of the kernel like any
    # other (empty shape, its own dtype); the result keeps x's dtype.
    out = _broadcast(t[0][0], t[1][0])
    return None if out is None or not t[0][0] else ([t[0], t[1]], [(out, t[0][1], False, None)])


def _same(t: list[Tensor]) -> Slots | None:
    return [t[0]], [plain(t[0])]


def plain(t: Tensor) -> Tensor:
    """A slot like `t`, contiguous: what a kernel writes."""
    return t[0], t[1], False, None


def rms_norm_slots(t: list[Tensor]) -> Slots | None:
    """x and the gamma of its last dim -> y (x's dtype) and rstd (float32, last dim 1)."""
    if not t:
        return None
    x = t[0][0]
    gamma = next((g for g in t[1:] if g[0] and g[0] == x[-1:]), None)
    if not x or gamma is None:
        return None
    return [t[0], gamma], [plain(t[0]), ((*x[:-1], 1), "FLOAT", False, None)]


_rms_norm = rms_norm_slots


def _sort(t: list[Tensor]) -> Slots | None:
    return [t[0]], [plain(t[0]), (t[0][0], "INT64", False, None)]


def _argmax(t: list[Tensor]) -> Slots | None:
    x = t[0][0]
    return ([t[0]], [(x[:-1], "INT64", False, None)]) if x else None


Conversion = tuple[int, Callable[[list[Tensor]], Slots | None]]  # tensor inputs it needs, how

# aten operator (base name) -> its conversion
_CONVERSIONS: dict[str, Conversion] = {
    "mm": (2, _mm), "addmm": (3, _addmm), "bmm": (2, _bmm), "embedding": (2, _embedding),
    "add": (2, _add), "_softmax": (1, _same), "rms_norm": (1, _rms_norm),
    "_fused_rms_norm": (1, _rms_norm), "sort": (1, _sort), "argmax": (1, _argmax),
}


def strides_cell(inputs: list[Tensor | None]) -> str:
    """The `Input Strides` cell: each slot's view strides, empty where contiguous."""
    slots = [",".join(map(str, t[3])) if t is not None and t[3] is not None else ""
             for t in inputs]
    return ";".join(slots) if any(slots) else ""


def row_cells(kernel_type: str, inputs: list[Tensor | None], outputs: list[Tensor | None]
              ) -> dict[str, str]:
    """The identity cells of a row (an absent slot: empty, DT_UNDEFINED, NULL) and its
    `Input Strides`."""
    def side(slots):
        return (format_shapes([None if t is None else t[0] for t in slots]),
                dtype_cell(["" if t is None else t[1] for t in slots]),
                ";".join("NULL" if t is None else "ND" for t in slots))
    shapes, dtypes, formats = side(inputs)
    out_shapes, out_dtypes, out_formats = side(outputs)
    return {"Type": kernel_type, INPUT_SHAPES: shapes, INPUT_DTYPES: dtypes,
            INPUT_FORMATS: formats, OUTPUT_SHAPES: out_shapes, OUTPUT_DTYPES: out_dtypes,
            OUTPUT_FORMATS: out_formats, INPUT_STRIDES: strides_cell(inputs)}


_cells = row_cells


class TorchOperators:
    """The operators of one database's mapping that a trace's calls can become rows of."""

    def __init__(self, operator_mappings: Mapping[str, Mapping] | None = None) -> None:
        traced = catalog.operators(simulator=False)
        mappings = {**{name: op.op_mapping(entry.name) for name, (entry, op) in traced.items()},
                    **(operator_mappings or simulator_operators())}
        self._conversions = _entry_conversions({**catalog.operators(simulator=True), **traced})
        self._kernels: dict[str, KernelOf] = {}
        self._rows: dict[tuple, dict[str, str] | None] = {}
        for key, mapping in mappings.items():
            parts = str(key).split(".")
            kernel_type = mapping.get("kernel_type") if isinstance(mapping, Mapping) else None
            if len(parts) < 2 or not kernel_type or parts[1] not in self._conversions:
                continue
            name = f"{parts[0]}::{parts[1]}"  # how a trace names it: aten::mm
            alternates = tuple(str(t) for t in mapping.get("alternate_kernel_types") or ())
            # The default overload first: a trace does not say which overload ran.
            if name not in self._kernels or parts[2:] == ["default"]:
                self._kernels[name] = KernelOf(str(kernel_type), alternates)

    def kernel_of(self, operator: str) -> KernelOf | None:
        return self._kernels.get(operator)

    def is_mapped(self, operator: str) -> bool:
        return operator in self._kernels

    def row(self, operator: str, dims: list, types: list, strides: list = ()
            ) -> dict[str, str] | None:
        """The identity cells of the kernel row of one call (None: inputs this conversion
        does not recognise, e.g. a scalar where a tensor belongs). A model calls the same
        operator on the same shapes once per layer: each distinct call is converted once."""
        key = (operator, repr(dims), repr(types), repr(strides))
        if key not in self._rows:
            self._rows[key] = self._row(operator, dims, types, strides)
        cells = self._rows[key]
        return None if cells is None else dict(cells)

    def _row(self, operator: str, dims: list, types: list, strides: list = ()
             ) -> dict[str, str] | None:
        kernel = self._kernels.get(operator)
        if kernel is None:
            return None
        needed, convert = self._conversions[operator.split("::", 1)[1]]
        strides = list(strides) + [None] * (len(dims) - len(strides))
        tensors = [_tensor(d, t, st) for d, t, st in zip(dims, types, strides)]
        scalars = operator.endswith("::add")  # a 0-dim operand is an input of Add
        tensors = [t for t in tensors if t is not None and (scalars or t[0] != ())]
        if len(tensors) < needed:
            return None
        slots = convert(tensors)
        return None if slots is None else _cells(kernel.kernel_type, *slots)


def _entry_conversions(operators: Mapping[str, tuple]) -> dict[str, Conversion]:
    """The conversions of this module, and those the catalog's operators name (`slots`: a
    "module:function"; the call needs the entry's inputs before its first optional one)."""
    import importlib

    found = dict(_CONVERSIONS)
    for name, (entry, op) in operators.items():
        base = name.split(".")[1] if "." in name else ""
        if not op.slots or not base or base in found:
            continue
        module, _, function = op.slots.partition(":")
        needed = next((i for i, s in enumerate(entry.inputs) if s.optional), len(entry.inputs))
        found[base] = (max(1, needed), getattr(importlib.import_module(module), function))
    return found
