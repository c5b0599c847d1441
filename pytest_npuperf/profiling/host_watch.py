"""Whether the in-model times of a profile can be trusted: the host watched while the traced
steps ran.

A profile taken while another process runs is not the model's time: on this project's 2-core
host, one busy process beside a 2-thread profile stored 5.97 ms for an `Add` that takes 133 us
quiet, and 21 ms for a GEMM of 7.5 ms. Two kinds of evidence, gathered around the traced
steps and by a sampler thread every `PERIOD_S`:

- the time the profile's threads waited for a CPU (Linux's per-thread run-queue delay,
  devices/preemption.py): above `PREEMPTED_FRACTION` of the traced time per busy thread, the
  host preempted the profile;
- the host's runnable tasks (/proc/loadavg, the sampler itself left out) beyond its cores:
  oversubscribed.

The runnable tasks of other processes (the host's, less this process's running threads) are
recorded beside them (`Profiling Host`): a process on a core of its own does not take the
profile's CPU time, though it shares caches and memory bandwidth. Either verdict makes the
profile `untrusted: <why>`; its rows are marked so by the parse, kept
out of the replay comparison, and profiled again on the next quiet run. Where /proc is not
there (not Linux) nothing can be said: the mark stays empty. A GPU or NPU profile records the
host's state too, but is not judged by it: the device's kernel times are not the host's CPU
time.
"""

from __future__ import annotations

import os
import statistics
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from ..db.columns import TRUST_OK, UNTRUSTED
from ..devices.preemption import PREEMPTED_FRACTION, RunQueueDelay
from ..measure.host import available_cores, host_load

PERIOD_S = 0.05
_LOADAVG = Path("/proc/loadavg")
_TASKS = Path("/proc/self/task")


def _runnable_host() -> int | None:
    try:
        return int(_LOADAVG.read_text().split()[3].split("/")[0])
    except (OSError, ValueError, IndexError):
        return None


def _running_own() -> int:
    count = 0
    try:
        tids = os.listdir(_TASKS)
    except OSError:
        return 0
    for tid in tids:
        try:
            text = (_TASKS / tid / "stat").read_text()
        except OSError:
            continue
        state = text[text.rfind(")") + 2:text.rfind(")") + 3]
        count += state == "R"
    return count


@dataclass(frozen=True)
class StepWait:
    """One traced step: its wall time and the time its threads waited for a CPU (Linux's
    run-queue delay; per busy thread, their mean). For one thread, wall - waited is exactly
    its CPU time (measured: 532.9 ms against 532.8 ms of thread CPU time for a Llama forward
    beside 12 runnable tasks): the in-model times inside the step hold that wait."""

    wall_us: float
    waited_us: float
    threads: int

    def as_list(self) -> list:
        return [round(self.wall_us, 3), round(self.waited_us, 3), self.threads]


@dataclass
class HostVerdict:
    trust: str  # ok, untrusted: <why>, or "" (nothing could be read)
    threads: int
    cores: int
    load: float | None
    waited_fraction: float | None  # of the traced time, per busy thread
    runnable: float | None  # median runnable tasks of the host (the sampler left out)
    others: float | None  # median runnable tasks of other processes
    samples: int = 0
    reasons: list[str] = field(default_factory=list)

    def host_text(self) -> str:
        """What the `Profiling Host` column says."""
        parts = [f"{self.cores} cores"]
        if self.load is not None:
            parts.append(f"load {self.load:.2f}")
        if self.runnable is not None:
            parts.append(f"{self.runnable:g} runnable ({self.others:g} of other processes)")
        if self.waited_fraction is not None:
            parts.append(f"run-queue wait {self.waited_fraction:.1%}")
        return ", ".join(parts)

    def as_dict(self) -> dict:
        return {"trust": self.trust, "threads": self.threads, "host": self.host_text()}


class HostWatch:
    """Start when the traced steps start, `verdict()` when they end."""

    def __init__(self, threads: int, *, judge: bool = True) -> None:
        self.threads = threads
        self.judge = judge  # a CPU profile's times are the host's; a device's are not
        self.cores = len(available_cores())
        self.load = host_load()
        self.queue = RunQueueDelay() if RunQueueDelay.available() else None
        self._before: dict = {}
        self._runnable: list[int] = []
        self._others: list[int] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, name="npuperf-host-watch",
                                        daemon=True)
        self._started = 0.0
        self.steps: list[StepWait] = []  # per traced step, in order
        self._step: tuple[float, dict] | None = None

    def start(self) -> HostWatch:
        if self.queue is not None:
            self.queue.refresh()
            self._before = self.queue.snapshot()
        self._started = time.perf_counter()
        self._thread.start()
        return self

    def step_begin(self) -> None:
        if self.queue is None:
            return
        self.queue.refresh()  # intra-op workers a step may have started
        self._step = (time.perf_counter(), self.queue.snapshot())

    def step_end(self) -> None:
        """The step's wall and what its threads waited for a CPU: the calling thread's, and
        those of the others that ran at least 5 % of the step (intra-op workers; not this
        watch's sampler). The calling thread always counts: the kernel updates a running
        thread's CPU time only at a tick, so a short step may show none."""
        if self.queue is None or self._step is None:
            return
        after = self.queue.snapshot()
        started, before = self._step
        wall_ns = (time.perf_counter() - started) * 1e9
        self._step = None
        caller = str(threading.get_native_id())
        sampler = str(self._thread.native_id)
        # A wait is counted when the thread gets its CPU back: one begun before the step may
        # land inside it, hence the bound (the caller, running at both ends, needs none).
        waits = [min(after[t][1] - b[1], wall_ns) for t, b in before.items()
                 if t in after and t != sampler
                 and (t == caller or after[t][0] - b[0] > 0.05 * wall_ns)]
        self.steps.append(StepWait(wall_ns / 1e3, sum(waits) / 1e3 / max(len(waits), 1),
                                   len(waits)))

    def _sample(self) -> None:
        while not self._stop.wait(PERIOD_S):
            own = _running_own()  # the sampler is one of them
            host = _runnable_host()
            if host is None:
                return
            self._runnable.append(max(host - 1, 0))
            self._others.append(max(host - own, 0))

    def verdict(self) -> HostVerdict:
        wall = time.perf_counter() - self._started
        self._stop.set()
        self._thread.join()
        waited = None
        busy = 1
        if self.queue is not None:
            self.queue.refresh()
            after = self.queue.snapshot()
            delays = [after[t][1] - before[1] for t, before in self._before.items() if t in after]
            busy = max(1, sum(1 for t, before in self._before.items()
                              if t in after and after[t][0] - before[0] > 0.05 * wall * 1e9))
            waited = sum(delays) / 1e9 / (wall * busy) if wall > 0 else None
            self.queue.close()
        runnable = statistics.median(self._runnable) if self._runnable else None
        others = statistics.median(self._others) if self._others else None
        verdict = HostVerdict("", self.threads, self.cores, self.load, waited, runnable,
                              others, len(self._runnable))
        if waited is not None and waited > PREEMPTED_FRACTION:
            verdict.reasons.append(f"preempting host: the profile's threads waited "
                                   f"{waited:.0%} of the traced time for a CPU")
        if runnable is not None and runnable > self.cores:
            verdict.reasons.append(f"oversubscribed host: {runnable:g} runnable tasks on "
                                   f"{self.cores} cores")
        if not self.judge:
            verdict.reasons.clear()
        if verdict.reasons:
            verdict.trust = f"{UNTRUSTED}: " + "; ".join(verdict.reasons)
        elif waited is not None or runnable is not None:
            verdict.trust = TRUST_OK
        return verdict
