"""The run on pytest's terminal: each case's outcome word (`teststatus`: `no value`, and under
`-v` the value measured), and the progress line: cases done of those selected, the time so
far, and the time left at the rate so far, as pytest-xdist and tqdm users expect. Written by
the process that receives every result (the serial process, or the xdist controller), and
only in a session that runs longer than one interval: on a terminal every 10 s, in a log
(not a TTY) every 60 s, plain lines either way, so a CI log gets a line a minute, not one per
case. The throttle is db/progress.py's, as for every long job."""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest

from ..db.progress import Progress
from .route import carries, unpack
from .stash import roles

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


def teststatus(report: pytest.TestReport, config: pytest.Config):
    """A case that ended without a trusted value has an outcome of its own, `no value` (letter
    `n`), whatever the verbosity. `-v`: a measured case's line says its value (`PASSED
    312.5 us ±0.2 %`, `NO VALUE 1.2 ms (noisy)`, `FAILED 31.9 ms SLOWER 1.222x`). None leaves
    the line to pytest."""
    if report.when != "call" or hasattr(report, "wasxfail") or not carries(report):
        return None
    result = unpack(report, in_place=roles(config).owns)
    if result is None:
        return None
    from ..measure.result import NO_VALUE

    no_value = report.skipped and result.without_value
    if config.option.verbose <= 0 or result.value is None:
        return (NO_VALUE, "n", NO_VALUE.upper()) if no_value else None
    from ..measure.units import fmt_duration

    outcome = NO_VALUE if no_value else report.outcome
    word = f"{outcome.upper()} {fmt_duration(result.value)}"
    if result.precision is not None:
        word += f" ±{100 * result.precision:.1f} %"
    if result.status != "ok":
        word += f" ({result.status})"
    verdict = (result.regression or {}).get("verdict")
    ratio = (result.regression or {}).get("ratio")
    if verdict and verdict not in ("SAME", "NEW"):
        word += f" {verdict}" + (f" {ratio:.3f}x" if ratio else "")
    letter = {"passed": ".", "failed": "F", "skipped": "s", NO_VALUE: "n"}.get(outcome, "?")
    return outcome, letter, word
