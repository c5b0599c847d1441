"""Durations as people read them: in the unit that fits (ns, us, ms, s), 4 significant
digits, never an exponent. Every terminal view of values (the session's results table, the
`-v` lines, `npuperf history`, the trend page) prints them the same way."""

from __future__ import annotations


def fmt_duration(us: float | None) -> str:
    """A duration in the unit that reads best, 4 significant digits, never an exponent:
    `26.21 ms` for 26210 us, `312.5 us`, `850 ns`."""
    if us is None or us != us:
        return "-"
    for scale, unit in ((1e6, "s"), (1e3, "ms"), (1.0, "us")):
        if abs(us) >= scale:
            return f"{_plain(us / scale)} {unit}"
    return f"{_plain(us * 1e3)} ns"


def _plain(value: float) -> str:
    """4 significant digits without an exponent (1000 stays 1000, 0.0123 stays 0.0123)."""
    digits = max(0, 3 - int(f"{abs(value):e}".split("e")[1])) if value else 0
    return f"{value:.{min(digits, 6)}f}"
