"""The one record of per-group statistics, and the statistics of `stats.summarize`,
`stats.relative_precision` and `noise.noise_reason` for many groups of samples at once (one
group per case), vectorised.

A profile of 10^5 cases has 10^6 kernel samples or more: computing each case's statistics in
a Python loop over numpy calls costs more than reading the profile. Here every group is one
slice of one sorted array, and each statistic is a few array operations over all of them.
Quantiles interpolate linearly between order statistics, as numpy's default percentile
does, so a group's numbers equal the single-case functions' (tests check it).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from .noise import MIN_JUDGED, judge
from .stats import TUKEY_K, Z95, SampleStats, StdConvention, t95


@dataclass(kw_only=True)
class GroupStats:
    """Statistics of samples in groups, in microseconds; NaN for an empty group.

    Each statistic holds one value per group: an array indexed by group id where all groups
    are computed at once (`group_stats`: profiler kernels attributed to cases), a number where
    the record is one group's (`npuperf parse`: a kernel type and signature of a profile).
    The quantiles and the outlier count are None where the caller does not compute them.

    `std` is the standard deviation `std_convention` names, and each caller states which one
    it keeps: `npuperf parse` the population std of a profile's launches (what the database's
    Profiling Std holds), a case the sample std of its samples (what `SampleStats` and the
    confidence interval of the mean take).
    """

    std_convention: StdConvention
    count: np.ndarray | int
    mean: np.ndarray | float
    median: np.ndarray | float
    std: np.ndarray | float
    min: np.ndarray | float
    max: np.ndarray | float
    p90: np.ndarray | None = None
    q1: np.ndarray | None = None
    q3: np.ndarray | None = None
    outliers: np.ndarray | None = None
    # (group, values, sorted values, offsets) of `group_stats`: the precision of the same
    # samples reuses the sort (10^6 samples: a tenth of a second each).
    _sorted: tuple | None = field(default=None, repr=False, compare=False)

    def sample_stats(self, group: int) -> SampleStats | None:
        _require_sample_std(self, "SampleStats")
        if not self.count[group]:
            return None
        return SampleStats(
            samples=int(self.count[group]), mean=float(self.mean[group]),
            median=float(self.median[group]), std=float(self.std[group]),
            min=float(self.min[group]), max=float(self.max[group]), p90=float(self.p90[group]),
            q1=float(self.q1[group]), q3=float(self.q3[group]),
            outliers=int(self.outliers[group]))


def _require_sample_std(stats: GroupStats, use: str) -> None:
    # A population std read as a sample std would understate a case's spread and its interval.
    if stats.std_convention != StdConvention.SAMPLE:
        raise ValueError(f"{use} takes the sample std; these statistics hold the "
                         f"{StdConvention(stats.std_convention).name.lower()} std")


def _sorted_groups(group: np.ndarray, values: np.ndarray, groups: int
                   ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    order = np.lexsort((values, group))
    g, v = group[order], values[order]
    count = np.bincount(g, minlength=groups)
    offset = np.concatenate(([0], np.cumsum(count)[:-1]))
    return g, v, count, offset


def _quantile(v: np.ndarray, count: np.ndarray, offset: np.ndarray, q: float) -> np.ndarray:
    """numpy's linear-interpolation percentile of each group (NaN for empty groups)."""
    out = np.full(len(count), np.nan)
    has = count > 0
    pos = q * (count[has] - 1)
    lo = np.floor(pos).astype(np.int64)
    hi = np.minimum(lo + 1, count[has] - 1)
    frac = pos - lo
    below, above = v[offset[has] + lo], v[offset[has] + hi]
    out[has] = below + frac * (above - below)
    return out


def group_stats(group: np.ndarray, values: np.ndarray, groups: int, *,
                std: StdConvention = StdConvention.SAMPLE) -> GroupStats:
    """Statistics of `values` per `group` id in [0, groups), with the `std` named."""
    group = np.asarray(group, dtype=np.int64)
    values = np.asarray(values, dtype=np.float64)
    g, v, count, offset = _sorted_groups(group, values, groups)
    has = count > 0
    with np.errstate(invalid="ignore", divide="ignore"):
        mean = np.bincount(g, weights=v, minlength=groups) / count
        dev = v - mean[g]
        # Two-pass variance: stable for large values with a small spread.
        var = np.bincount(g, weights=dev * dev, minlength=groups) / (count - std)
    deviation = np.where(count > 1, np.sqrt(np.where(count > 1, var, 0.0)), 0.0)
    deviation[~has] = np.nan
    low = np.full(groups, np.nan)
    high = np.full(groups, np.nan)
    low[has] = v[offset[has]]
    high[has] = v[offset[has] + count[has] - 1]
    q1, median, q3 = (_quantile(v, count, offset, q) for q in (0.25, 0.5, 0.75))
    p90 = _quantile(v, count, offset, 0.9)
    spread = TUKEY_K * (q3 - q1)
    outside = (v < (q1 - spread)[g]) | (v > (q3 + spread)[g])
    outliers = np.bincount(g, weights=outside, minlength=groups).astype(np.int64)
    return GroupStats(std_convention=StdConvention(std), count=count, mean=mean, median=median,
                      std=deviation, min=low, max=high, p90=p90, q1=q1, q3=q3, outliers=outliers,
                      _sorted=(group, values, v, offset))


def group_precision(group: np.ndarray, values: np.ndarray, groups: int, stats: GroupStats,
                    statistic: str) -> np.ndarray:
    """Per group, `stats.relative_precision` of its samples (inf until it can be estimated)."""
    count = stats.count
    out = np.full(groups, math.inf)
    if statistic == "mean":
        _require_sample_std(stats, "the confidence interval of the mean")
        n = count.astype(np.float64)
        t = np.array([t95(int(k) - 1) for k in count])
        with np.errstate(invalid="ignore", divide="ignore"):
            half = t * stats.std / np.sqrt(n)
            ok = (count >= 2) & (stats.mean > 0)
            out[ok] = half[ok] / stats.mean[ok]
        return out
    group, values = np.asarray(group, np.int64), np.asarray(values, np.float64)
    done = stats._sorted
    if done is not None and done[0] is group and done[1] is values:
        v, offset = done[2], done[3]
    else:
        _, v, _, offset = _sorted_groups(group, values, groups)
    ok = (count >= 3) & (stats.median > 0)
    n = count[ok].astype(np.float64)
    half = Z95 * np.sqrt(n) / 2
    lo = np.maximum(np.floor(n / 2 - half), 0).astype(np.int64)
    hi = np.minimum(np.ceil(n / 2 + half), n - 1).astype(np.int64)
    width = (v[offset[ok] + hi] - v[offset[ok] + lo]) / 2
    out[ok] = width / stats.median[ok]
    return out


def noise_reasons(stats: GroupStats) -> dict[int, str]:
    """Groups whose samples are inconsistent with a quiet machine -> why (noise.py's rule)."""
    judged = np.flatnonzero((stats.count >= MIN_JUDGED) & (stats.median > 0))
    reasons: dict[int, str] = {}
    for group in judged.tolist():
        reason = judge(stats.min[group], stats.q1[group], stats.median[group], stats.q3[group],
                       stats.mean[group])
        if reason:
            reasons[group] = reason
    return reasons


def group_means(group: np.ndarray, matrix: np.ndarray, groups: int,
                rows: np.ndarray | None = None) -> np.ndarray:
    """Per group and column, the mean of the non-NaN values (NaN where a group has none);
    `rows`: the rows of `matrix` the groups are for (all when None). Column by column: a
    gathered copy of 10^6 rows x 25 counters would cost hundreds of MB, and a column of a
    Fortran-ordered matrix (the kernel table's) is contiguous."""
    out = np.full((groups, matrix.shape[1]), np.nan)
    group = np.asarray(group, np.int64)
    everyone = np.bincount(group, minlength=groups)
    for column in range(matrix.shape[1]):
        values = matrix[:, column] if rows is None else matrix[:, column][rows]
        present = ~np.isnan(values)
        if present.all():  # the usual case: no masking, the counts shared by all columns
            total, count = np.bincount(group, weights=values, minlength=groups), everyone
        elif present.any():
            total = np.bincount(group[present], weights=values[present], minlength=groups)
            count = np.bincount(group[present], minlength=groups)
        else:
            continue
        with np.errstate(invalid="ignore", divide="ignore"):
            out[:, column] = np.where(count > 0, total / count, np.nan)
    return out
