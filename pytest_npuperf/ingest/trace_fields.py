"""The fields of the trace events the reader uses, checked: what a profiler writes, or the
event is left out.

A damaged or hand-edited trace holds events whose times are not numbers, negative, NaN or
beyond any run, whose `args` is not an object, whose ids are not whole numbers. Summed as
they are, they give a 10 us kernel with a -5 us sibling 5 us and a summary of "150 %"; read
unchecked, they end the parse with a traceback. Each such event is left out and counted by
its reason (`BadEvent.reason`), and the parse says how many (ingest/trace_rows.py).
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Iterator
from typing import Any

from ..db.errors import printable

# Longer than any profiled run: a duration beyond it is a damaged field, not a kernel.
MAX_DURATION_US = 7 * 86400e6
MAX_TIMESTAMP_US = 1e20  # kineto: microseconds since the epoch (1.7e15 in 2025)
MAX_ID = (1 << 63) - 1  # the ids are kept as signed 64-bit integers
MAX_SHOWN_NAME = 120  # characters of an operator name shown in a summary line


class BadEvent(Exception):
    """An event left out; `reason` says why, in a few words shared by all events like it."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def number(value: Any, field: str) -> float:
    """A number as the profilers write it: JSON number, or its text (torch_npu's `ts`)."""
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        raise BadEvent(f"'{field}' not a number")
    try:
        result = float(value)
    except (ValueError, OverflowError):
        raise BadEvent(f"'{field}' not a number") from None
    if not math.isfinite(result):
        raise BadEvent(f"'{field}' NaN or infinite")
    return result


def timestamp(event: dict) -> float:
    if "ts" not in event:
        raise BadEvent("no 'ts'")
    value = number(event["ts"], "ts")
    if abs(value) > MAX_TIMESTAMP_US:
        raise BadEvent("'ts' beyond any clock")
    return value


def duration(event: dict) -> float:
    """`dur` in us (0 when absent): never negative, NaN or longer than a week."""
    value = number(event.get("dur", 0.0), "dur")
    if value < 0:
        raise BadEvent("negative 'dur'")
    if value > MAX_DURATION_US:
        raise BadEvent("'dur' longer than a week")
    return value


def identifier(value: Any, field: str) -> int:
    """An id (External id, correlation) as a whole number >= 0; -1 when absent."""
    if value is None:
        return -1
    if isinstance(value, str) and value.strip().isdigit():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_ID:
        raise BadEvent(f"'{field}' not a whole number")
    return value


def args(event: dict) -> dict:
    value = event.get("args")
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise BadEvent("'args' not an object")
    return value


def place(event: dict) -> tuple:
    """(pid, tid): numbers or names, as profilers write them."""
    pid, tid = event.get("pid"), event.get("tid")
    for field, value in (("pid", pid), ("tid", tid)):
        if not (value is None or isinstance(value, int | str)) or isinstance(value, bool):
            raise BadEvent(f"'{field}' not a number or name")
    return pid, tid


def flow_id(event: dict) -> Any:
    value = event.get("id")
    if not (value is None or isinstance(value, int | str)) or isinstance(value, bool):
        raise BadEvent("flow 'id' not a number or name")
    return value


def checked_events(events: Iterable[dict], left_out: Counter) -> Iterator[dict]:
    """The events whose fields the reader uses are what profilers write (complete events `X`,
    metadata `M`, flow ends `s`/`f`); the others are counted in `left_out` by reason."""
    for event in events:
        try:
            _check(event)
        except BadEvent as bad:
            left_out[bad.reason] += 1
            continue
        yield event


def _check(event: dict) -> None:
    phase = event["ph"]
    if phase not in ("X", "M", "s", "f"):
        return
    fields = args(event)
    place(event)
    if phase == "M":
        return
    timestamp(event)
    if phase == "X":
        duration(event)
        identifier(fields.get("External id"), "External id")
        identifier(fields.get("correlation"), "correlation")
    else:
        flow_id(event)


def shown(name: object, limit: int = MAX_SHOWN_NAME) -> str:
    """An operator name as a summary line shows it: control characters escaped (a trace can
    hold terminal escapes), cut to `limit` characters (and 5 MB names)."""
    text = str(name)
    if len(text) <= limit:
        return printable(text)
    return f"{printable(text[:limit])}... ({len(text):,} characters)"
