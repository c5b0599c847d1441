"""A progress line for long sessions: cases done of those selected, the time so far, and the
time left at the rate so far, as pytest-xdist and tqdm users expect. Written by the process
that receives every result (the serial process, or the xdist controller), and only in a
session that runs longer than one interval: on a terminal every 10 s, in a log (not a TTY)
every 60 s, plain lines either way, so a CI log gets a line a minute, not one per case."""

from __future__ import annotations

import time
from collections.abc import Callable

TTY_INTERVAL_S, LOG_INTERVAL_S = 10.0, 60.0


def clock_text(seconds: float) -> str:
    seconds = round(max(seconds, 0.0))
    hours, rest = divmod(seconds, 3600)
    return f"{hours}:{rest // 60:02d}:{rest % 60:02d}" if hours else f"{rest // 60}:{rest % 60:02d}"


class ProgressLine:
    """`done(n)` after each result; writes a line through `write` once an interval passed."""

    def __init__(self, total: int | None, write: Callable[[str], None], *, interval_s: float,
                 now: Callable[[], float] = time.monotonic) -> None:
        self.total = total
        self.write = write
        self.interval_s = interval_s
        self.now = now
        self.started = now()
        self.last = self.started

    def done(self, count: int) -> str | None:
        """The line written for `count` cases done (None when it was not time for one)."""
        now = self.now()
        if self.interval_s <= 0 or now - self.last < self.interval_s:
            return None
        self.last = now
        elapsed = now - self.started
        per_case = elapsed / count if count else 0.0
        text = f"npuperf: {count}"
        if self.total:
            left = max(self.total - count, 0)
            text += (f"/{self.total} cases ({100 * count / self.total:.0f} %), "
                     f"{clock_text(elapsed)} elapsed, about {clock_text(left * per_case)} left")
        else:
            text += f" cases, {clock_text(elapsed)} elapsed"
        text += f" ({per_case:.2f} s per case)"
        self.write(text)
        return text
