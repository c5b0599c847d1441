"""Progress lines for long work, on stderr, throttled.

A line at most every `interval` seconds, so a million-row parse says where it is without
flooding a CI log; nothing at all for work that finishes quickly.
"""

from __future__ import annotations

import sys
import time
from typing import TextIO


class Progress:
    def __init__(self, label: str, total: float | None = None, unit: str = "",
                 stream: TextIO | None = None, interval: float = 2.0,
                 enabled: bool = True) -> None:
        self.label = label
        self.total = total
        self.unit = unit
        self.stream = stream if stream is not None else sys.stderr
        self.interval = interval
        self.enabled = enabled
        self.start = time.monotonic()
        self._last = self.start
        self.done = 0.0
        self.printed = False

    def update(self, done: float, detail: str = "") -> None:
        self.done = done
        now = time.monotonic()
        if not self.enabled or now - self._last < self.interval:
            return
        self._last = now
        self.printed = True
        elapsed = now - self.start
        if self.total:
            share = min(done / self.total, 1.0)
            eta = elapsed / share - elapsed if share > 0 else 0.0
            text = f"{self.label}: {share:5.1%} ({elapsed:.0f}s elapsed, ~{eta:.0f}s left)"
        else:
            text = f"{self.label}: {done:,.0f}{self.unit} ({elapsed:.0f}s elapsed)"
        if detail:
            text += f" {detail}"
        print(text, file=self.stream, flush=True)

    def finish(self, detail: str = "") -> None:
        if self.enabled and self.printed:
            elapsed = time.monotonic() - self.start
            print(f"{self.label}: done in {elapsed:.1f}s {detail}".rstrip(), file=self.stream,
                  flush=True)
