"""Sweep points: one per (op, message_bytes, num_devices, dtype, topology tier), with the ranks
of the group that measures it.

Topology tier (docs/format.md §7): ranks are laid out row-major on a grid (A3 `48 8 2` = pods x
nodes x dies, A2 `128 8`); the tier of a group is the index of the outermost grid dimension on
which its ranks differ (all equal: the last dimension). Without a grid shape the grid is
`nodes x ranks per node` of the torchrun job, so a group inside one node is tier 1 and one
across nodes tier 0.

Groups: without requested tiers, the group of n ranks is ranks 0..n-1 and its tier follows from
the grid. With requested tiers, the group of n ranks at tier t spreads over grid dimension t:
min(n, shape[t]) positions along it, n / that many consecutive ranks at each (so 2 ranks at
tier 0 of a `2 8` grid are ranks 0 and 8). A point no group can realise in this world is left
out, and the session says why.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from .ops import DTYPES, OPS, dtype_label, size_label

MAX_TIER = 2  # tiers of the contract: 0 inter-pod, 1 intra-pod, 2 die-level


@dataclass(frozen=True)
class CommPoint:
    op: str
    message_bytes: int
    num_devices: int
    dtype: str  # DT_ token
    topology_tier: int
    ranks: tuple[int, ...]  # global ranks of the group, in group order

    @property
    def case_id(self) -> str:
        return (f"{self.op}-{size_label(self.message_bytes)}-{self.num_devices}r-"
                f"{dtype_label(self.dtype)}-tier{self.topology_tier}")

    @property
    def key(self) -> tuple[int, int, str, int]:
        """The table's row identity (the upsert key)."""
        return (self.message_bytes, self.num_devices, self.dtype, self.topology_tier)

    @property
    def elements(self) -> int:
        return self.message_bytes // DTYPES[self.dtype][0]

    def to_dict(self) -> dict[str, object]:
        return {"op": self.op, "message_bytes": self.message_bytes,
                "num_devices": self.num_devices, "dtype": self.dtype,
                "topology_tier": self.topology_tier, "ranks": list(self.ranks)}

    @classmethod
    def from_dict(cls, data: dict) -> CommPoint:
        return cls(str(data["op"]), int(data["message_bytes"]), int(data["num_devices"]),
                   str(data["dtype"]), int(data["topology_tier"]),
                   tuple(int(r) for r in data["ranks"]))


def power_sizes(lo: int, hi: int, factor: int) -> list[int]:
    """lo, lo*factor, ... up to hi (nccl-tests' -b/-e/-f)."""
    if lo < 1 or hi < lo:
        raise ValueError(f"need 1 <= min ({lo}) <= max ({hi})")
    if factor < 2:
        raise ValueError(f"step factor {factor}: must be at least 2")
    sizes, size = [], lo
    while size <= hi:
        sizes.append(size)
        size *= factor
    return sizes


def coords(rank: int, shape: Sequence[int]) -> tuple[int, ...]:
    """Row-major coordinates of `rank` on the grid (the outermost dimension first)."""
    out = []
    for extent in reversed(shape):
        out.append(rank % extent)
        rank //= extent
    return tuple(reversed(out))


def tier_of(ranks: Iterable[int], shape: Sequence[int]) -> int:
    """The outermost grid dimension on which the ranks differ; the last one when they do not.

    A grid of more than three dimensions names tiers beyond the contract's: callers check."""
    points = [coords(r, shape) for r in ranks]
    for dim in range(len(shape)):
        if len({p[dim] for p in points}) > 1:
            return dim
    return len(shape) - 1


def _strides(shape: Sequence[int]) -> list[int]:
    strides = [1] * len(shape)
    for dim in range(len(shape) - 2, -1, -1):
        strides[dim] = strides[dim + 1] * shape[dim + 1]
    return strides


def group_at_tier(n: int, tier: int, shape: Sequence[int]) -> tuple[int, ...] | None:
    """n ranks spread over grid dimension `tier` (see the module doc), None if impossible."""
    if not 0 <= tier < len(shape) or n < 1:
        return None
    along = min(n, shape[tier])
    if n % along:
        return None
    inner = n // along
    stride = _strides(shape)[tier]
    if inner > stride:
        return None  # the inner ranks would spill into the next position along `tier`
    ranks = tuple(step * stride + j for step in range(along) for j in range(inner))
    if n > 1 and tier_of(ranks, shape) != tier:
        return None
    return ranks


def default_grid(world: int, local_world: int) -> tuple[int, ...]:
    """nodes x ranks per node of the job (torchrun's WORLD_SIZE and LOCAL_WORLD_SIZE)."""
    local = max(1, min(local_world, world))
    return (max(1, math.ceil(world / local)), local)


def check_grid(shape: Sequence[int]) -> tuple[int, ...]:
    shape = tuple(int(s) for s in shape)
    if not shape or any(s < 1 for s in shape):
        raise ValueError(f"grid shape {list(shape)}: one to three positive sizes, e.g. 48 8 2")
    if len(shape) > MAX_TIER + 1:
        raise ValueError(f"grid shape {list(shape)}: at most {MAX_TIER + 1} dimensions (tiers "
                         f"0 inter-pod, 1 intra-pod, 2 die-level)")
    return shape


@dataclass(frozen=True)
class SweepSpec:
    ops: tuple[str, ...]
    dtypes: tuple[str, ...]
    sizes: tuple[int, ...]
    group_sizes: tuple[int, ...]  # empty: the whole world
    tiers: tuple[int, ...]  # empty: derived from groups 0..n-1
    grid: tuple[int, ...]


def build_points(spec: SweepSpec, world: int) -> tuple[list[CommPoint], list[str]]:
    """The sweep's points in a fixed order (every rank must collect the same list), and notes
    on the points left out."""
    notes: list[str] = []
    grid_ranks = math.prod(spec.grid)
    if grid_ranks < world:
        notes.append(f"grid shape {' '.join(map(str, spec.grid))} holds {grid_ranks} ranks, "
                     f"the job has {world}: ranks beyond the grid are in no group")
    groups: list[tuple[int, int, tuple[int, ...]]] = []  # (n, tier, ranks)
    for n in spec.group_sizes or (world,):
        if n > world:
            notes.append(f"groups of {n} ranks left out: the job has {world}")
            continue
        if spec.tiers:
            for tier in spec.tiers:
                ranks = group_at_tier(n, tier, spec.grid)
                if ranks is None or max(ranks) >= world:
                    notes.append(f"no group of {n} ranks at tier {tier} on grid "
                                 f"{' '.join(map(str, spec.grid))} within {world} ranks: left out")
                    continue
                groups.append((n, tier, ranks))
        else:
            ranks = tuple(range(n))
            tier = tier_of(ranks, spec.grid)
            if tier > MAX_TIER:
                notes.append(f"group of {n} ranks: tier {tier} is beyond the contract's tiers")
                continue
            groups.append((n, tier, ranks))
    points: list[CommPoint] = []
    skipped: dict[str, int] = {}
    for op in spec.ops:
        for n, tier, ranks in groups:
            for dtype in spec.dtypes:
                size = DTYPES[dtype][0]
                for message in spec.sizes:
                    # Equal splits of whole elements: all_to_all sends message/n to each rank.
                    unit = size * (n if OPS[op].name == "all_to_all" else 1)
                    if message % unit:
                        reason = (f"{op} {dtype_label(dtype)} on {n} ranks needs message sizes "
                                  f"that are multiples of {unit} bytes")
                        skipped[reason] = skipped.get(reason, 0) + 1
                        continue
                    points.append(CommPoint(op, message, n, dtype, tier, ranks))
    notes += [f"{reason}: {count} size(s) left out" for reason, count in skipped.items()]
    seen: set[str] = set()
    unique = []
    for point in points:  # a size given twice, or a tier reached twice: one case
        if point.case_id not in seen:
            seen.add(point.case_id)
            unique.append(point)
    return unique, notes
