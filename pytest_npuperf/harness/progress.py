"""The run's progress line: cases done of those selected, the time so far, and the time left
at the rate so far, as pytest-xdist and tqdm users expect. Written by the process that
receives every result (the serial process, or the xdist controller), and only in a session
that runs longer than one interval: on a terminal every 10 s, in a log (not a TTY) every
60 s, plain lines either way, so a CI log gets a line a minute, not one per case. The
throttle is db/progress.py's, as for every long job."""

from __future__ import annotations

import time
from collections.abc import Callable

from ..db.progress import Progress

TTY_INTERVAL_S, LOG_INTERVAL_S = 10.0, 60.0


def clock_text(seconds: float) -> str:
    seconds = round(max(seconds, 0.0))
    hours, rest = divmod(seconds, 3600)
    return f"{hours}:{rest // 60:02d}:{rest % 60:02d}" if hours else f"{rest // 60}:{rest % 60:02d}"


def case_progress(total: int | None, write: Callable[[str], None], *, interval_s: float,
                  now: Callable[[], float] = time.monotonic) -> Progress:
    """`update(n)` after each result, n being the cases done."""
    return Progress("npuperf", total, interval=interval_s, write=write, line=_cases_line,
                    now=now)


def _cases_line(progress: Progress, elapsed: float) -> str:
    count, total = int(progress.done), progress.total
    per_case = elapsed / count if count else 0.0
    text = f"npuperf: {count}"
    if total:
        left = max(total - count, 0)
        text += (f"/{total} cases ({100 * count / total:.0f} %), "
                 f"{clock_text(elapsed)} elapsed, about {clock_text(left * per_case)} left")
    else:
        text += f" cases, {clock_text(elapsed)} elapsed"
    return text + f" ({per_case:.2f} s per case)"
