"""A new value far above the case's own quiet history, on a host that did not slow down.

A busy host can take one scheduler time slice from every sample of a case: the spread is
tight, the precision target is reached, and the value is the time slice (7,990 us stored for
GEMMs that take 20-300 us). The preemption evidence (devices/preemption.py) catches that where
the operating system counts it; this check is the second line, for whatever it misses: the
case's quiet history (its newest trusted measurements on this device, in the same cache
state and implementation, none of them holding preempted samples) says what the kernel
takes. A value more than PLATEAU_FACTOR times that, while the host's reference loop
(measure/reference.py) ran no slower than then, is measured again (harness/measurer.py), and
flagged if it stays there.

Only where the reference loop exists (a CPU): without it a slower host and a slower kernel
cannot be told apart, and a real regression must stay a SLOWER verdict, not be called noise.
"""

from __future__ import annotations

from pathlib import Path

from ..db.errors import NpuperfError
from ..measure.result import PLATEAU_REASON, STATUS_OK, CaseResult
from .baseline import DEPTH, other_impl
from .compare import HOST_TOLERANCE
from .records import KIND_KERNEL, CaseRecord
from .store import HistoryStore

# A kernel's time moves by percents between quiet runs, by tens of percents on a noisy host;
# the plateaus seen are 26-400x (one time slice on kernels of 20-300 us). A code change that
# makes a kernel 10x slower on an unchanged host is rarer than interference, and is not lost:
# the case's reason says what was seen, and a quiet rerun gives it its SLOWER verdict. A 3x
# regression (what the regression tests inject) is judged as usual.
PLATEAU_FACTOR = 10.0


class QuietHistory:
    """The cases' quiet values in a history file, read-only, opened at the first question."""

    def __init__(self, path: Path | None, device: str) -> None:
        self.path, self.device = path, device
        self._store: HistoryStore | None = None
        self._closed = path is None

    def quiet(self, result: CaseResult) -> CaseRecord | None:
        """The fastest of the case's newest trusted measurements comparable with `result`."""
        store = self._open()
        if store is None:
            return None
        try:
            found = store.latest_cases(KIND_KERNEL, result.case_id, device=self.device or None,
                                       limit=DEPTH, with_samples=False)
        except NpuperfError:  # damaged since it was opened: a second line of defence only
            self.close()
            self._closed = True
            return None
        quiet = [c for c in found if c.status == STATUS_OK and c.median_us
                 and not c.extra.get("preempted_kept")
                 and (not result.cache or not c.extra.get("cache")
                      or c.extra.get("cache") == result.cache)
                 and not other_impl(c, result.impl or None)]
        return min(quiet, key=lambda c: c.median_us) if quiet else None

    def _open(self) -> HistoryStore | None:
        if self._store is None and not self._closed:
            if not self.path.is_file():
                self._closed = True  # the first run: no history to compare with
                return None
            try:
                self._store = HistoryStore(self.path, readonly=True)
            except NpuperfError:
                self._closed = True  # the session's own checks say what is wrong with it
        return self._store

    def close(self) -> None:
        if self._store is not None:
            self._store.close()
            self._store = None


def plateau(result: CaseResult, quiet: CaseRecord | None) -> str | None:
    """Why `result`'s value is not the kernel's (None when nothing says so)."""
    value = result.value
    if quiet is None or value is None or result.status != STATUS_OK or not quiet.median_us:
        return None
    if value <= PLATEAU_FACTOR * quiet.median_us:
        return None
    then, now = quiet.extra.get("reference_us"), result.reference_us
    if isinstance(then, bool) or not isinstance(then, int | float) or not then > 0 or not now:
        return None  # no reference loop on one side: a slower kernel is as likely
    if now / float(then) >= 1 + HOST_TOLERANCE:
        return None  # the host slowed down: the baseline comparison says UNCERTAIN
    return (f"{PLATEAU_REASON} {value:.4g} us is {value / quiet.median_us:.1f}x the case's quiet "
            f"history ({quiet.median_us:.4g} us, run {quiet.run_id or '?'}) while the host's "
            f"reference loop ran no slower ({now:.4g} us, then {float(then):.4g} us)")
