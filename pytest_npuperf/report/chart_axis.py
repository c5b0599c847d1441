"""One axis of a chart (report/charts.py): its scale (linear, or log base 2 or 10), the data
limits with a margin, the ticks and their plain labels ("0.5", "1e+04"), and the mapping from
data to drawing units.

Pure arithmetic, no drawing: the chart module asks an axis where a value goes.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

MARGIN = 0.05  # of the data span each side, in the scale's own space (the usual default)
CHAR_WIDTH = 0.56  # a sans-serif character's mean advance, in ems: labels are placed unmeasured
_NICE_STEPS = (1.0, 2.0, 2.5, 5.0, 10.0)


def text_width(text: str, font_size: float) -> float:
    return len(text) * font_size * CHAR_WIDTH


def plain(value: float) -> str:
    """A tick label without float noise: 0.30000000000000004 -> "0.3", 1e4 -> "10000",
    2**21 -> "2.09715e+06" (six significant digits, as `:g` writes)."""
    return f"{float(f'{value:.10g}'):g}"


@dataclass(frozen=True)
class Scale:
    """Linear (`base` None) or logarithmic."""

    base: float | None = None

    @property
    def log(self) -> bool:
        return self.base is not None

    def valid(self, value: float) -> bool:
        """Whether `value` can be drawn: finite, and positive on a log scale."""
        return math.isfinite(value) and (value > 0 or not self.log)

    def forward(self, value: float) -> float:
        return math.log(value, self.base) if self.base else value

    def inverse(self, value: float) -> float:
        return self.base ** value if self.base else value


def limits(scale: Scale, values: Iterable[float], *, floor: float | None = None
           ) -> tuple[float, float]:
    """Data limits around `values` (already valid for `scale`) with MARGIN on each side;
    `floor`: a value the lower limit sticks to when the data reach it (a histogram's zero).
    No values: 0..1 (1..10 on a log scale); one distinct value: a span around it."""
    points = [scale.forward(v) for v in values]
    if not points:
        return (1.0, 10.0) if scale.log else (0.0, 1.0)
    lo, hi = min(points), max(points)
    if hi - lo <= 1e-12 * max(abs(lo), abs(hi), 1.0):
        pad = 1.0 if scale.log else max(abs(lo) * 0.1, 1.0 if lo == 0 else 0.0)
        lo, hi = lo - pad, hi + pad
    span = hi - lo
    low, high = lo - span * MARGIN, hi + span * MARGIN
    if floor is not None and scale.forward(floor) >= low and lo >= scale.forward(floor):
        low = scale.forward(floor)
    return scale.inverse(low), scale.inverse(high)


def nice_ticks(lo: float, hi: float, count: int) -> list[float]:
    """About `count` round values (1, 2, 2.5, 5 x 10^k apart) in [lo, hi] (up to a third more:
    0..47 in five steps is 0, 10, .. 40, not 0, 20, 40)."""
    if not hi > lo:
        return [lo]
    raw = (hi - lo) / max(count, 1)
    magnitude = 10.0 ** math.floor(math.log10(raw))
    step = next(s for s in _NICE_STEPS if s * magnitude >= raw * 0.75) * magnitude
    first, last = math.ceil(lo / step - 1e-9), math.floor(hi / step + 1e-9)
    return [float(f"{k * step:.12g}") for k in range(first, last + 1)]


def _log_ticks(base: float, lo: float, hi: float, count: int) -> list[float]:
    """Powers of `base` in [lo, hi], every n-th when there are too many; with fewer than three,
    2x and 5x a decade too (base 10); still fewer than three: round linear values."""
    first, last = math.ceil(math.log(lo, base) - 1e-9), math.floor(math.log(hi, base) + 1e-9)
    powers = list(range(first, last + 1))
    stride = max(1, math.ceil(len(powers) / max(count, 1)))
    ticks = [base ** k for k in powers if k % stride == 0]
    if len(ticks) < 3 and base == 10:
        ticks = sorted(t for k in range(first - 1, last + 1) for t in
                       (10.0 ** k, 2 * 10.0 ** k, 5 * 10.0 ** k) if lo <= t <= hi)
        if len(ticks) > count:
            ticks = [t for t in ticks if f"{t:e}"[0] in "15"]
    if len(ticks) < 3:
        ticks = [t for t in nice_ticks(lo, hi, min(count, 5)) if t > 0]
    return ticks


@dataclass(frozen=True)
class Axis:
    """`scale` over the data limits [lo, hi], drawn from `start` to `end` (drawing units;
    end < start for a vertical axis, whose units grow downwards)."""

    scale: Scale
    lo: float
    hi: float
    start: float
    end: float

    def __post_init__(self) -> None:
        # Thousands of points go through to_px: the transform's constants once.
        low = self.scale.forward(self.lo)
        factor = (self.end - self.start) / (self.scale.forward(self.hi) - low)
        object.__setattr__(self, "_offset", self.start - low * factor)
        object.__setattr__(self, "_factor", factor)

    def to_px(self, value: float) -> float:
        base = self.scale.base
        return self._offset + (math.log(value, base) if base else value) * self._factor

    def ticks(self, font_size: float, horizontal: bool, whole: bool = False
              ) -> list[tuple[float, str]]:
        """(value, label) pairs spaced so that the labels do not overlap; `whole`: only whole
        numbers (counts)."""
        length = abs(self.end - self.start)
        count = max(2, int(length // (font_size * 2.2 if not horizontal else font_size * 5)))
        for _ in range(8):  # fewer ticks until the widest labels fit side by side
            values = (_log_ticks(self.scale.base, self.lo, self.hi, count) if self.scale.log
                      else nice_ticks(self.lo, self.hi, count))
            if whole and sum(v == int(v) for v in values) >= 2:
                values = [v for v in values if v == int(v)]
            labelled = [(v, plain(v)) for v in values]
            if not horizontal or count <= 2:
                return labelled
            widest = max((text_width(t, font_size) for _, t in labelled), default=0.0)
            if (widest + font_size) * len(labelled) <= length:
                return labelled
            count -= 1
        return labelled
