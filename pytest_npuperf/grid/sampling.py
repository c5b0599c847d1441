"""Streaming candidates through the memory filter, de-duplication and a seeded sample.

Candidates arrive one by one from their sources (never materialised as a whole). Each carries
a *key*: the row's signature (`db.signature`, so MatMul rows compare as canonical GEMMs) in a
compact flat form, `(static id, dim, dim, ...)`, where the static id numbers the signature's
structure with its dims taken out (dtypes, formats, slot ranks). A key equals another exactly
when the signatures are equal.

Per kernel type:
1. drop candidates whose memory estimate exceeds the budget;
2. drop candidates already seen in this stream, or whose signature is in the kernel's file
   (those count as *present*), in a sibling file of the same signature family or among the rows
   this run adds to such a sibling (MatMulV2 / V3 / Common share one signature space);
3. sample what is left with a bottom-k sample (uniform priorities from a generator seeded with
   the seed and the kernel type), so that the file ends up with `rows` grid rows: rows already
   present count toward the cap, which makes a second run of the same command add nothing.
"""

from __future__ import annotations

import heapq
import math
import random
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from itertools import islice

from ..db.signature import Signature

Key = tuple
SAMPLE_SALT = "npuperf-grid"


def _flatten(sig: object, dims: list[int]) -> object:
    kind = type(sig)
    if kind is int:
        dims.append(sig)  # type: ignore[arg-type]
        return "#"
    if kind is tuple:
        return tuple(_flatten(item, dims) for item in sig)  # type: ignore[union-attr]
    return sig


def flatten_signature(sig: Signature) -> tuple[object, tuple[int, ...]]:
    """(structure with every dim replaced by '#', the dims in depth-first order)."""
    dims: list[int] = []
    static = _flatten(tuple(sig), dims)  # a typed signature is a tuple subclass
    return static, tuple(dims)


class KeySpace:
    """Numbers signature structures, so that keys are short flat tuples of ints."""

    def __init__(self) -> None:
        self._ids: dict[object, int] = {}

    def static_id(self, static: object) -> int:
        sid = self._ids.get(static)
        if sid is None:
            sid = self._ids[static] = len(self._ids)
        return sid

    def key(self, sig: Signature) -> Key:
        static, dims = flatten_signature(sig)
        return (self.static_id(static), *dims)

    def keys(self, sigs: Iterable[Signature | None]) -> set[Key]:
        return {self.key(s) for s in sigs if s is not None}


@dataclass
class KernelStats:
    kernel_type: str
    candidates: int = 0
    over_budget: int = 0
    duplicates: int = 0
    present: int = 0
    new: int = 0
    added: int = 0
    smallest_over: float = math.inf
    source: int = -1
    notes: list[str] = field(default_factory=list)

    @property
    def all_over_budget(self) -> bool:
        return self.candidates > 0 and self.over_budget == self.candidates


@dataclass
class Picked:
    order: int
    source: int
    key: Key
    payload: object


CandidateStream = Iterator[tuple[Key, float, object]]


def sample_rng(seed: int, kernel_type: str) -> random.Random:
    return random.Random(f"{SAMPLE_SALT}:{seed}:{kernel_type}")


CHUNK = 1 << 16


def stream_kernel(stats: KernelStats, sources: list[CandidateStream], *, budget: float,
                  cap: int, rng: random.Random, existing: dict[Key, bool],
                  progress: Callable[[int], None] | None = None) -> list[Picked]:
    """Filter, de-duplicate and sample; returns the picks in stream order.

    `existing` maps keys already in the database (True: in this kernel's own file, counting
    toward the cap; False: elsewhere in its family). `cap` 0 means no cap. While a source is
    being consumed, `stats.source` is its index (for error messages).
    """
    # One dict for both de-duplications: key -> 0 elsewhere in the family, 1 in the kernel's
    # own file (not met yet), 2 met in this stream. A new key costs one lookup and one insert.
    state: dict[Key, int] = {key: 1 if own else 0 for key, own in existing.items()}
    state_get = state.get
    random_ = rng.random
    heappush, heapreplace = heapq.heappush, heapq.heapreplace
    heap: list[tuple[float, int, int, Key, object]] = []
    everything: list[Picked] = []
    over = dup = present = new = 0
    smallest_over = math.inf
    for index, source in enumerate(sources):
        stats.source = index
        iterator = iter(source)
        while True:
            before = over + dup + present + new
            for key, mem, payload in islice(iterator, CHUNK):
                if mem > budget:
                    over += 1
                    if mem < smallest_over:
                        smallest_over = mem
                    continue
                seen = state_get(key)
                if seen is not None:
                    if seen == 1:
                        present += 1
                        state[key] = 2
                    else:
                        dup += 1
                    continue
                state[key] = 2
                if not cap:
                    everything.append(Picked(new, index, key, payload))
                else:
                    priority = random_()
                    if len(heap) < cap:
                        heappush(heap, (-priority, new, index, key, payload))
                    elif priority < -heap[0][0]:
                        heapreplace(heap, (-priority, new, index, key, payload))
                new += 1
            total = over + dup + present + new
            if progress is not None:
                progress(stats.candidates + total)
            if total - before < CHUNK:
                break
    stats.source = -1
    stats.candidates += over + dup + present + new
    stats.over_budget += over
    stats.duplicates += dup
    stats.present += present
    stats.new += new
    stats.smallest_over = min(stats.smallest_over, smallest_over)
    if not cap:
        return everything
    want = max(0, cap - present)
    best = sorted(heap, key=lambda item: (-item[0], item[1]))[:want]
    return sorted((Picked(order, index, key, payload) for _, order, index, key, payload in best),
                  key=lambda p: p.order)
