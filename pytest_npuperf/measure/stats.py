"""Sample statistics and the confidence interval that decides when sampling can stop."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from enum import IntEnum

import numpy as np

Z95 = 1.959963984540054
# Two-sided 95 % quantiles of Student's t for 1..29 degrees of freedom (beyond: the normal's).
_T95 = (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179,
        2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064,
        2.060, 2.056, 2.052, 2.048, 2.045)


def t95(degrees_of_freedom: int) -> float:
    if degrees_of_freedom < 1:
        return math.inf
    return _T95[degrees_of_freedom - 1] if degrees_of_freedom <= len(_T95) else Z95


class StdConvention(IntEnum):
    """Which standard deviation a statistics record holds; the value is the `ddof` of numpy and
    pandas (the squared deviations are divided by n - ddof).

    POPULATION (n): the spread of exactly the launches a profile holds, what the reference
    parser wrote as a row's `Profiling Std Duration(us)`. SAMPLE (n - 1): the estimate of the
    kernel's spread from a case's samples, what the confidence interval of the mean assumes
    (`SampleStats`, the `MicroBench Std Duration(us)`). A single sample's std is 0 in both.
    """

    POPULATION = 0
    SAMPLE = 1


@dataclass(frozen=True, slots=True)
class SampleStats:
    """Statistics of one case's samples, in microseconds; `std` is the sample std
    (StdConvention.SAMPLE)."""

    samples: int
    mean: float
    median: float
    std: float
    min: float
    max: float
    p90: float
    q1: float = math.nan
    q3: float = math.nan
    outliers: int = 0  # samples beyond the Tukey fences: counted, still in mean and std

    def to_dict(self) -> dict[str, float]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, float]) -> SampleStats:
        if data.keys() <= cls.__dataclass_fields__.keys():
            return cls(**data)  # type: ignore[arg-type]
        return cls(**{k: data[k] for k in cls.__dataclass_fields__  # type: ignore[arg-type]
                      if k in data})


TUKEY_K = 1.5


def tukey_outliers(values: np.ndarray, q1: float, q3: float) -> int:
    """Samples outside [Q1 - 1.5 IQR, Q3 + 1.5 IQR] (Tukey's fences)."""
    spread = TUKEY_K * (q3 - q1)
    return int(np.count_nonzero((values < q1 - spread) | (values > q3 + spread)))


def summarize(samples: list[float] | np.ndarray) -> SampleStats:
    values = np.asarray(samples, dtype=np.float64)
    if values.size == 0:
        raise ValueError("no samples")
    q1, median, q3, p90 = (float(q) for q in np.percentile(values, (25, 50, 75, 90)))
    return SampleStats(
        samples=int(values.size), mean=float(values.mean()), median=median,
        std=float(values.std(ddof=StdConvention.SAMPLE)) if values.size > 1 else 0.0,
        min=float(values.min()), max=float(values.max()), p90=p90, q1=q1, q3=q3,
        outliers=tukey_outliers(values, q1, q3))


def median_ci_halfwidth(samples: list[float] | np.ndarray) -> float:
    """95 % half-width of the median, distribution-free (binomial order statistics).

    The interval runs between the order statistics at ranks n/2 -+ 1.96 sqrt(n)/2; no
    normality is assumed, which matters for latency samples (skewed, with outliers).
    """
    values = np.sort(np.asarray(samples, dtype=np.float64))
    n = values.size
    if n < 3:
        return math.inf
    half = Z95 * math.sqrt(n) / 2
    lo = max(math.floor(n / 2 - half), 0)
    hi = min(math.ceil(n / 2 + half), n - 1)
    return float(values[hi] - values[lo]) / 2


def mean_ci_halfwidth(samples: list[float] | np.ndarray) -> float:
    """95 % half-width of the mean (Student's t: few samples get a wider interval)."""
    values = np.asarray(samples, dtype=np.float64)
    n = values.size
    if n < 2:
        return math.inf
    return t95(n - 1) * float(values.std(ddof=StdConvention.SAMPLE)) / math.sqrt(n)


def relative_precision(samples: list[float] | np.ndarray, statistic: str = "median") -> float:
    """CI half-width divided by the statistic; inf until it can be estimated."""
    values = np.asarray(samples, dtype=np.float64)
    if values.size == 0:
        return math.inf
    if statistic == "mean":
        center, half = float(values.mean()), mean_ci_halfwidth(values)
    else:
        center, half = float(np.median(values)), median_ci_halfwidth(values)
    return half / center if center > 0 else math.inf


def sorted_median_precision(ordered: list[float]) -> float:
    """`relative_precision(ordered, "median")` of samples sorted already, in plain Python: the
    sampler asks it after every batch, and numpy's conversions and sorts cost milliseconds
    per case there."""
    n = len(ordered)
    if n == 0:
        return math.inf
    mid = n // 2
    center = ordered[mid] if n % 2 else (ordered[mid - 1] + ordered[mid]) / 2
    if n < 3:
        half = math.inf
    else:
        width = Z95 * math.sqrt(n) / 2
        low = max(math.floor(n / 2 - width), 0)
        high = min(math.ceil(n / 2 + width), n - 1)
        half = (ordered[high] - ordered[low]) / 2
    return half / center if center > 0 else math.inf
