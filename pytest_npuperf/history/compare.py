"""Is a case slower than its baseline? A rank test on the two runs' samples plus a minimum effect.

The test is Mann-Whitney U (two-sided, normal approximation with tie and continuity
corrections), chosen over a bootstrap interval of the ratio of medians because:

- latency samples are skewed and carry outliers (a preempted call, a cache miss): a rank test
  assumes no distribution, and one outlier moves a rank by one, not the statistic by 10x;
- it is deterministic: the same two sample sets always give the same verdict (a bootstrap
  draws random resamples; a nightly job must not flip on the draw), and it costs one sort,
  where a bootstrap costs thousands of medians per case over 10^5 cases;
- with the >= 10 samples a case keeps, the normal approximation of U is accurate (the tests
  check it against the exact permutation distribution).

Significance alone is not a regression: samples within one run are correlated (the machine's
state drifts), so two runs of the same build differ "significantly" by a percent or two. A
case is SLOWER only when the difference is significant *and* the ratio of medians is at least
the minimum effect: `--npuperf-threshold` (5 % by default), or the case's own
run-to-run spread over its recent baseline runs when that is larger (history/baseline.py);
FASTER likewise in the other direction (log-symmetric: 1/1.05); a change beyond the asked-for
threshold but within that run-to-run spread is UNCERTAIN, never SAME. A SLOWER case is measured
once more before it fails (harness/measurer.py): noise only slows a measurement down. It is SAME
when the ratio lies within the threshold and both sides' medians are known to better than
the threshold; UNCERTAIN otherwise (too few samples, samples too spread to resolve the
threshold, a flagged measurement on either side, a CPU host whose own speed changed as much
as the case did between the two measurements (measure/reference.py), or enough to hide a
change beyond the threshold, or a large but not significant difference).
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

SLOWER, FASTER, SAME, UNCERTAIN = "SLOWER", "FASTER", "SAME", "UNCERTAIN"
NEW = "NEW"  # no baseline measurement of this case: nothing to compare with
VERDICTS = (SLOWER, FASTER, UNCERTAIN, SAME, NEW)  # report order: the worst news first
DEFAULT_THRESHOLD = DEFAULT_REGRESSION_THRESHOLD
# Two-sided significance level. Strict, because a false alarm in a nightly job costs a
# person's morning; the minimum effect already filters small real differences.
ALPHA = 0.01
MIN_SAMPLES = 5  # below this on either side the test has no power at ALPHA: UNCERTAIN
_TRUSTED = ("ok",)
# A host whose reference loop ran this much slower or faster than during the baseline was not
# the same machine (measure/reference.py): a change beyond the threshold is UNCERTAIN.
HOST_TOLERANCE = 0.1  # statuses whose samples a verdict may rest on (noisy/suspect: UNCERTAIN)


@dataclass(frozen=True)
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


@dataclass(frozen=True)
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
    threshold: float = DEFAULT_THRESHOLD
    reason: str = ""  # why UNCERTAIN (or NEW)

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
                f"{100 * self.threshold:g} %")
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
    spread: Callable[[], float] = float  # the larger relative resolution of the two medians


def _threshold(threshold: float, run_to_run: float | None) -> float:
    if threshold < 0 or not math.isfinite(threshold):
        raise ValueError(f"regression threshold must be a fraction >= 0, got {threshold}")
    if run_to_run is not None and math.isfinite(run_to_run) and run_to_run > threshold:
        return float(run_to_run)
    return threshold


def compare_samples(base: list[float] | np.ndarray, new: list[float] | np.ndarray, *,
                    threshold: float = DEFAULT_THRESHOLD, base_status: str = "ok",
                    new_status: str = "ok", base_run: str = "",
                    base_reference: float | None = None,
                    new_reference: float | None = None,
                    run_to_run: float | None = None) -> Comparison:
    """The verdict for one case (see the module's docstring for the rule). `*_reference`:
    the host's reference loop time around each measurement (CPU, measure/reference.py);
    `run_to_run`: how much the baseline's own recent runs differed (a fraction): a smaller
    change is no evidence, so it raises the minimum effect."""
    minimum = _threshold(threshold, run_to_run)
    a = np.asarray(base, dtype=np.float64)
    b = np.asarray(new, dtype=np.float64)
    a, b = a[np.isfinite(a) & (a > 0)], b[np.isfinite(b) & (b > 0)]
    if a.size and b.size:
        sides = _Sides(int(a.size), int(b.size), float(np.median(a)), float(np.median(b)),
                       mann_whitney(b, a), lambda: max(_resolution(a), _resolution(b)))
    else:
        sides = _Sides(int(a.size), int(b.size))
    return _verdict(sides, threshold=minimum, asked=threshold, base_status=base_status,
                    new_status=new_status, base_run=base_run, base_reference=base_reference,
                    new_reference=new_reference)


def _verdict(sides: _Sides, *, threshold: float, asked: float, base_status: str,
             new_status: str, base_run: str, base_reference: float | None,
             new_reference: float | None) -> Comparison:
    """The rule of the module's docstring on two sides' figures (`threshold`: the minimum
    effect, `asked` raised by the baseline's run-to-run spread)."""
    common = {"base_samples": sides.base_samples, "new_samples": sides.new_samples,
              "base_run": base_run, "threshold": threshold}
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
    limit = math.log1p(threshold)
    effect = math.log(ratio)
    if base_reference and new_reference and base_reference > 0 and new_reference > 0:
        host = math.log(new_reference / base_reference)
        moved = f"the host ran its reference loop {math.exp(host):.2f}x as long as during " \
                f"the baseline"
        if abs(host) >= math.log1p(HOST_TOLERANCE):
            # The host itself changed speed, and that change (in the direction it went) could
            # account for the case's: no verdict. A change beyond what the host explains stands.
            if abs(effect) >= limit and effect * host > 0 and abs(effect - host) < limit:
                return Comparison(UNCERTAIN, reason=f"{moved}, which accounts for the change",
                                  **found)
            # And the other way: a host that sped up can hide a slowdown (slowed down: a
            # speed-up) that net of it is beyond the threshold. SAME would be a guess.
            if abs(effect) < limit <= abs(effect - host):
                return Comparison(UNCERTAIN, reason=f"{moved}, which could hide a change of "
                                                    f"{math.exp(effect - host):.2f}x", **found)
    significant = test.p_value < ALPHA
    if significant and effect >= limit and effect > 0:
        return Comparison(SLOWER, **found)
    if significant and effect <= -limit and effect < 0:
        return Comparison(FASTER, **found)
    if math.log1p(asked) <= abs(effect) < limit:
        # Beyond the asked-for minimum effect but within how much the baseline's own runs
        # moved: calling it SAME would hide a change nobody can rule out either.
        return Comparison(UNCERTAIN, reason=f"the baseline's own recent runs differed by "
                                            f"{100 * threshold:.0f} %, as much as the change",
                          **found)
    if abs(effect) < limit:
        spread = sides.spread()
        if spread <= threshold:
            return Comparison(SAME, **found)
        return Comparison(UNCERTAIN, reason=f"medians known to +-{100 * spread:.1f} %, "
                                            f"wider than the {100 * threshold:g} % threshold",
                          **found)
    return Comparison(UNCERTAIN, reason=f"not significant (p={_fmt_p(test.p_value)} >= "
                                        f"{ALPHA:g})", **found)


def compare_many(pairs: Sequence[tuple[Sequence[float], Sequence[float], dict[str, Any]]]
                 ) -> list[Comparison]:
    """`[compare_samples(base, new, **options) for base, new, options in pairs]`, the same
    verdicts to the last bit, with the samples' statistics found for all pairs at once (10^5
    cases at the end of a large run: a pair at a time, numpy's per-call costs were most of a
    minute)."""
    found: list[Comparison] = []
    for first in range(0, len(pairs), _BATCH):
        chunk = pairs[first:first + _BATCH]
        for (_, _, options), sides in zip(chunk, _sides_of(chunk)):
            threshold = options.get("threshold", DEFAULT_THRESHOLD)
            found.append(_verdict(
                sides, threshold=_threshold(threshold, options.get("run_to_run")),
                asked=threshold, base_status=options.get("base_status", "ok"),
                new_status=options.get("new_status", "ok"),
                base_run=options.get("base_run", ""),
                base_reference=options.get("base_reference"),
                new_reference=options.get("new_reference")))
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
                            _Spread(max(base_spread, new_spread))))
    return found


class _Spread:
    """A spread computed already, asked for as `_Sides.spread` is."""

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


SHIFT_MIN_CASES = 5


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
    return (f"the whole run moved: median ratio {shift:.3f}x over {len(found)} compared "
            f"case(s), beyond the {100 * threshold:g} % threshold; check the machine and the "
            f"stack before one kernel")
