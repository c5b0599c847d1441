"""A session's overhead: everything it spends outside the timed calls of its cases.

One definition, which the terminal summary, the run JSON (`totals.overhead_s`,
`totals.overhead_parts_s`) and the benchmarks all use: the session's wall time, from pytest's
start (a command's start for `npuperf backfill`) to its reports, once per measuring process,
less the time inside the timed calls. Warm-up calls, the host's reference loop, building
inputs, verification, pytest's own work between cases, the database write, the history, the
verdicts, the figures and the reports are all overhead; nothing is left out because it is
"fixed" or "not the harness's".

The breakdown names where it went. Parts measured inside a case travel with its result
(`CaseResult.overhead_s`, summed over the cases); the session's own parts are measured on the
owner's wall clock (`SessionInfo.parts`), each counted once per measuring process (while the
owner starts or finishes, the workers' capacity goes unused too). What no part measured is
`other`, so the parts always add up to the total.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager

DEFINITION = ("everything the session spent outside the timed calls of its cases: its wall "
              "time (from pytest's start, or the command's, to its reports) x measuring "
              "processes, less the time inside timed calls; warm-up calls, reference loops, "
              "inputs, verification, pytest's work between cases, the database write, history, "
              "verdicts, figures and reports included")

# Session parts (the owner's wall clock), in the order a session meets them.
STARTUP = "start-up"  # pytest start -> the first case: interpreter, imports, collection, device
READ = "profile read"  # npuperf backfill: kernel tables, markers, hand-off, the database
ATTRIBUTION = "attribution"  # kernels to cases (msprof, torch_npu)
BETWEEN = "between cases"  # pytest's protocol around each case, the journal, progress lines
AFTER = "after the cases"  # the last case -> the end of the run: profiler output, hooks
DEMO = "demo model profile"
VERDICTS = "verdicts"  # cases judged at the end (msprof parent, backfill)
WRITE = "database write"
HISTORY = "history"
FIGURES = "figures"
REPORTS = "reports"
# Parts measured inside each case (CaseResult.overhead_s).
INPUTS = "inputs"
VERIFICATION = "verification"
WARMUP = "warm-up calls"
CAPTURE = "graph capture"  # the graph method: capturing and sizing the batch it replays
REFERENCES = "references"  # the CPU host's reference loop around a case
CASES_REST = "rest of the cases"  # sampling between batches, bound and noise checks, freeing
OTHER = "other"

CASE_PARTS = (INPUTS, VERIFICATION, WARMUP, CAPTURE, REFERENCES)
ORDER = (STARTUP, READ, ATTRIBUTION, *CASE_PARTS, CASES_REST, BETWEEN, AFTER, DEMO, VERDICTS,
         WRITE, HISTORY, FIGURES, REPORTS, OTHER)


class PartClock:
    """Seconds per named part, added up over every time the part ran."""

    def __init__(self) -> None:
        self.parts: dict[str, float] = {}

    def add(self, name: str, seconds: float) -> None:
        if seconds:
            self.parts[name] = self.parts.get(name, 0.0) + seconds

    @contextmanager
    def part(self, name: str) -> Iterator[None]:
        """Time the block as `name` (also when it raises: the time was spent)."""
        start = time.perf_counter()
        try:
            yield
        finally:
            self.add(name, time.perf_counter() - start)


def breakdown(total_s: float, case_parts: Mapping[str, float], cases_beyond_calls_s: float,
              session_parts: Mapping[str, float], workers: int = 1) -> dict[str, float]:
    """Every part of `total_s` in ORDER (unknown names after them), adding up to it:
    `case_parts` summed over the cases, the rest of the cases' time beyond their calls
    (`cases_beyond_calls_s` less those parts), the session's parts x `workers`, and `other`
    for what none of them measured (negative: parts overlapped, e.g. a backfill's reads)."""
    parts = {name: float(seconds) for name, seconds in case_parts.items() if seconds}
    parts[CASES_REST] = cases_beyond_calls_s - sum(parts.values())
    for name, seconds in session_parts.items():
        if seconds:
            parts[name] = parts.get(name, 0.0) + seconds * max(1, workers)
    parts[OTHER] = total_s - sum(parts.values())
    known = [name for name in ORDER if name in parts]
    return {name: parts[name] for name in known + sorted(set(parts) - set(known))
            if name in (OTHER,) or abs(parts[name]) > 0}
