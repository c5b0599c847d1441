"""Which CPU samples the host took the processor from.

A sample of a kernel that ran undisturbed spent its whole wall time on the CPU. One that lost
a scheduler time slice to another process is milliseconds longer, and on a busy host every
sample can lose one: the spread is tight, the precision target is reached, and the stored
value is a time slice, not the kernel (7,990 us stored for GEMMs that take 20-300 us).

The evidence, per sample:

- Linux counts, per thread, the time it was runnable but waiting for a CPU (the `run_delay`
  of /proc/self/task/<tid>/schedstat). Summed over the process's threads around a call it is
  exactly the time taken from it. This is the evidence wherever the kernel keeps it: the
  obvious one, the thread's CPU time beside its wall time, misses the commonest case on a
  busy host: torch's intra-op workers spin while they wait for each other, so when one is
  preempted the others burn CPU for the whole wait (measured on this project's 2-core CI
  host: 15.7 ms of wall time, 15.7 ms of CPU time, 16.0 ms of run-queue delay, for a GEMM
  that takes 0.85 ms quiet).
- Elsewhere, the calling thread's CPU time beside the wall time: exact for a single-threaded
  kernel. With several intra-op threads a calling thread that sleeps while it waits for its
  workers reads as preempted too: such samples are left out (the case may end noisy), never
  stored as the kernel's. Judging each sample against the case's usual idle share instead
  would learn the disturbance itself where every sample is disturbed (a host at nice 10
  against a busy loop: 56 ms samples of a 3.6 ms GEMM, none flagged).
"""

from __future__ import annotations

import contextlib
import os
import threading
import time

from .base import HostClockTimer

# A sample that lost this much of its wall time is not a sample of the kernel: a time slice
# is milliseconds, far beyond a sample's own jitter; a waking thread waits microseconds.
PREEMPTED_FRACTION = 0.10
PREEMPTED_MIN_US = 20.0

EVIDENCE_RUN_QUEUE = "run-queue delay"
EVIDENCE_CPU_TIME = "thread CPU time"

_TASKS = "/proc/self/task"


class RunQueueDelay:
    """The nanoseconds the process's threads have waited for a CPU, read per thread from
    open schedstat files (a pread is about 2 us; opening each time would cost 20)."""

    def __init__(self) -> None:
        self._main = str(threading.get_native_id())
        self._fds: dict[str, int] = {}
        self._active: list[int] | None = None  # the threads read (None: all of them)

    @staticmethod
    def available() -> bool:
        """The kernel keeps the counts (CONFIG_SCHED_INFO): the calling thread's own CPU time
        in its schedstat is not zero."""
        try:
            with open(f"{_TASKS}/{threading.get_native_id()}/schedstat", "rb") as fh:
                return int(fh.read().split()[0]) > 0
        except (OSError, ValueError, IndexError):
            return False

    def refresh(self) -> None:
        """Follow the threads there are now (torch starts its workers at the first parallel
        call, after this timer was made), all of them until `follow` narrows them."""
        self._active = None
        try:
            tids = set(os.listdir(_TASKS))
        except OSError:
            tids = set()
        for gone in set(self._fds) - tids:
            os.close(self._fds.pop(gone))
        for tid in tids - set(self._fds):
            with contextlib.suppress(OSError):  # a thread that ended meanwhile
                self._fds[tid] = os.open(f"{_TASKS}/{tid}/schedstat", os.O_RDONLY)

    @staticmethod
    def _read(fd: int) -> tuple[int, int] | None:
        """A thread's (CPU time, wait) in ns; None once the thread has ended."""
        try:
            fields = os.pread(fd, 128, 0).split()
            return int(fields[0]), int(fields[1])
        except (OSError, ValueError, IndexError):
            return None

    def snapshot(self) -> dict[str, tuple[int, int]]:
        """(CPU time, wait) in ns per thread."""
        found = {tid: self._read(fd) for tid, fd in self._fds.items()}
        return {tid: values for tid, values in found.items() if values is not None}

    def follow(self, before: dict[str, tuple[int, int]], after: dict[str, tuple[int, int]]
               ) -> None:
        """Read from now on only the threads that ran or waited between the two snapshots
        (a call's: the caller and the intra-op workers), and the caller: a thread that
        slept through a call takes no part in the next ones of its batch, and each read
        costs microseconds per call per thread."""
        moved = {tid for tid, values in after.items() if before.get(tid) != values}
        self._active = [fd for tid, fd in self._fds.items()
                        if tid != self._main and tid in moved]

    def waited_ns(self, *, main_first: bool) -> int:
        """The sum of the threads' waits. A wait is counted when the thread gets its CPU
        back, so the calling thread is read last before a call and first after it: its own
        reads then add no wait of their own to the call's."""
        main = self._fds.get(self._main)
        others = self._active if self._active is not None else \
            [fd for tid, fd in self._fds.items() if tid != self._main]
        order = ([main] if main is not None else []) + others if main_first \
            else others + ([main] if main is not None else [])
        total = 0
        for fd in order:
            values = self._read(fd)
            if values is not None:  # an ended thread's waits no longer change
                total += values[1]
        return total

    def close(self) -> None:
        for fd in self._fds.values():
            os.close(fd)
        self._fds.clear()

    def __del__(self) -> None:
        self.close()


class PreemptionAwareTimer(HostClockTimer):
    """The host clock around each call, and the time the host took from it (module doc):
    `disturbed` marks the samples that lost more than 10 % of their wall time, and at least
    20 us."""

    name = "events"

    def __init__(self, *, run_queue: bool | None = None) -> None:
        super().__init__(lambda: None)  # nothing to wait for on a CPU
        use_queue = RunQueueDelay.available() if run_queue is None else run_queue
        self._queue = RunQueueDelay() if use_queue else None
        self.evidence = EVIDENCE_RUN_QUEUE if use_queue else EVIDENCE_CPU_TIME
        self.disturbed = []
        self.lost_us: list[float] = []

    def time_calls(self, call, n, before_each=None) -> list[float]:
        wall_clock, cpu_clock, queue = time.perf_counter_ns, time.thread_time_ns, self._queue
        if queue is not None:
            queue.refresh()
        walls, lost = [], []
        for index in range(n):
            if before_each is not None:
                before_each()
            if queue is not None and index == 0:  # every thread: which ones the call uses
                first = queue.snapshot()
            mark = queue.waited_ns(main_first=False) if queue is not None else cpu_clock()
            start = wall_clock()
            call()
            end = wall_clock()
            gone = queue.waited_ns(main_first=True) - mark if queue is not None \
                else end - start - (cpu_clock() - mark)
            if queue is not None and index == 0:
                queue.follow(first, queue.snapshot())
            lost.append(gone / 1e3)
            walls.append((end - start) / 1e3)
        self.lost_us = lost
        self.disturbed = [gone > max(PREEMPTED_FRACTION * wall, PREEMPTED_MIN_US)
                          for wall, gone in zip(walls, lost)]
        return walls
