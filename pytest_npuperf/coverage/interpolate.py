"""The simulator's interpolation, point for point: exact, then 1-D linear between the nearest
measured values on each side, then 2-D/3-D linear on the Delaunay triangulation; never beyond
the measured values (a target outside them falls back to the simulator's analytic model).

For one target (msmodeling's `CandidateGroup.interpolate`): the points of its bucket are tried
subgroup by subgroup (plain ND formats first) and by latency source (rows whose latency is in
the preferred column, then those that fell back to another: the two are never mixed); within
one, axis groups in the family's order (`(M,)`, `(K,)`, ..., `(M, K, N)`, those above the
policy's `max_interpolation_dim` skipped). A group's candidates are the points equal to the
target on every other axis. Each axis of the group must lie within the candidates' values;
1-D takes the nearest value at or below and at or above (repeated coordinates merged by their
median); 2-D/3-D needs d + 1 distinct points, two distinct values per axis, a full-rank point
set and the target inside the hull. The first group that answers with a finite value > 0 wins.
On a `sqrt` axis (the sequence of FusedInferAttentionScore under `axis_transform: sqrt_seq`)
the coordinates are square roots; the value interpolated is the latency itself.
"""

from __future__ import annotations

import bisect
import math
import statistics
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from .axes import Family, Query
from .delaunay import linear_nd

PREFERRED, ALTERNATE = 0, 1


@dataclass(frozen=True, eq=False)
class Point:
    """A measured row as a point: its query, latency, latency source and where it is."""

    query: Query
    latency: float
    kind: int  # PREFERRED (the table's preferred latency column) or ALTERNATE
    row: int  # 0-based position in its table
    table: str  # kernel type of the table it is in


@dataclass(frozen=True)
class Estimate:
    value: float
    method: str  # exact, linear_1d, griddata_linear
    axes: tuple[str, ...]
    used: tuple[Point, ...]


def _subgroup_rank(subgroup: tuple) -> tuple:
    plain = bool(subgroup) and all(f == "ND" for f in subgroup)
    return (0 if plain or not subgroup else 1,)


def _coords(query: Query, axes: Sequence[str], sqrt_axes: frozenset[str]) -> tuple[float, ...]:
    return tuple(math.sqrt(query.axes[a]) if a in sqrt_axes else query.axes[a] for a in axes)


class Interpolator:
    """The measured points of one kernel type, indexed for the simulator's lookups."""

    def __init__(self, family: Family, points: Iterable[Point]) -> None:
        self.family = family
        self.sqrt_axes = frozenset(a.name for a in family.axes if a.sqrt)
        self.groups = [g for g in family.groups
                       if family.max_dim is None or len(g) <= family.max_dim]
        self.points = list(points)
        self._attempts: dict[tuple, list[tuple]] = defaultdict(list)
        self._lines: dict[tuple, dict[tuple, list[Point]]] = {}
        self._sorted: dict[tuple, list[tuple]] = {}
        self._exact: dict[tuple, list[Point]] = defaultdict(list)
        for point in self.points:
            self._add(point)
        for _regime, attempts in self._attempts.items():
            attempts.sort(key=lambda a: (_subgroup_rank(a[0]), a[1]))
        for key, by_coord in self._lines.items():
            self._sorted[key] = sorted(by_coord)

    def _add(self, point: Point) -> None:
        q = point.query
        attempt = (q.subgroup, point.kind)
        if attempt not in self._attempts[q.regime]:
            self._attempts[q.regime].append(attempt)
        names = tuple(sorted(q.axes))
        self._exact[(q.regime, names, tuple(q.axes[n] for n in names))].append(point)
        for group in self.groups:
            if any(a not in q.axes for a in group):
                continue
            key = self._key(q, attempt, group)
            coord = _coords(q, group, self.sqrt_axes)
            self._lines.setdefault(key, {}).setdefault(coord, []).append(point)

    @staticmethod
    def _key(q: Query, attempt: tuple, group: tuple[str, ...]) -> tuple:
        others = tuple(sorted((a, v) for a, v in q.axes.items() if a not in group))
        return (q.regime, attempt, group, others)

    def regimes(self) -> set:
        return set(self._attempts)

    def estimate(self, target: Query, exclude: Point | None = None) -> Estimate | None:
        """What the simulator's interpolation answers for `target` from these points (without
        `exclude`, for leave-one-out), or None (it would fall back to its analytic model)."""
        for attempt in self._attempts.get(target.regime, ()):
            for group in self.groups:
                if any(a not in target.axes for a in group):
                    continue
                key = self._key(target, attempt, group)
                by_coord = self._lines.get(key)
                if not by_coord:
                    continue
                found = (self._linear(key, by_coord, target, group, exclude) if len(group) == 1
                         else self._griddata(by_coord, target, group, exclude))
                if found is not None:
                    return found
        return None

    def _linear(self, key: tuple, by_coord: dict[tuple, list[Point]], target: Query,
                group: tuple[str, ...], exclude: Point | None) -> Estimate | None:
        coords = self._sorted[key]
        t = _coords(target, group, self.sqrt_axes)[0]

        def alive(coord: tuple) -> list[Point]:
            return [p for p in by_coord[coord] if p is not exclude]

        count = sum(len(pts) for pts in by_coord.values())
        if count - (exclude is not None and exclude in by_coord.get(
                _coords(exclude.query, group, self.sqrt_axes), ())) < 2:
            return None  # the simulator needs two candidates
        i = bisect.bisect_right(coords, (t,))  # coords[:i] are at or below t
        lower = upper = None
        for j in range(i - 1, -1, -1):
            if alive(coords[j]):
                lower = coords[j]
                break
        start = i - 1 if i > 0 and coords[i - 1][0] == t else i
        for j in range(start, len(coords)):
            if alive(coords[j]):
                upper = coords[j]
                break
        if lower is None or upper is None:
            return None
        lo_pts, hi_pts = alive(lower), alive(upper)
        y0 = statistics.median(p.latency for p in lo_pts)
        y1 = statistics.median(p.latency for p in hi_pts)
        if upper[0] == lower[0]:
            value, used = y0, tuple(lo_pts)
        else:
            value = y0 + (t - lower[0]) / (upper[0] - lower[0]) * (y1 - y0)
            used = (*lo_pts, *hi_pts)
        if not (math.isfinite(value) and value > 0):
            return None
        return Estimate(float(value), "linear_1d", group, used)

    def _griddata(self, by_coord: dict[tuple, list[Point]], target: Query,
                  group: tuple[str, ...], exclude: Point | None) -> Estimate | None:
        merged: dict[tuple, list[Point]] = {}
        for coord, pts in by_coord.items():
            alive = [p for p in pts if p is not exclude]
            if alive:
                merged[coord] = alive
        t = _coords(target, group, self.sqrt_axes)
        coords = list(merged)
        if len(coords) < len(group) + 1:
            return None
        for i in range(len(group)):
            values = [c[i] for c in coords]
            if not min(values) <= t[i] <= max(values) or len(set(values)) < 2:
                return None
        latencies = [statistics.median(p.latency for p in merged[c]) for c in coords]
        value = linear_nd(coords, latencies, t)
        if value is None or not (math.isfinite(value) and value > 0):
            return None
        return Estimate(value, "griddata_linear", group,
                        tuple(p for c in coords for p in merged[c]))

    def exact(self, target: Query, exclude: Point | None = None) -> list[Point]:
        """Points of the target's bucket at its very coordinates."""
        names = tuple(sorted(target.axes))
        key = (target.regime, names, tuple(target.axes[n] for n in names))
        return [p for p in self._exact.get(key, ()) if p is not exclude]

