"""How far a case moves from one session to the next on its own: its session-to-session spread,
taken from the history.

Samples within one session do not say it. They share the session's state (the memory
bandwidth co-tenants leave, where the allocator put the weights, which cores the threads got),
so two sessions of the same build differ "significantly" (p = 1e-58) by 5 to 65 % on a shared
host while each session's samples stay tight. What an unchanged build does from night to
night is in the history: the medians of the case's recent good runs. A change is SLOWER or
FASTER only beyond SPREAD_FACTOR times their spread (history/compare.py), so a case that moved
1.5x between quiet nights needs more than that to fail, and one that held within 1 % fails on
a few percent beyond the minimum effect.

- Good runs: the case's newest SPREAD_RUNS measurements on the device that are trusted (`ok`,
  no preempted samples kept), measured as the baseline was (same cache state and
  implementation), and not themselves a change (a SLOWER or FASTER verdict: a regression night
  is not noise). With a `last-good` baseline, only passed runs count.
- Spread: slowest / fastest median of those runs, less one, each median taken net of its
  run's level: how far that run's cases stood, by their median, from their usual medians
  (`run_levels`, over the newest HOST_RUNS runs). A shared host moves whole sessions (every
  case 1.18x one night): that move is the host's, and the verdict takes it out of tonight's
  change itself (history/compare.py, the run's move), so it is no part of a case's own
  noise; left in, it made every spread as wide as the host's worst night and hid a 1.25x
  slowdown of a whole kernel type.
- Few runs: a range over two or three values is often far narrower than the next night's
  move; below FULL_RUNS runs the spread is at least the host's typical one (the median spread
  of the cases with two good runs or more in the newest HOST_RUNS runs). With fewer than two
  good runs the case has no spread of its own: a change is UNCERTAIN, never SLOWER (another
  case's nights are no evidence of this one's; on a busy host, where most runs are noisy, a
  case's first good runs come late).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np

from .records import CaseRecord
from .store import SPREAD_EXTRA, HistoryStore, Prefetched

SPREAD_RUNS = 5
READ_RUNS = 2 * SPREAD_RUNS  # measurements read to find SPREAD_RUNS good ones among them
FULL_RUNS = 4
# A change must exceed the spread this many times, on a log scale: beyond the recent runs'
# range by twice that range again. Past medians are few and session noise has heavy tails
# (1.65x jumps of one case between quiet nights), so a next night of an unchanged build lands
# beyond twice the range about once in hundreds of cases; and a regression fails only when a
# fresh process confirms it (harness/measurer.py).
SPREAD_FACTOR = 3.0
HOST_RUNS = 20
LEVEL_CASES = 5  # cases of a run, each seen in another run too, that tell its level
_CHANGED = ("SLOWER", "FASTER")


@dataclass(slots=True)  # not frozen: one per judged case with a history
class Spread:
    """A case's session-to-session spread, as fractions (0.08 is 8 %)."""

    value: float  # what the verdict uses
    runs: int  # the case's good runs it was taken over
    host: float | None = None  # the host's typical spread, when known
    own: float = 0.0  # the case's own runs' spread

    @property
    def limit(self) -> float:
        """The smallest change (log of the ratio) beyond this spread."""
        return SPREAD_FACTOR * math.log1p(max(self.value, 0.0))

    def describe(self) -> str:
        text = (f"its {self.runs} recent good runs spread {100 * self.own:.1f} % (their "
                f"runs' moves taken out where known)")
        if self.value > self.own:
            text += f" (taken as the host's typical {100 * self.value:.1f} %: few runs)"
        return text

    def to_extra(self) -> dict[str, float | int | None]:
        return {"run_to_run": self.value, "spread_runs": self.runs, "host_spread": self.host,
                "own_spread": self.own}

    @classmethod
    def from_extra(cls, extra: dict) -> Spread | None:
        """The spread a baseline record carries (None: none known)."""
        value = extra.get("run_to_run")
        if not _finite(value) or value < 0:
            return None
        own = extra.get("own_spread", value)  # older records: the spread of DEPTH runs
        host = extra.get("host_spread")
        return cls(float(value), int(extra.get("spread_runs") or 2),
                   float(host) if _finite(host) else None,
                   float(own) if _finite(own) else float(value))


def _finite(value: object) -> bool:
    return isinstance(value, (int, float)) and math.isfinite(value)


def _condition(extra: dict) -> tuple[str, str]:
    """The cache mode and implementation a measurement ran in (older records: warm, default)."""
    cache = str(extra.get("cache") or "warm").split(" ", 1)[0]
    return cache, str(extra.get("impl") or "")


def good_runs(found: Iterable[tuple[float, str, dict, str]], like: CaseRecord,
              levels: dict[str, float] | None = None) -> list[float]:
    """The medians among `found` ((median, verdict, extra, run id) of trusted measurements,
    newest first, as HistoryStore.case_values reads them) that tell the case's noise (see the
    module docstring), each net of its run's level (`levels`: log, per run id; none known:
    0)."""
    condition = _condition(like.extra)
    levels = levels or {}
    kept = []
    for median, verdict, extra, run_id in found:
        if median > 0 and verdict not in _CHANGED and not extra.get("preempted_kept") \
                and _condition(extra) == condition:
            level = levels.get(run_id)
            kept.append(median / math.exp(level) if level else median)
            if len(kept) == SPREAD_RUNS:
                break
    return kept


def run_levels(values: Iterable[tuple[str, float, str]]) -> dict[str, float]:
    """Per run id, its level: the median over its cases of log(the case's median there / the
    case's median over the runs), from (key, median, run id) of trusted measurements; a run
    with fewer than LEVEL_CASES cases that other runs measured too has none."""
    view = _View.of(values)
    return view.levels(view.finite())


class _View:
    """Trusted measurements as columns (the newest HOST_RUNS runs of a large run's history
    hold millions: one Python object per value and per step cost tens of seconds): per value
    its case's code, its median, its run's code; `runs`: the run ids by code."""

    def __init__(self, cases: np.ndarray, medians: np.ndarray, run_codes: np.ndarray,
                 runs: list[str]) -> None:
        self.cases, self.medians, self.run_codes, self.runs = cases, medians, run_codes, runs

    @classmethod
    def of(cls, values: Iterable[tuple[str, float, str]]) -> _View:
        case_codes: dict[str, int] = {}
        run_codes: dict[str, int] = {}
        found = [(case_codes.setdefault(key, len(case_codes)), median,
                  run_codes.setdefault(run_id, len(run_codes))) for key, median, run_id in values]
        cases, medians, runs = (zip(*found) if found else ((), (), ()))
        return cls(np.array(cases, np.int64), np.array(medians, np.float64),
                   np.array(runs, np.int64), list(run_codes))

    def finite(self) -> np.ndarray:
        return np.isfinite(self.medians) & (self.medians > 0)

    def levels(self, usable: np.ndarray) -> dict[str, float]:
        """`run_levels` of the values where `usable`."""
        cases, runs = self.cases[usable], self.run_codes[usable]
        if not len(cases):
            return {}
        # math.log, as the rest of the verdict takes logs: numpy's may differ in the last bit.
        logs = np.fromiter(map(math.log, self.medians[usable].tolist()), np.float64, len(cases))
        count = int(cases.max()) + 1
        pairs = np.sort(cases * len(self.runs) + runs)  # np.unique: 10x a sort here
        seen = pairs[_firsts(pairs)] // max(len(self.runs), 1)
        shared = np.bincount(seen, minlength=count) >= 2  # cases measured in two runs or more
        kept = shared[cases]
        usual, _ = _group_medians(cases[kept], logs[kept], count)
        offsets, sizes = _group_medians(runs[kept], logs[kept] - usual[cases[kept]],
                                        len(self.runs))
        return {self.runs[code]: float(offsets[code]) for code in range(len(self.runs))
                if sizes[code] >= LEVEL_CASES}

    def host(self, levels: dict[str, float]) -> float | None:
        """The host's typical spread: the median, over the cases with two finite values or
        more among their newest SPREAD_RUNS (by run code: newest run first), of their own
        spread, each value net of its run's level."""
        if not len(self.cases):
            return None
        order = _ordered(self.cases, self.run_codes)
        cases = self.cases[order]
        starts = np.flatnonzero(_firsts(cases))
        rank = np.arange(len(cases)) - np.repeat(starts, np.diff(np.r_[starts, len(cases)]))
        newest = rank < SPREAD_RUNS
        factor = np.array([math.exp(levels.get(run, 0.0)) for run in self.runs])
        values = (self.medians[order] / factor[self.run_codes[order]])[newest]
        cases = cases[newest]
        finite = np.isfinite(values) & (values > 0)
        starts = np.flatnonzero(_firsts(cases))
        counts = np.add.reduceat(finite.astype(np.int64), starts)
        values = np.where(finite, values, np.nan)
        spreads = (np.fmax.reduceat(values, starts) / np.fmin.reduceat(values, starts)
                   - 1.0)[counts >= 2]
        return statistics.median(spreads.tolist()) if len(spreads) else None


def _firsts(ordered: np.ndarray) -> np.ndarray:
    """Where each run of equal values of `ordered` (sorted, not empty) starts."""
    return np.r_[True, ordered[1:] != ordered[:-1]]


def _ordered(first: np.ndarray, then: np.ndarray) -> np.ndarray:
    """The positions that sort by `first`, then by `then` (np.lexsort's order, in a
    third of its time over millions)."""
    order = np.argsort(then, kind="stable")
    return order[np.argsort(first[order], kind="stable")]


def _group_medians(groups: np.ndarray, values: np.ndarray, count: int
                   ) -> tuple[np.ndarray, np.ndarray]:
    """Per group 0..count-1, the median of its values (statistics.median's: the middle one,
    or the mean of the middle two; NaN for none) and how many it has."""
    ordered = values[_ordered(groups, values)]
    sizes = np.bincount(groups, minlength=count)
    starts = np.cumsum(sizes) - sizes
    medians = np.full(count, np.nan)
    has = sizes > 0
    low, high = (starts + (sizes - 1) // 2)[has], (starts + sizes // 2)[has]
    medians[has] = (ordered[low] + ordered[high]) / 2
    return medians, sizes


def own_spread(values: list[float]) -> float | None:
    """Slowest / fastest - 1 of two values or more (None with fewer)."""
    finite = [v for v in values if _finite(v) and v > 0]
    return max(finite) / min(finite) - 1.0 if len(finite) >= 2 else None


def combine(own: float | None, runs: int, host: float | None) -> Spread | None:
    """The spread a verdict uses: the case's own (None with fewer than two good runs), at
    least the host's below FULL_RUNS runs."""
    if own is None:
        return None
    floor = host if runs < FULL_RUNS and host is not None else 0.0
    return Spread(max(own, floor), runs, host, own)


class SpreadSource:
    """Spreads read from one history, for the runs a baseline stands among."""

    def __init__(self, store: HistoryStore, *, device: str | None, before: float | None,
                 passed_only: bool, exclude: Iterable[str] = ()) -> None:
        self.store, self.device, self.before = store, device, before
        self.passed_only, self.exclude = passed_only, tuple(exclude)
        self._host: dict[str, tuple[float | None, dict[str, float]]] = {}
        self._values: Prefetched[tuple[float, str, dict, str]] = Prefetched()

    def prefetch(self, kind: str, keys: list[str]) -> None:
        """Read the values of these cases at once (a large run's verdicts); `of` answers
        them from memory until the next prefetch."""
        self._values.load(kind, keys, lambda kind, keys: {
            key: values for key, (_, values) in self.store.verdict_reads(
                kind, keys, device=self.device, before=self.before,
                passed_only=self.passed_only, exclude=self.exclude, depth=0,
                values=READ_RUNS, extra_keys=SPREAD_EXTRA).items()})

    def preload(self, kind: str, keys: list[str],
                values: dict[str, list[tuple[float, str, dict, str]]]) -> None:
        """`prefetch` with the values read already (HistoryStore.verdict_reads)."""
        self._values.load(kind, keys, lambda *_: values)

    def of(self, kind: str, key: str, like: CaseRecord) -> Spread | None:
        """The spread of case (`kind`, `key`) measured as `like` was."""
        found = self._values.get(kind, key, lambda kind, key: self.store.case_values(
            kind, key, device=self.device, before=self.before, passed_only=self.passed_only,
            exclude=self.exclude, limit=READ_RUNS))
        host, levels = self._recent(kind)
        runs = good_runs(found, like, levels)
        return combine(own_spread(runs), len(runs), host)

    def _recent(self, kind: str) -> tuple[float | None, dict[str, float]]:
        """The host's typical spread (the median over its cases with two good runs or more
        in the newest HOST_RUNS runs, each net of its run's level; None when no case has
        two) and those runs' levels (`run_levels`), from their cases of `kind`."""
        if kind not in self._host:
            codes, medians, ranks, runs = self.store.recent_values(
                kind, device=self.device, before=self.before, passed_only=self.passed_only,
                exclude=self.exclude, runs=HOST_RUNS, changed=_CHANGED)
            view = _View(np.frombuffer(codes, np.int64), np.frombuffer(medians, np.float64),
                         np.frombuffer(ranks, np.int64), runs)
            levels = view.levels(view.finite())
            self._host[kind] = (view.host(levels), levels)
        return self._host[kind]
