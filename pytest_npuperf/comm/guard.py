"""No rank waits forever: a watchdog thread per rank, and torchrun's SIGTERM noticed even while
the main thread is blocked inside a collective.

The process group's timeout (--npuperf-comm-timeout) normally ends a stuck collective with an
error: the case fails and the session ends, writing what it measured. Two things can still
hold a rank: a backend that does not honour the timeout in time (a device synchronisation on
a dead peer), and torchrun, which sends SIGTERM to every other rank when one exits and SIGKILL
30 s later. A Python signal handler runs only when the main thread returns to the interpreter,
so the C-level handler's wakeup byte (signal.set_wakeup_fd) is read by the watchdog thread
instead. When the case in progress is stuck past its limit, or SIGTERM came and the main thread
stays blocked for a few seconds, the watchdog calls `on_stuck` (rank 0 writes what was measured)
and ends the process with status 1. Only rank 0, which has results to write, takes SIGTERM over;
the other ranks keep its default (they end at once).
"""

from __future__ import annotations

import contextlib
import os
import select
import signal
import sys
import threading
import time
from collections.abc import Callable

TERM_GRACE_S = 5.0  # after SIGTERM, how long the main thread may stay blocked in a case
TERM_IDLE_GRACE_S = 15.0  # ... or take to end the session (torchrun kills at 30 s)
_POLL_S = 0.25


class Guard:
    def __init__(self, rank: int, on_stuck: Callable[[str], None] | None = None) -> None:
        self.rank = rank
        self.on_stuck = on_stuck
        self.terminated = False  # SIGTERM received (torchrun stops the job: a rank exited)
        self._label = ""
        self._deadline: float | None = None
        self._term_at: float | None = None
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._pipe: tuple[int, int] | None = None
        self._old_fd: int | None = None
        self._old_handler = None

    def install(self) -> None:
        """Start the watchdog; on rank 0's main thread, also take over SIGTERM (a flag the
        session checks between steps, so that it ends its cases and writes)."""
        if self._thread is not None:
            return
        if self.rank == 0 and threading.current_thread() is threading.main_thread():
            read, write = os.pipe()
            os.set_blocking(write, False)
            self._pipe = (read, write)
            self._old_handler = signal.signal(signal.SIGTERM, self._on_term)
            self._old_fd = signal.set_wakeup_fd(write, warn_on_full_buffer=False)
        self._thread = threading.Thread(target=self._watch, name="npuperf-comm-guard",
                                        daemon=True)
        self._thread.start()

    def uninstall(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=2)
            self._thread = None
        if self._pipe is not None:
            signal.set_wakeup_fd(self._old_fd if self._old_fd is not None else -1)
            signal.signal(signal.SIGTERM, self._old_handler or signal.SIG_DFL)
            for fd in self._pipe:
                with contextlib.suppress(OSError):
                    os.close(fd)
            self._pipe = None

    def _on_term(self, signum, frame) -> None:
        self._flag_term()

    def _flag_term(self) -> None:
        with self._lock:
            if not self.terminated:
                self.terminated = True
                self._term_at = time.monotonic()

    def arm(self, label: str, seconds: float) -> None:
        """The main thread is in `label` and must be out of it (or re-arm) within `seconds`."""
        with self._lock:
            self._label, self._deadline = label, time.monotonic() + seconds

    def disarm(self) -> None:
        with self._lock:
            self._label, self._deadline = "", None

    def _watch(self) -> None:
        while not self._stop.is_set():
            if self._pipe is not None:
                ready, _, _ = select.select([self._pipe[0]], [], [], _POLL_S)
                if ready:
                    with contextlib.suppress(OSError):
                        if signal.SIGTERM in os.read(self._pipe[0], 64):
                            self._flag_term()
            else:
                self._stop.wait(_POLL_S)
            reason = self._stuck_reason(time.monotonic())
            if reason:
                self._give_up(reason)
                return

    def _stuck_reason(self, now: float) -> str | None:
        with self._lock:
            label, deadline, term_at = self._label, self._deadline, self._term_at
        if deadline is not None and now > deadline:
            return f"{label}: no progress within its time limit (a rank died or hung?)"
        grace = TERM_GRACE_S if deadline is not None else TERM_IDLE_GRACE_S
        if term_at is not None and now - term_at > grace:
            return (f"{label or 'the session'}: terminated by the launcher (another rank "
                    f"exited) and still running after {grace:g} s")
        return None

    def _give_up(self, reason: str) -> None:
        print(f"npuperf: rank {self.rank}: {reason}; ending this rank", file=sys.stderr,
              flush=True)
        if self.on_stuck is not None:
            try:
                self.on_stuck(reason)
            except BaseException as exc:  # the process ends either way
                print(f"npuperf: rank {self.rank}: could not write the results: {exc}",
                      file=sys.stderr, flush=True)
        os._exit(1)
