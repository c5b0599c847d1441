"""The cache state a replay measures in (`--npuperf-cache`).

Inside a model a layer's weights (and its KV cache, its experts, an embedding table) are read
from memory at every call: the rest of the step has evicted them since the layer before used
its own. Replayed back to back on one set of inputs, a weight that fits in the last-level
cache stays there, and the replay is faster than the model (16x4096x4096 on an H200: 0.70 of
the in-model time, its 32 MB weight kept in the 60 MB L2). Activations are the opposite: the
op before has just written them, they are in the cache in the model too.

- `model` (the default): the inputs the kernel's catalog entry names `streamed` are rotated
  through enough copies that the copies together exceed twice the device's last-level cache,
  so each call reads its streamed inputs from memory; the other inputs stay one set, warm;
- `cold`: every input is rotated;
- `warm`: one set of inputs, as before (what a kernel takes with everything cached).

A rotated input is never the same buffer two calls in a row. An input already larger than
twice the cache is not copied: it cannot stay cached between two calls anyway. A copy has the
same values as the original (a clone), so a check of the outputs still holds.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # light: the plugin's options read CACHE_MODES from here
    import torch

CACHE_MODES = ("model", "cold", "warm")
DEFAULT_CACHE_BYTES = 64 << 20  # when the device does not say
# Each copy is one more call to build; an input so small that this many copies stay under the
# cache costs next to nothing to read cold, and stays partly warm (its row says so).
MAX_COPIES = 256
MAX_ROTATION_BYTES = 2 << 30  # memory the copies may take


@dataclass(frozen=True)
class Rotation:
    """What a prepared call rotates: which inputs, through how many copies."""

    mode: str
    names: tuple[str, ...] = ()  # the rotated inputs
    copies: int = 1  # sets of those inputs the call cycles through (1: none)
    set_bytes: int = 0  # bytes of one set
    cache_bytes: int = 0  # the last-level cache it is meant to exceed
    note: str = ""  # why fewer copies than wanted, if so

    @property
    def cold_bytes(self) -> int:
        """Bytes read from memory at every call: the rotated inputs, or inputs too large to
        stay cached; none where the copies were capped below twice the cache (partly warm)."""
        cold = self.mode != "warm" and self.names and \
            self.copies * self.set_bytes >= 2 * self.cache_bytes
        return self.set_bytes if cold else 0

    def describe(self) -> str:
        """The row's `MicroBench Cache`: the mode, and what was cold."""
        if self.mode == "warm" or not self.names:
            return self.mode if self.mode == "warm" else f"{self.mode} (nothing streamed)"
        mib = (self.copies * self.set_bytes) / 2**20
        where = (f"{self.copies} copies, {mib:.1f} MiB for a {self.cache_bytes / 2**20:.0f} "
                 f"MiB cache" if self.copies > 1 else "larger than the cache")
        return f"{self.mode} ({', '.join(self.names)} cold: {where}{self.note})"


def _bytes(tensor: torch.Tensor) -> int:
    return tensor.numel() * tensor.element_size()


def plan(mode: str, tensors: Mapping[str, torch.Tensor], streamed: tuple[str, ...],
         cache_bytes: int | None) -> Rotation:
    """Which inputs to rotate, and through how many copies."""
    if mode not in CACHE_MODES:
        raise ValueError(f"cache mode {mode!r} is not one of {', '.join(CACHE_MODES)}")
    if mode == "warm":
        return Rotation(mode)
    wanted = tensors if mode == "cold" else {n: t for n, t in tensors.items() if n in streamed}
    names = tuple(n for n, t in wanted.items() if hasattr(t, "clone") and t.numel())
    cache = int(cache_bytes or DEFAULT_CACHE_BYTES)
    size = sum(_bytes(tensors[n]) for n in names)
    if not names or size >= 2 * cache:
        return Rotation(mode, names, 1, size, cache)
    copies = min(MAX_COPIES, math.ceil(2 * cache / size) + 1)
    note = ""
    if copies * size > MAX_ROTATION_BYTES:
        copies = max(2, MAX_ROTATION_BYTES // size)
        note = f"; capped at {MAX_ROTATION_BYTES >> 30} GiB of copies"
    elif copies == MAX_COPIES and copies * size < 2 * cache:
        note = f"; capped at {MAX_COPIES} copies"
    return Rotation(mode, names, copies, size, cache, note)


def input_sets(tensors: dict[str, torch.Tensor], rotation: Rotation,
               arena: RotationArena | None = None) -> list[dict[str, torch.Tensor]]:
    """`rotation.copies` sets of inputs: the first the tensors themselves, the others with
    copies of the rotated inputs (the rest shared by every set), in `arena` when given.
    Built once per case, and shared by every implementation a best-of measures."""
    sets = [tensors]
    copies = rotation.copies - 1
    if copies <= 0:
        return sets
    made = arena.copies({n: tensors[n] for n in rotation.names}, copies) if arena else {
        name: [tensors[name].clone() for _ in range(copies)] for name in rotation.names}
    for index in range(copies):
        copy = dict(tensors)
        copy.update({name: made[name][index] for name in rotation.names})
        sets.append(copy)
    return sets


class RotationArena:
    """Memory the rotation's copies reuse from case to case (a session's runner keeps one).

    A fresh clone of tens of MB on a CPU faults in every page of it: 40 ms for 64 MB on the
    development host, against 8 ms for the same copy into memory already mapped. The copies
    of one case live only while that case runs (the runner frees the case's tensors before
    the next one), so each case's copies start at the beginning of the same buffer, which
    grows to the largest rotation a session needs and no further.
    """

    ALIGN = 64  # bytes: a cache line, and any dtype's alignment

    def __init__(self) -> None:
        self._buffer: torch.Tensor | None = None

    @staticmethod
    def _elements(tensor: torch.Tensor) -> int:
        """Elements a copy with the tensor's strides spans (gaps between rows included)."""
        if not tensor.numel():
            return 0
        return 1 + sum((size - 1) * stride for size, stride in zip(tensor.shape, tensor.stride()))

    @classmethod
    def _span(cls, tensor: torch.Tensor) -> int:
        """Bytes of that, rounded up to the alignment."""
        nbytes = cls._elements(tensor) * tensor.element_size()
        return -(-nbytes // cls.ALIGN) * cls.ALIGN

    @staticmethod
    def _placeable(tensor: torch.Tensor) -> bool:
        import torch

        return (type(tensor) is torch.Tensor and tensor.layout == torch.strided
                and not tensor.is_quantized and tensor.device.type == "cpu"
                and all(s >= 0 for s in tensor.stride()))

    def copies(self, tensors: dict[str, torch.Tensor], count: int
               ) -> dict[str, list[torch.Tensor]]:
        """`count` copies of each tensor in the arena (one that cannot live there, e.g. a
        tensor subclass, is cloned). Each tensor's copies are made by one copy of the tensor
        broadcast over all of them: a parallel copy per copy would wait, on a host whose
        other processes hold a core, for a preempted worker thread each time (8 ms per copy
        measured on the 2-core development host, half a second for a small weight's 65)."""
        import torch

        placeable = {n: t for n, t in tensors.items() if self._placeable(t) and t.numel()}
        need = sum(self._span(t) * count for t in placeable.values())
        if self._buffer is None or self._buffer.numel() < need:
            self._buffer = None  # the old one goes first: the two need not coexist
            self._buffer = torch.empty(need, dtype=torch.uint8)
        made, offset = {}, 0
        for name, tensor in tensors.items():
            if name not in placeable:
                made[name] = [tensor.clone() for _ in range(count)]
                continue
            span = self._span(tensor)  # a multiple of the element size (ALIGN is)
            region = self._buffer[offset:offset + span * count].view(tensor.dtype)
            offset += span * count
            batch = region.as_strided((count, *tensor.shape),
                                      (span // tensor.element_size(), *tensor.stride()))
            batch.copy_(tensor.unsqueeze(0).expand(count, *tensor.shape))
            made[name] = list(batch.unbind(0))
        return made


def cycling(calls: list[Callable[[], object]]) -> Callable[[], object]:
    """One call that cycles through `calls` (one per set of inputs); the call itself when
    there is one."""
    first = calls[0]
    if len(calls) == 1:
        return first
    count = len(calls)
    state = [0]

    def call():
        index = state[0]
        state[0] = index + 1 if index + 1 < count else 0
        return calls[index]()
    call.implementation = getattr(first, "implementation", None)  # type: ignore[attr-defined]
    call.rotation = calls  # type: ignore[attr-defined]  (tests look at the buffers)
    return call
