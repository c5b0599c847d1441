"""The fallback for traces without module ranges: the decompositions eager PyTorch runs for the
module kinds, recognised in the order a thread called them.

A user's own trace (torch.profiler with `record_shapes=True`, nothing else) shows an RMS norm
written in Python as its pieces, each an operator called from Python one after the other:

- RMS norm: `[to] pow mean add rsqrt mul [to] [add] mul` (the float cast, x^2, its mean, + eps,
  1/sqrt, x * rstd, the cast back, Gemma's 1 + weight, * weight);
- rotary embedding, rotate-half, q then k: `mul [slice|narrow|chunk|split ...] neg cat mul add`
  (x * cos, the halves, -x2, cat, * sin, the sum); two rotations in a row that share their
  cos are one call of q and k;
- gated activation: `silu ... mul`, the mul reading two tensors of the silu's shape (the up
  projection's GEMM between them stays a row of its own).

Each sequence found is one call of its kind; its operators, also one that maps on its own
(the `+ eps` would otherwise be a row of the `Add` table), are its parts.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

CASTS = ("aten::to", "aten::_to_copy")
HALVES = ("aten::slice", "aten::narrow", "aten::chunk", "aten::split", "aten::select")
# The operators a pattern or a composite call reads the inputs of (their dims are kept).
PART_OPERATORS = frozenset({*CASTS, *HALVES, "aten::pow", "aten::mean", "aten::add",
                            "aten::rsqrt", "aten::mul", "aten::neg", "aten::cat", "aten::silu",
                            "aten::silu_"})
RMS_NORM, ROTARY, GATED = "rms_norm", "rotary", "gated_activation"


class _Siblings:
    """The sibling operators of one place, in call order, as the matchers see them."""

    def __init__(self, names: Sequence[str], dims: Callable[[int], list]) -> None:
        self.names = names
        self.dims = dims  # position -> the operator's input dims (lists; [] for a scalar)

    def __len__(self) -> int:
        return len(self.names)

    def skip(self, i: int, names: tuple[str, ...]) -> int:
        while i < len(self.names) and self.names[i] in names:
            i += 1
        return i

    def expect(self, i: int, name: str) -> int | None:
        i = self.skip(i, CASTS)
        return i + 1 if i < len(self.names) and self.names[i] == name else None


def _rms_norm(seq: _Siblings, start: int) -> tuple[int, int] | None:
    """(start, end) of an RMS norm whose pow is at or after `start` past casts: the cast
    right before the pow (x to float32) is its first operator."""
    i = seq.skip(start, CASTS)
    if i >= len(seq) or seq.names[i] != "aten::pow":
        return None
    first = i - 1 if i > start else i
    x = _first(seq.dims(i))
    i += 1
    for name in ("aten::mean", "aten::add", "aten::rsqrt", "aten::mul"):
        i = seq.expect(i, name)
        if i is None:
            return None
    end = i  # without a weight: x * rstd
    j = seq.skip(i, CASTS)
    if j < len(seq) and seq.names[j] == "aten::add":
        j += 1  # Gemma: * (1 + weight)
    if j < len(seq) and seq.names[j] == "aten::mul" and \
            any(len(d) == 1 and x and d == x[-1:] for d in seq.dims(j)):
        end = j + 1
    return first, end


def _first(dims: list) -> list:
    return next((d for d in dims if isinstance(d, list) and d and
                 all(isinstance(v, int) for v in d)), [])


def _rotation(seq: _Siblings, start: int) -> int | None:
    """End of one rotate-half rotation starting at the mul by cos."""
    if seq.names[start] != "aten::mul":
        return None
    i = seq.skip(start + 1, HALVES)
    for name in ("aten::neg", "aten::cat"):
        if i >= len(seq) or seq.names[i] != name:
            return None
        i += 1
    for name in ("aten::mul", "aten::add"):
        if i >= len(seq) or seq.names[i] != name:
            return None
        i += 1
    return i


def _table(seq: _Siblings, start: int) -> list:
    dims = [d for d in seq.dims(start) if isinstance(d, list) and d]
    return dims[1] if len(dims) > 1 else []


def _gated(seq: _Siblings, start: int) -> list[int] | None:
    if seq.names[start] not in ("aten::silu", "aten::silu_"):
        return None
    gate = _first(seq.dims(start))
    for j in range(start + 1, min(start + 8, len(seq))):
        if seq.names[j] == "aten::mul":
            ins = [d for d in seq.dims(j) if isinstance(d, list) and d]
            if len(ins) == 2 and all(d == gate for d in ins):
                return [start, j]
            return None
    return None


def find_groups(names: Sequence[str], dims: Callable[[int], list]) -> list[tuple[str, list[int]]]:
    """(kind, positions) of each decomposition found in a sibling sequence, in order."""
    seq = _Siblings(names, dims)
    groups: list[tuple[str, list[int]]] = []
    taken: set[int] = set()
    i = 0
    while i < len(seq):
        if i in taken:
            i += 1
            continue
        span = _rms_norm(seq, i) if names[i] in (*CASTS, "aten::pow") else None
        if span is not None:
            groups.append((RMS_NORM, list(range(*span))))
            taken.update(range(*span))
            i = span[1]
            continue
        end = _rotation(seq, i)
        if end is not None:
            positions = list(range(i, end))
            second = _rotation(seq, end) if end < len(seq) else None
            if second is not None and _table(seq, end) == _table(seq, i):
                positions += list(range(end, second))
                end = second
            groups.append((ROTARY, positions))
            taken.update(positions)
            i = end
            continue
        pair = _gated(seq, i)
        if pair is not None:
            groups.append((GATED, pair))
            taken.update(pair)
        i += 1
    return groups
