"""A second profile of a row pooled with the first: `npuperf parse` of run 2 after run 1 gives
the statistics of both runs' kernels, as parsing them together would.

- Count: summed. Mean: weighted by the counts. Std (the population std, as parse writes it):
  pooled from each profile's mean and std, exact. Min, max: the smaller, the larger.
  Counters (`Profiling Average <m>`, means): weighted by the counts.
- Median: two medians do not give the median of the union (it lies between them, nowhere
  known). The median of the profile with more kernels is kept, and `Profiling Median Count`
  says over how many kernels it was taken (fewer than `Profiling Count`); empty when it is
  over all of them.
- Not pooled, replaced as before, with a note saying why: a row whose earlier statistics lack
  a count, mean, std, min or max (older databases, other tools); a profile whose source is
  one the row already counts (the same profile parsed again would count its kernels twice);
  one taken under other conditions (device, threads, stack, another set of counters: another
  CANN) or of another trust (an untrusted profile never replaces trusted values at all:
  parse.py keeps those).
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence

from ..db.columns import (
    PROFILING_AVERAGE_DURATION,
    PROFILING_COUNT,
    PROFILING_DEVICE,
    PROFILING_MAX_DURATION,
    PROFILING_MEDIAN_COUNT,
    PROFILING_MEDIAN_DURATION,
    PROFILING_MIN_DURATION,
    PROFILING_SOURCE,
    PROFILING_STACK,
    PROFILING_STD_DURATION,
    PROFILING_THREADS,
    PROFILING_TRUST,
    parse_float,
    trusted_profile,
)
from ..db.signature import Signature
from ..db.upsert import RowUpdate, format_number

MAX_SOURCES = 3  # sources a `Profiling Source` cell names; "(+N more)" counts the rest
_MORE = re.compile(r"\s*\(\+(\d+) more\)\s*$")
_CONDITIONS = (PROFILING_DEVICE, PROFILING_THREADS, PROFILING_STACK)


def sources_text(sources: Sequence[str]) -> str:
    shown = ";".join(sources[:MAX_SOURCES])
    more = len(sources) - MAX_SOURCES
    return f"{shown} (+{more} more)" if more > 0 else shown


def _sources(text: str) -> tuple[list[str], int]:
    """The sources a cell names, and how many more it counts without naming them."""
    text = str(text or "")
    more = _MORE.search(text)
    hidden = int(more.group(1)) if more else 0
    shown = text[:more.start()] if more else text
    return [s for s in (p.strip() for p in shown.split(";")) if s], hidden


class _Profile:
    """The statistics of one profile of a row (from its cells)."""

    def __init__(self, cells: Mapping[str, object]) -> None:
        count = parse_float(str(cells.get(PROFILING_COUNT) or ""))
        self.count = int(count) if count is not None and count >= 1 and count == int(count) \
            else 0
        self.mean = _number(cells.get(PROFILING_AVERAGE_DURATION))
        self.std = _number(cells.get(PROFILING_STD_DURATION), zero=True)
        self.min = _number(cells.get(PROFILING_MIN_DURATION))
        self.max = _number(cells.get(PROFILING_MAX_DURATION))
        self.median = _number(cells.get(PROFILING_MEDIAN_DURATION))
        median_count = _number(cells.get(PROFILING_MEDIAN_COUNT))
        self.median_count = int(median_count) if median_count else self.count

    @property
    def complete(self) -> bool:
        return bool(self.count) and None not in (self.mean, self.std, self.min, self.max)


def _number(cell: object, zero: bool = False) -> float | None:
    value = parse_float(str(cell if cell is not None else ""))
    if value is None or not math.isfinite(value) or value < 0 or (value == 0 and not zero):
        return None
    return value


def pooled_values(old: Mapping[str, object], new: Mapping[str, str],
                  counters: Sequence[str]) -> dict[str, str]:
    """The cells of `new` (a parse's values) pooled with a row's `old` cells (see the module's
    docstring; both complete)."""
    a, b = _Profile(old), _Profile(new)
    total = a.count + b.count
    mean = (a.count * a.mean + b.count * b.mean) / total
    variance = (a.count * (a.std ** 2 + (a.mean - mean) ** 2)
                + b.count * (b.std ** 2 + (b.mean - mean) ** 2)) / total
    kept = a if a.median_count > b.median_count else b
    values = {**new,
              PROFILING_COUNT: str(total),
              PROFILING_AVERAGE_DURATION: format_number(mean),
              PROFILING_STD_DURATION: format_number(math.sqrt(max(variance, 0.0))),
              PROFILING_MIN_DURATION: format_number(min(a.min, b.min)),
              PROFILING_MAX_DURATION: format_number(max(a.max, b.max)),
              PROFILING_MEDIAN_DURATION: format_number(kept.median),
              PROFILING_MEDIAN_COUNT: str(kept.median_count),
              PROFILING_SOURCE: _joined_sources(old.get(PROFILING_SOURCE), new.get(
                  PROFILING_SOURCE))}
    for column in counters:
        x, y = _number(old.get(column), zero=True), _number(new.get(column), zero=True)
        values[column] = format_number((a.count * x + b.count * y) / total) \
            if x is not None and y is not None else ""
    return values


def _joined_sources(old: object, new: object) -> str:
    first, first_hidden = _sources(str(old or ""))
    second, second_hidden = _sources(str(new or ""))
    names = list(dict.fromkeys([*first, *second]))
    text = sources_text(names)
    hidden = first_hidden + second_hidden
    if hidden:
        shown, more = _sources(text)
        text = f"{';'.join(shown)} (+{more + hidden} more)"
    return text


def _why_not(old: Mapping[str, object], new: Mapping[str, str], counters: Sequence[str]
             ) -> str:
    """Why the row's earlier statistics cannot be pooled with `new` ("" when they can)."""
    if not _Profile(old).complete:
        return "they lack a count, mean, std, min or max"
    if not _Profile(new).complete:
        return "this profile's lack a count, mean, std, min or max"
    earlier, _ = _sources(str(old.get(PROFILING_SOURCE) or ""))
    now, _ = _sources(str(new.get(PROFILING_SOURCE) or ""))
    if set(earlier) & set(now):
        return "they count a source of this profile already (parsed again)"
    for column in _CONDITIONS:
        before, after = str(old.get(column) or "").strip(), str(new.get(column) or "").strip()
        if before and after and before != after:
            return f"taken under another {column.removeprefix('Profiling ').lower()}"
    if trusted_profile(old.get(PROFILING_TRUST)) != trusted_profile(new.get(PROFILING_TRUST)):
        return "of another trust"
    if {c for c in counters if _number(old.get(c), zero=True) is not None} != \
            {c for c in counters if _number(new.get(c), zero=True) is not None}:
        return "another set of counters (another CANN version)"
    return ""


def _counters(values: Mapping[str, str]) -> list[str]:
    return [c for c in values
            if c.startswith("Profiling Average ") and c != PROFILING_AVERAGE_DURATION]


def pool_profiles(name: str, frame, positions: Mapping[Signature, list[int]],
                  updates: dict[Signature, RowUpdate]) -> list[str]:
    """Pool each update with the profiling statistics its row holds already, in place; the
    notes say how many rows were pooled, and which were replaced and why."""
    columns = list(frame.columns)
    if PROFILING_AVERAGE_DURATION not in columns:
        return []
    counters = _counters(dict.fromkeys(columns))
    wanted = [c for c in (PROFILING_AVERAGE_DURATION, PROFILING_MEDIAN_DURATION,
                          PROFILING_STD_DURATION, PROFILING_COUNT, PROFILING_MIN_DURATION,
                          PROFILING_MAX_DURATION, PROFILING_MEDIAN_COUNT, PROFILING_SOURCE,
                          PROFILING_TRUST, *_CONDITIONS, *counters) if c in columns]
    cells = {c: frame[c].tolist() for c in wanted}
    pooled = 0
    replaced: dict[str, set[str]] = {}  # why -> the earlier sources
    rows: dict[str, int] = {}
    for sig, update in updates.items():
        at = positions.get(sig, ())
        if not at or not str(cells[PROFILING_AVERAGE_DURATION][at[0]]).strip():
            continue
        old = {c: cells[c][at[0]] for c in wanted}
        why = _why_not(old, update.values, sorted({*counters, *_counters(update.values)}))
        if why:
            replaced.setdefault(why, set()).update(
                _sources(str(old.get(PROFILING_SOURCE) or ""))[0])
            rows[why] = rows.get(why, 0) + 1
            if PROFILING_MEDIAN_COUNT in columns:  # the new median is over all its kernels
                update = RowUpdate(update.identity, {**update.values, PROFILING_MEDIAN_COUNT: ""},
                                   update.fill_empty)
                updates[sig] = update
            continue
        updates[sig] = RowUpdate(update.identity, pooled_values(old, update.values, counters),
                                 update.fill_empty)
        pooled += 1
    notes = []
    if pooled:
        notes.append(f"{name}: {pooled} row(s) held an earlier profile's statistics: pooled "
                     f"with this one's (count, mean, std, min, max; the median is the larger "
                     f"profile's, {PROFILING_MEDIAN_COUNT} says over how many kernels)")
    for why, earlier in sorted(replaced.items()):
        shown = sources_text(sorted(earlier))
        notes.append(f"{name}: {rows[why]} row(s) held profiling statistics of an earlier parse"
                     f"{f' ({shown})' if shown else ''}: replaced by this profile's, not "
                     f"pooled: {why}")
    return notes
