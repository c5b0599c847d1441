"""Progress lines for long work, throttled: the one progress line of the project.

A line at most every `interval` seconds, so a million-row parse or a run of 10^5 cases says
where it is without flooding a CI log; nothing at all for work that finishes quickly. Lines
go to stderr unless the caller hands its own writer (the run's cases write on pytest's
terminal), worded by `line` (the default: the share done, or the count, and the time).
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from typing import TextIO


class Progress:
    def __init__(self, label: str, total: float | None = None, unit: str = "",
                 stream: TextIO | None = None, interval: float = 2.0,
                 enabled: bool = True, *, write: Callable[[str], None] | None = None,
                 line: Callable[[Progress, float], str] | None = None,
                 now: Callable[[], float] = time.monotonic) -> None:
        self.label = label
        self.total = total
        self.unit = unit
        self.stream = stream if stream is not None else sys.stderr
        self.interval = interval
        self.enabled = enabled
        self.write = write or self._print
        self.line = line or _share_line
        self.now = now
        self.start = now()
        self._last = self.start
        self.done = 0.0
        self.printed = False

    def _print(self, text: str) -> None:
        print(text, file=self.stream, flush=True)

    def update(self, done: float, detail: str = "") -> str | None:
        """The line written for `done` (None when it was not time for one)."""
        self.done = done
        now = self.now()
        if not self.enabled or now - self._last < self.interval:
            return None
        self._last = now
        self.printed = True
        text = self.line(self, now - self.start)
        if detail:
            text += f" {detail}"
        self.write(text)
        return text

    def finish(self, detail: str = "") -> None:
        if self.enabled and self.printed:
            elapsed = self.now() - self.start
            self.write(f"{self.label}: done in {elapsed:.1f}s {detail}".rstrip())


def _share_line(progress: Progress, elapsed: float) -> str:
    if progress.total:
        share = min(progress.done / progress.total, 1.0)
        eta = elapsed / share - elapsed if share > 0 else 0.0
        return f"{progress.label}: {share:5.1%} ({elapsed:.0f}s elapsed, ~{eta:.0f}s left)"
    return f"{progress.label}: {progress.done:,.0f}{progress.unit} ({elapsed:.0f}s elapsed)"
