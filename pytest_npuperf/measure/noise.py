"""Is a case's sample set what a quiet machine gives? If not, the case is `noisy`.

Repeating the same call on the same inputs does the same work, so on a quiet machine its
samples form one tight cluster just above the fastest of them, with a thin upper tail
(caches, clocks, the odd interrupt). Interference from other work (other processes, more
threads than cores, a second process on the device) shows up in one of three ways, each of
which makes the stored central value a property of the machine rather than of the kernel:

- the typical sample is far above the fastest (`median >= 1.5 x min`): most calls were
  slowed down, so the median measures the slow-down. Quiet repeats of a fixed computation
  stay within a few tens of percent of their minimum (2-core CPU at load 2.5: at most 1.29x
  over the 116 embedded cases; GPU replays: about 1.01x).
- the middle half of the samples is wide (`Q3 - Q1 >= 0.25 x median`): two regimes (e.g. a
  thread wake-up on some calls and not on others) straddle the median, which then depends on
  their mix, not on the kernel. Quiet CPU and GPU samples have an IQR of 1-10 % of the median.
- the tail is heavy (`mean >= 1.25 x median`): a share of calls much slower than the rest
  (a tenth of the calls 3.5x slower does it). This is what dragged stored means to 2.9x and 10x
  their medians on a busy machine; a quiet machine's tail moves the mean by a few percent.
  (Counting Tukey outliers does not serve here: at most a quarter of the samples can be above
  the upper fence, and when the samples are very tight the fences are too, so a 0.5 % clock
  step makes "outliers". They are counted and stored, not judged.)

Fewer than 10 samples are not judged (their quartiles are single samples). The thresholds are
deliberately loose: `noisy` must mean "do not trust this number", not "a CPU".
"""

from __future__ import annotations

import numpy as np

MIN_JUDGED = 10
MEDIAN_OVER_MIN = 1.5
IQR_OVER_MEDIAN = 0.25
MEAN_OVER_MEDIAN = 1.25


def noise_reason(samples: list[float] | np.ndarray) -> str | None:
    """Why these samples are inconsistent with a quiet machine; None when they are not."""
    values = np.asarray(samples, dtype=np.float64)
    if values.size < MIN_JUDGED:
        return None
    q1, median, q3 = (float(q) for q in np.percentile(values, (25, 50, 75)))
    return judge(float(values.min()), q1, median, q3, float(values.mean()))


def judge(low: float, q1: float, median: float, q3: float, mean: float) -> str | None:
    """The rule above, on the statistics of at least MIN_JUDGED samples."""
    if median <= 0:
        return None
    reasons = []
    if low > 0 and median >= MEDIAN_OVER_MIN * low:
        reasons.append(f"median {median / low:.2f}x its minimum")
    if q3 - q1 >= IQR_OVER_MEDIAN * median:
        reasons.append(f"interquartile range {100 * (q3 - q1) / median:.0f} % of the median")
    if mean >= MEAN_OVER_MEDIAN * median:
        reasons.append(f"heavy tail: mean {mean / median:.2f}x the median")
    return "; ".join(reasons) or None
