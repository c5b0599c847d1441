"""Is a case slower than its baseline? A change beyond the case's own session-to-session spread
and the minimum effect, that the two runs' samples show (a rank test), that neither the host
nor the whole run explains.

Samples within one session do not decide it: they share the session's state (memory bandwidth
left by co-tenants, the allocator's placement, the cores the threads got), so two sessions of
the same build differ "significantly" (p = 1e-58) by 5-65 % on a shared host while each
session's samples stay tight. A case is SLOWER (FASTER likewise, log-symmetric) only when

1. the ratio of medians exceeds the minimum effect, `--npuperf-threshold` (5 % by default),
   and SPREAD_FACTOR times the case's session-to-session spread over its recent good runs in
   the history (history/spread.py); with no such spread known (fewer than two good runs, a
   run JSON baseline without a history) a change is UNCERTAIN, never SLOWER;
2. the rank test on the two runs' samples finds them different: Mann-Whitney U (two-sided,
   normal approximation with tie and continuity corrections), chosen over a bootstrap
   interval because latency samples are skewed and carry outliers (a rank moves by one, a
   mean by 10x), because it is deterministic (a nightly job must not flip on a random draw)
   and costs one sort where a bootstrap costs thousands of medians per case over 10^5 cases;
   with the >= 10 samples a case keeps, the normal approximation is accurate (the tests check
   it against the exact permutation distribution);
3. the host did not move as much: on a CPU a pure-Python loop is timed around every case,
   a memory copy at most once a second (measure/reference.py, replay/runner.py); when the
   probe that matches the case's roofline bound (the copy for a memory-bound case, the loop
   for a compute- or latency-bound one, the larger move of both when unknown) moved by
   HOST_TOLERANCE or more, the change is judged net of it: UNCERTAIN when the host's move
   accounts for it, or could hide one;
4. the whole run did not move with it: once SHIFT_MIN_CASES cases of other kernel types were
   judged in the session, their median ratio is the run's move (co-tenants, clocks, another
   node), judged like the host's, unless the software stack changed since the baseline (then
   it is the stack's);
5. no co-tenant shared its cores: a case that lost CPU time to another process in
   CO_TENANT_SHARE of its samples or more ran beside one, and its kept samples with it (the
   co-tenant's memory traffic and cache footprint are not preemption): UNCERTAIN.

A change within the spread is UNCERTAIN, never SAME. SAME: within the minimum effect, both
medians known to better than it. UNCERTAIN otherwise (too few samples, samples too spread to
resolve it, a flagged measurement on either side, or a large but not significant difference).
A SLOWER case is measured again in fresh processes before it fails (harness/measurer.py).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass, fields
from itertools import chain
from typing import Any, NamedTuple

import numpy as np

from ..measure.policy import DEFAULT_REGRESSION_THRESHOLD
from ..measure.stats import Z95, median_ci_halfwidth
from .spread import SPREAD_FACTOR, Spread

SLOWER, FASTER, SAME, UNCERTAIN = "SLOWER", "FASTER", "SAME", "UNCERTAIN"
NEW = "NEW"  # no baseline measurement of this case: nothing to compare with
VERDICTS = (SLOWER, FASTER, UNCERTAIN, SAME, NEW)  # report order: the worst news first
DEFAULT_THRESHOLD = DEFAULT_REGRESSION_THRESHOLD
# Two-sided significance level. Strict, because a false alarm in a nightly job costs a
# person's morning; the minimum effect already filters small real differences.
ALPHA = 0.01
MIN_SAMPLES = 5  # below this on either side the test has no power at ALPHA: UNCERTAIN
_TRUSTED = ("ok",)  # statuses whose samples a verdict may rest on (noisy/suspect: UNCERTAIN)
# A host whose probes (measure/reference.py) ran this much slower or faster than during the
# baseline was not the same machine: the change is judged net of that move.
HOST_TOLERANCE = 0.1
SHIFT_MIN_CASES = 5  # cases judged before their median ratio says how the whole run moved
# The share of a case's samples preempted by other processes from which it ran beside a
# co-tenant. Measured on the 2-core development VM (bench_verdicts.py): quiet sessions' cases
# lose at most 7 % (99th percentile 1 %), cases beside one busy process 12-82 %.
CO_TENANT_SHARE = 0.1


@dataclass(slots=True)  # not frozen: made per case, 10^5 times at a large run's end
class MannWhitney:
    u: float  # U of the first sample (count of pairs where it is larger, ties half)
    z: float
    p_value: float  # two-sided


def mann_whitney(a: np.ndarray | list[float], b: np.ndarray | list[float]) -> MannWhitney:
    """Two-sided Mann-Whitney U test of `a` against `b` (normal approximation).

    U counts the pairs (x in a, y in b) with x > y (ties count one half); under the null
    hypothesis (both samples from one distribution) its mean is n1 n2 / 2 and its variance
    n1 n2 / 12 * ((n + 1) - sum(t^3 - t) / (n (n - 1))) over the tie groups t.
    """
    x = np.asarray(a, dtype=np.float64)
    y = np.asarray(b, dtype=np.float64)
    n1, n2 = x.size, y.size
    if n1 == 0 or n2 == 0:
        raise ValueError("both samples need at least one value")
    values = np.concatenate([x, y])
    _, inverse, counts = np.unique(values, return_inverse=True, return_counts=True)
    # Average rank of each tie group: the ranks it spans are (start + 1) .. (start + count).
    starts = np.cumsum(counts) - counts
    ranks = (starts + (counts + 1) / 2.0)[inverse]
    ties = float(np.sum(counts.astype(np.float64) ** 3 - counts))
    return _u_test(float(ranks[:n1].sum()), n1, n2, ties)


def _u_test(rank_sum: float, n1: int, n2: int, ties: float) -> MannWhitney:
    """The test from the first sample's rank sum and the tie term sum(t^3 - t) (both exact:
    sums of half-integers and of integers), as `mann_whitney` and `compare_many` find them."""
    u = float(rank_sum - n1 * (n1 + 1) / 2.0)
    n = n1 + n2
    mean = n1 * n2 / 2.0
    variance = n1 * n2 / 12.0 * ((n + 1) - (ties / (n * (n - 1)) if n > 1 else 0.0))
    if variance <= 0:  # every value identical: no evidence of any difference
        return MannWhitney(u, 0.0, 1.0)
    delta = u - mean
    corrected = max(abs(delta) - 0.5, 0.0)  # continuity correction
    z = math.copysign(corrected / math.sqrt(variance), delta)
    return MannWhitney(u, z, min(1.0, math.erfc(abs(z) / math.sqrt(2.0))))


@dataclass(slots=True)  # not frozen: a frozen one's __init__ costs 4x (10^5 made per run)
class Comparison:
    """One case against its baseline."""

    verdict: str
    ratio: float | None = None  # new median / baseline median
    p_value: float | None = None
    base_median_us: float | None = None
    new_median_us: float | None = None
    base_samples: int = 0
    new_samples: int = 0
    base_run: str = ""  # the run the baseline samples came from
    threshold: float = DEFAULT_THRESHOLD  # the minimum effect used: asked, or the spread's
    reason: str = ""  # why UNCERTAIN (or NEW); what else the verdict took into account
    spread: float | None = None  # the case's session-to-session spread (history/spread.py)
    spread_runs: int = 0  # the good runs it was taken over

    @property
    def severity(self) -> float:
        """How far from the baseline in either direction (max(r, 1/r)); 1 when unknown."""
        if not self.ratio or not math.isfinite(self.ratio):
            return 1.0
        return max(self.ratio, 1.0 / self.ratio)

    def describe(self) -> str:
        """`SLOWER: 1.52x the baseline (p=3e-12; median 10.0 -> 15.2 us, run X)`."""
        if self.ratio is None:
            return f"{self.verdict}: {self.reason}" if self.reason else self.verdict
        text = (f"{self.verdict}: {self.ratio:.3f}x the baseline (p={_fmt_p(self.p_value)}; "
                f"median {self.base_median_us:.4g} -> {self.new_median_us:.4g} us, "
                f"{self.base_samples}/{self.new_samples} samples, minimum effect "
                f"{100 * self.threshold:.3g} %")
        if self.spread is not None:
            text += f" (session-to-session spread {100 * self.spread:.3g} % over " \
                    f"{self.spread_runs} good run(s))"
        if self.base_run:
            text += f", baseline run {self.base_run}"
        text += ")"
        if self.reason:
            text += f"; {self.reason}"
        return text

    def to_dict(self) -> dict[str, Any]:
        # Every field is a number or a string: no deep copy (dataclasses.asdict), 10^5 times.
        return {name: getattr(self, name) for name in _COMPARISON_FIELDS}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Comparison:
        if data.keys() == _COMPARISON_KEYS:  # as to_dict made it: no field to leave out
            return cls(**data)
        return cls(**{k: data[k] for k in cls.__dataclass_fields__ if k in data})


_COMPARISON_FIELDS = tuple(f.name for f in fields(Comparison))
_COMPARISON_KEYS = frozenset(_COMPARISON_FIELDS)


def _fmt_p(p: float | None) -> str:
    if p is None:
        return "-"
    return f"{p:.2g}" if p >= 1e-4 else f"{p:.1e}"


def _resolution(samples: np.ndarray) -> float:
    """Relative 95 % CI half-width of the median (inf when it cannot be estimated)."""
    median = float(np.median(samples))
    if median <= 0:
        return math.inf
    return median_ci_halfwidth(samples) / median


class _Sides(NamedTuple):  # a tuple: 10^5 of them at a large run's end
    """What the rule reads of the two sample sets (their valid samples: finite, > 0)."""

    base_samples: int
    new_samples: int
    base_median: float = math.nan
    new_median: float = math.nan
    test: MannWhitney | None = None  # of the new samples against the baseline's
    resolution: Callable[[], float] = float  # the larger relative resolution of the medians


@dataclass(slots=True)  # not frozen: made per case, 10^5 times at a large run's end
class Probes:
    """The host's probes around the two measurements (measure/reference.py), and the case's
    roofline bound (`compute`, `memory`, `latency`; "" unknown), which says which one
    matters."""

    base_loop: float | None = None
    new_loop: float | None = None
    base_memory: float | None = None
    new_memory: float | None = None
    bound_by: str = ""

    def move(self) -> tuple[float, str] | None:
        """(log of how much the relevant probe's time changed, what it is), the larger move
        when both are relevant; None when neither was timed on both sides."""
        moves = []
        if self.bound_by != "memory" and _positive(self.base_loop, self.new_loop):
            moves.append((math.log(self.new_loop / self.base_loop), "reference loop"))
        if self.bound_by not in ("compute", "latency") \
                and _positive(self.base_memory, self.new_memory):
            moves.append((math.log(self.new_memory / self.base_memory), "memory copy"))
        return max(moves, key=lambda m: abs(m[0])) if moves else None


def _positive(*values: float | None) -> bool:
    return all(isinstance(v, (int, float)) and math.isfinite(v) and v > 0 for v in values)


def _explained(effect: float, move: float, visible: float, limit: float, what: str
               ) -> str | None:
    """Why a change `effect` cannot be told from a move `move` of the host or the run (logs),
    None when it can: the move accounts for it, or could hide one (a host that sped up can
    hide a slowdown that net of it is beyond the limit)."""
    net = effect - move
    if abs(effect) >= visible and effect * move > 0:
        # A move as large as the change or larger accounts for all of it (net of it the case
        # went the other way, which no more tells a change).
        if abs(net) < visible or abs(move) >= abs(effect):
            return f"{what}, which accounts for the change (net of it {math.exp(net):.2f}x)"
        if abs(net) < limit:
            return f"{what}; net of it {math.exp(net):.2f}x, within the case's spread"
    if abs(effect) < limit <= abs(net):
        return f"{what}, which could hide a change of {math.exp(net):.2f}x"
    return None


def compare_samples(base: list[float] | np.ndarray, new: list[float] | np.ndarray, *,
                    threshold: float = DEFAULT_THRESHOLD, base_status: str = "ok",
                    new_status: str = "ok", base_run: str = "",
                    spread: Spread | None = None,
                    base_reference: float | None = None, new_reference: float | None = None,
                    probes: Probes | None = None,
                    run_shift: tuple[float, int] | None = None,
                    co_tenant: float = 0.0) -> Comparison:
    """The verdict for one case (see the module's docstring for the rule). `spread`: the
    case's session-to-session spread (None: unknown, so no SLOWER or FASTER);
    `base_reference`/`new_reference`: the host's reference loop around each measurement (a
    shorthand for `probes`); `run_shift`: (median ratio, cases) of this session so far;
    `co_tenant`: the share of the new measurement's samples that other processes
    preempted."""
    a = np.asarray(base, dtype=np.float64)
    b = np.asarray(new, dtype=np.float64)
    a, b = a[np.isfinite(a) & (a > 0)], b[np.isfinite(b) & (b > 0)]
    if a.size and b.size:
        sides = _Sides(int(a.size), int(b.size), float(np.median(a)), float(np.median(b)),
                       mann_whitney(b, a), lambda: max(_resolution(a), _resolution(b)))
    else:
        sides = _Sides(int(a.size), int(b.size))
    return _verdict(sides, threshold=threshold, base_status=base_status,
                    new_status=new_status, base_run=base_run, spread=spread,
                    base_reference=base_reference, new_reference=new_reference,
                    probes=probes, run_shift=run_shift, co_tenant=co_tenant)


def _verdict(sides: _Sides, *, threshold: float = DEFAULT_THRESHOLD, base_status: str = "ok",
             new_status: str = "ok", base_run: str = "", spread: Spread | None = None,
             base_reference: float | None = None, new_reference: float | None = None,
             probes: Probes | None = None,
             run_shift: tuple[float, int] | None = None, co_tenant: float = 0.0) -> Comparison:
    """The rule of the module's docstring on two sides' figures (`compare_samples`' options)."""
    if threshold < 0 or not math.isfinite(threshold):
        raise ValueError(f"regression threshold must be a fraction >= 0, got {threshold}")
    visible = math.log1p(threshold)
    limit = max(visible, spread.limit if spread is not None else 0.0)
    if probes is None:
        probes = Probes(base_reference, new_reference)
    common = {"base_samples": sides.base_samples, "new_samples": sides.new_samples,
              "base_run": base_run, "threshold": math.expm1(limit),
              "spread": spread.value if spread is not None else None,
              "spread_runs": spread.runs if spread is not None else 0}
    if sides.base_samples == 0:
        return Comparison(NEW, reason="no baseline samples", **common)
    if sides.new_samples == 0:
        return Comparison(UNCERTAIN, reason="no samples in this run", **common)
    base_median, new_median = sides.base_median, sides.new_median
    ratio = new_median / base_median
    test = sides.test
    found = {"ratio": ratio, "p_value": test.p_value, "base_median_us": base_median,
             "new_median_us": new_median, **common}
    if min(sides.base_samples, sides.new_samples) < MIN_SAMPLES:
        return Comparison(UNCERTAIN, reason=f"fewer than {MIN_SAMPLES} samples on one side",
                          **found)
    flagged = [f"{side} {status}" for side, status in (("baseline", base_status),
                                                       ("this run", new_status))
               if status not in _TRUSTED]
    if flagged:
        return Comparison(UNCERTAIN, reason=f"measurement flagged ({', '.join(flagged)})",
                          **found)
    effect = math.log(ratio)
    notes = []
    host = probes.move()
    if host is not None and abs(host[0]) >= math.log1p(HOST_TOLERANCE):
        moved = f"the host's {host[1]} ran {math.exp(host[0]):.2f}x as long as during the " \
                f"baseline"
        why = _explained(effect, host[0], visible, limit, moved)
        if why:
            return Comparison(UNCERTAIN, reason=why, **found)
        notes.append(f"{moved}; net of it {math.exp(effect - host[0]):.3f}x")
    if run_shift is not None and run_shift[1] >= SHIFT_MIN_CASES and run_shift[0] > 0:
        shift = math.log(run_shift[0])
        if abs(shift) >= visible:
            moved = (f"the whole run moved: median ratio {run_shift[0]:.3f}x over the "
                     f"{run_shift[1]} case(s) of other kernel types judged before it (the "
                     f"host's move, not this kernel's)")
            why = _explained(effect, shift, visible, limit, moved)
            if why:
                return Comparison(UNCERTAIN, reason=why, **found)
    reason = "; ".join(notes)
    if abs(effect) >= visible:
        if spread is None:
            return Comparison(UNCERTAIN, reason="no session-to-session spread known for it (fewer "
                                                "than 2 good runs of it in a history): the "
                                                "samples of one session alone do not decide",
                              **found)
        if abs(effect) < limit:
            return Comparison(UNCERTAIN, reason=f"{spread.describe()}: a change of "
                                                f"{ratio:.3f}x is within {SPREAD_FACTOR:g}x "
                                                f"that", **found)
        if co_tenant >= CO_TENANT_SHARE:
            return Comparison(UNCERTAIN, reason=f"other processes preempted "
                                                f"{100 * co_tenant:.0f} % of its samples: it ran "
                                                f"beside a co-tenant, which a change of "
                                                f"{ratio:.3f}x may be", **found)
        if test.p_value < ALPHA:
            return Comparison(SLOWER if effect > 0 else FASTER, **{**found, "reason": reason})
        return Comparison(UNCERTAIN, reason=f"not significant (p={_fmt_p(test.p_value)} >= "
                                            f"{ALPHA:g})", **found)
    resolution = sides.resolution()
    if resolution <= math.expm1(limit):
        return Comparison(SAME, **{**found, "reason": reason})
    return Comparison(UNCERTAIN, reason=f"medians known to +-{100 * resolution:.1f} %, wider "
                                        f"than the {100 * math.expm1(limit):.3g} % minimum "
                                        f"effect", **found)


class RunShift:
    """How the session's judged cases moved so far: the median of their ratios, the run's
    move (co-tenants, clocks, another node) rather than any one kernel's.

    A case is held against the move of the cases of other kernel types only: a host's move
    shows in every kernel type, while a change to a kernel's code moves every shape of that
    type alone. Counted with its own type, a slowed type that is judged first (a third of
    `-k MatMul` is MatMulV2) reads as the host's move and hides itself."""

    def __init__(self) -> None:
        self._ratios: dict[str, list[float]] = {}
        # now() per group since the last add: `npuperf compare` of two 10^5-case runs asks
        # every case's, each a median over all the others.
        self._now: dict[str | None, tuple[float, int] | None] = {}

    def add(self, comparison: Comparison | None, group: str = "") -> None:
        """A verdict resting on trusted samples on both sides counts; `group`: the case's
        kernel type (or collective op)."""
        if comparison is not None and comparison.verdict in (SLOWER, FASTER, SAME, UNCERTAIN) \
                and comparison.ratio and comparison.ratio > 0 \
                and not comparison.reason.startswith(("measurement flagged", "fewer than")):
            self._ratios.setdefault(group, []).append(comparison.ratio)
            self._now.clear()

    def now(self, group: str | None = None) -> tuple[float, int] | None:
        """(median ratio, cases) of the cases outside `group` (None: all), once
        SHIFT_MIN_CASES of them were judged."""
        if group not in self._now:
            ratios = [r for name, values in self._ratios.items() if name != group
                      for r in values]
            self._now[group] = ((statistics.median(ratios), len(ratios))
                                if len(ratios) >= SHIFT_MIN_CASES else None)
        return self._now[group]


def compare_many(pairs: Sequence[tuple[Sequence[float], Sequence[float], dict[str, Any]]]
                 ) -> list[Comparison]:
    """`[compare_samples(base, new, **options) for base, new, options in pairs]`, the same
    verdicts to the last bit, with the samples' statistics found for all pairs at once (10^5
    cases at the end of a large run: a pair at a time, numpy's per-call costs were most of a
    minute)."""
    found: list[Comparison] = []
    for first in range(0, len(pairs), _BATCH):
        chunk = pairs[first:first + _BATCH]
        found.extend(_verdict(sides, **options)
                     for (_, _, options), sides in zip(chunk, _sides_of(chunk)))
    return found


_BATCH = 20_000  # pairs whose samples are held at once


def _sides_of(pairs: Sequence[tuple[Sequence[float], Sequence[float], dict]]) -> list[_Sides]:
    """`_Sides` of each pair, computed over every pair's samples at once: per pair and side
    the valid samples sorted (medians, the medians' intervals), and per pair both sides
    sorted together (the rank test's rank sums and ties)."""
    sizes = [(len(base), len(new)) for base, new, _ in pairs]
    values = np.fromiter(chain.from_iterable(chain(new, base) for base, new, _ in pairs),
                         np.float64, sum(a + b for a, b in sizes))
    count = len(pairs)
    pair = np.repeat(np.arange(count), [a + b for a, b in sizes])
    side = np.repeat(np.tile([1, 0], count), [n for a, b in sizes for n in (b, a)])  # 1: new
    valid = np.isfinite(values) & (values > 0)
    values, pair, side = values[valid], pair[valid], side[valid]
    group = pair * 2 + side
    n = np.bincount(group, minlength=2 * count).reshape(count, 2)  # [:, 0] base, [:, 1] new
    # Per side, sorted: the median and its interval by position.
    order = np.lexsort((values, group))
    ordered = values[order]
    start = np.concatenate(([0], np.cumsum(n.ravel())[:-1])).reshape(count, 2)
    medians = _medians(ordered, start, n)
    spreads = _resolutions(ordered, start, n, medians)
    # Both sides together: the new samples' rank sum and the ties.
    order = np.lexsort((values, pair))
    v, p, s = values[order], pair[order], side[order]
    tie_start = np.concatenate(([True], (p[1:] != p[:-1]) | (v[1:] != v[:-1])))
    tie = np.cumsum(tie_start) - 1
    tie_size = np.bincount(tie)
    pair_first = np.concatenate(([0], np.cumsum(n.sum(axis=1))[:-1]))
    first_of_tie = np.flatnonzero(tie_start)
    # Average rank of a tie group (1-based within its pair): its start + (size + 1) / 2.
    rank = ((first_of_tie - pair_first[p[first_of_tie]]) + (tie_size + 1) / 2.0)[tie]
    rank_sum = np.bincount(p, weights=np.where(s == 1, rank, 0.0), minlength=count)
    ties = np.bincount(p[first_of_tie], weights=tie_size.astype(np.float64) ** 3 - tie_size,
                       minlength=count)
    found = []
    for index, (bases, news) in enumerate(n.tolist()):
        if not (bases and news):
            found.append(_Sides(bases, news))
            continue
        base_spread, new_spread = spreads[index]
        found.append(_Sides(bases, news, medians[index][0], medians[index][1],
                            _u_test(float(rank_sum[index]), news, bases, float(ties[index])),
                            _Resolution(max(base_spread, new_spread))))
    return found


class _Resolution:
    """A resolution computed already, asked for as `_Sides.resolution` is."""

    __slots__ = ("value",)

    def __init__(self, value: float) -> None:
        self.value = value

    def __call__(self) -> float:
        return self.value


def _medians(ordered: np.ndarray, start: np.ndarray, n: np.ndarray) -> list[list[float]]:
    """np.median of each (pair, side) run of `ordered` (NaN for an empty one)."""
    mid = start + n // 2
    upper = ordered[np.minimum(mid, len(ordered) - 1)] if len(ordered) else np.zeros(n.shape)
    lower = ordered[np.clip(mid - 1, 0, None)] if len(ordered) else upper
    median = np.where(n % 2 == 1, upper, (lower + upper) / 2)
    return np.where(n > 0, median, np.nan).tolist()


def _resolutions(ordered: np.ndarray, start: np.ndarray, n: np.ndarray,
                 medians: list[list[float]]) -> list[list[float]]:
    """`_resolution` of each (pair, side) run of `ordered`."""
    sizes = n.astype(np.float64)
    half = Z95 * np.sqrt(sizes) / 2
    low = np.maximum(np.floor(sizes / 2 - half), 0).astype(np.int64)
    high = np.minimum(np.ceil(sizes / 2 + half), n - 1).astype(np.int64)
    last = max(len(ordered) - 1, 0)
    if len(ordered):
        width = (ordered[np.clip(start + high, 0, last)]
                 - ordered[np.clip(start + low, 0, last)]) / 2
    else:
        width = np.zeros(n.shape)
    width = np.where(n < 3, math.inf, width).tolist()
    return [[math.inf if m <= 0 else w / m for w, m in zip(widths, middle)]
            for widths, middle in zip(width, medians)]


def run_shift_note(comparisons: list[Comparison]) -> str:
    """A sentence when most of a run moved one way together (the median ratio beyond the
    threshold): a machine-wide change (co-tenants' memory traffic, clocks, another node) or a
    stack change moves every kernel alike, which no one case's verdict can tell; the reader
    can. Empty otherwise."""
    found = [c for c in comparisons if c.ratio and c.ratio > 0]
    if len(found) < SHIFT_MIN_CASES:
        return ""
    shift = statistics.median(c.ratio for c in found)
    threshold = min(c.threshold for c in found)
    if abs(math.log(shift)) < math.log1p(threshold):
        return ""
    beyond = sum(1 for c in found if c.verdict == (SLOWER if shift > 1 else FASTER))
    return (f"the whole run moved: median ratio {shift:.3f}x over {len(found)} compared "
            f"case(s), beyond the {100 * threshold:.3g} % threshold: the host's move (or the "
            f"stack's), not {len(found)} kernel changes; {beyond} case(s) "
            f"{'SLOWER' if shift > 1 else 'FASTER'} beyond it; check the machine and the stack "
            f"before one kernel")
