"""A session's history and baseline, in whichever process needs them.

- The process that runs a case (the serial process, an xdist worker) judges it against the
  baseline right after measuring it, so that a SLOWER case fails as its own pytest outcome
  there (`-k`, `--lf`, `-x` and xdist's scheduling all see an ordinary failure). It opens the
  baseline itself, read-only, when its first case needs it.
- The owner process (serial, or the xdist controller) checks the history and the baseline
  before any case runs (a bad REF is a usage error, not 1000 failed cases), judges at report
  time any result that arrives without a verdict (a worker that could not open the baseline),
  and records the run, once, after the write.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from pathlib import Path

from ..db.errors import NpuperfError
from ..db.table import check_writable_dir
from ..measure.result import CaseResult
from .baseline import Baseline, judge, judge_many, resolve_baseline
from .compare import Comparison
from .recorder import Recording, record_run
from .records import CaseRecord, RunRecord
from .store import QUICK_TIMEOUT_S, HistoryStore


class HistoryKeeper:
    def __init__(self, history: Path | None, baseline_ref: str | None, threshold: float, *,
                 run_id: str, started: float, device: Callable[[], str]) -> None:
        self.history = history
        self.baseline_ref = baseline_ref
        self.threshold = threshold
        self.run_id = run_id
        self.started = started
        self._device = device
        self._baseline: Baseline | None = None
        self.baseline_error: str | None = None  # why the baseline could not be opened here

    def check(self, *, write: bool) -> None:
        """Before any case runs (owner process): the history can be written and opened (an
        older schema is migrated now), and the baseline names something."""
        if write and self.history is not None:
            check_writable_dir(self.history.parent)
            if self.history.exists():  # not a history, or a newer one: say so now
                HistoryStore(self.history, busy_timeout_s=QUICK_TIMEOUT_S).close()
        self.open_baseline()

    def open_baseline(self) -> Baseline | None:
        if self.baseline_ref is None:
            return None
        if self._baseline is None:
            self._baseline = resolve_baseline(self.baseline_ref, history=self.history,
                                              device=self._device(), before=self.started,
                                              exclude=(self.run_id,))
        return self._baseline

    @property
    def label(self) -> str:
        """What the baseline is, for the reports ("" without one)."""
        if self.baseline_ref is None:
            return ""
        if self._baseline is not None:
            return self._baseline.label
        return f"{self.baseline_ref} (not opened: {self.baseline_error})" if self.baseline_error \
            else self.baseline_ref

    def judge(self, result: CaseResult, run_shift: tuple[float, int] | None = None
              ) -> Comparison | None:
        """The case's verdict (also stored in `result.regression`); None without a baseline,
        for a case that measured nothing, or when the baseline cannot be opened here.
        `run_shift`: how this session's cases judged so far moved (history/compare.py)."""
        if self.baseline_ref is None or self.baseline_error is not None:
            return None
        try:
            baseline = self.open_baseline()
        except NpuperfError as exc:
            self.baseline_error = str(exc)
            return None
        comparison = (judge(result, baseline, self.threshold, run_shift)
                      if baseline is not None else None)
        if comparison is not None:
            result.regression = comparison.to_dict()
        return comparison

    def judge_many(self, results: list[CaseResult]) -> None:
        """`judge` of every result, in bulk (history/baseline.py's `judge_many`): the cases an
        msprof parent or a backfill learns the durations of only at the end."""
        if self.baseline_ref is None or self.baseline_error is not None:
            return
        try:
            baseline = self.open_baseline()
        except NpuperfError as exc:
            self.baseline_error = str(exc)
            return
        if baseline is None:
            return
        for result, comparison in zip(results, judge_many(results, baseline, self.threshold)):
            if comparison is not None:
                result.regression = comparison.to_dict()

    def record(self, run: RunRecord, cases: Iterable[CaseRecord], count: int) -> Recording:
        """Start recording the run and its `count` cases, in one transaction (nothing without
        a history); a large run goes on being recorded after this returns
        (history/recorder.py)."""
        return record_run(self.history, run, cases, count) if self.history is not None \
            else Recording(Path())

    def close(self) -> None:
        if self._baseline is not None:
            self._baseline.close()
            self._baseline = None
