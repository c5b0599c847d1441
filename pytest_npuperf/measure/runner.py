"""Running one case: row -> call -> samples -> result, whatever goes wrong.

Every outcome becomes a result with a status (the row keeps its data and gets the status);
the caller decides how the pytest case ends.
"""

from __future__ import annotations

import contextlib
import signal
import threading
import time
import traceback
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass

import torch

from ..db.errors import CellError
from ..devices.base import Backend
from ..kernels.case import case_from_row
from ..kernels.registry import spec_for
from ..kernels.spec import ReplaySkipped
from .cases import CaseRef
from .profiler import ProfilerSession
from .result import (
    METHOD_EVENTS,
    METHOD_PROFILER,
    STATUS_ERROR,
    STATUS_FAILED,
    STATUS_OK,
    STATUS_SKIPPED,
    STATUS_SUSPECT,
    STATUS_TIMEOUT,
    CaseResult,
)
from .sampler import CaseTimeout, SamplingPolicy, sample

# A measurement this much below the physical bound is flagged (timer granularity slack).
BOUND_SLACK = 0.95


@dataclass
class RunnerOptions:
    policy: SamplingPolicy
    method: str = METHOD_EVENTS
    case_timeout_s: float | None = None


@contextlib.contextmanager
def _alarm(seconds: float | None) -> Iterator[None]:
    """Interrupt a case stuck inside one call (SIGALRM, main thread only); the sampler's
    deadline check covers the rest."""
    usable = (seconds and hasattr(signal, "setitimer")
              and threading.current_thread() is threading.main_thread())
    if not usable:
        yield
        return

    def on_alarm(signum, frame):
        raise CaseTimeout(f"case timeout ({seconds:g} s) inside a call")

    previous = signal.signal(signal.SIGALRM, on_alarm)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0]}" if text else type(exc).__name__


class CaseRunner:
    def __init__(self, backend: Backend, options: RunnerOptions) -> None:
        self.backend = backend
        backend.activate()
        self.options = options
        self.timer = backend.timer()
        self._profiler: ProfilerSession | None = None
        self._flush_buffer: torch.Tensor | None = None
        self.last_samples: list[float] = []
        self.stack = ", ".join(f"{k} {v}" for k, v in backend.stack().items())

    # -- session-scoped resources -----------------------------------------------------------
    @property
    def profiler(self) -> ProfilerSession:
        if self._profiler is None:
            self._profiler = ProfilerSession(self.backend.profiler_activities(),
                                             uses_device=self.backend.kind != "cpu")
        return self._profiler

    def close(self) -> None:
        if self._profiler is not None:
            self._profiler.stop()
            self._profiler = None

    def _flush(self) -> Callable[[], object] | None:
        if not self.options.policy.flush_l2:
            return None
        if self._flush_buffer is None:
            size = self.backend.l2_cache_bytes() or 64 * 2 ** 20
            # Writing twice the cache size evicts whatever the previous sample left there.
            self._flush_buffer = torch.empty(2 * size // 4, dtype=torch.float32,
                                             device=self.backend.device)
        buffer = self._flush_buffer
        return lambda: buffer.zero_()

    # -- one case -----------------------------------------------------------------------------
    def run(self, ref: CaseRef, row: Mapping[str, str], nodeid: str, file_label: str) -> CaseResult:
        """Measure one case. Never raises for the case's own faults: see result.status."""
        started = time.perf_counter()
        self.last_samples = []
        result = CaseResult(case_id=ref.case_id, nodeid=nodeid, kernel_type=ref.kernel_type,
                            file=ref.file, signature=ref.signature, row=ref.row_number,
                            method=self.options.method, device=self.backend.database_device(),
                            stack=self.stack)
        spec = spec_for(ref.kernel_type)
        if spec is None:
            result.status, result.error = STATUS_SKIPPED, f"no replay for {ref.kernel_type} yet"
            return result
        deadline = (time.monotonic() + self.options.case_timeout_s
                    if self.options.case_timeout_s else None)
        try:
            with _alarm(self.options.case_timeout_s):
                case = case_from_row(ref.kernel_type, row, file=file_label,
                                     row_number=ref.row_number)
                prepared = spec.prepare(case, self.backend)
                result.flops, result.bytes = prepared.flops, prepared.bytes
                result.implementation = prepared.implementation
                samples, run = self._measure(ref, prepared.call, deadline)
            result.warmup, result.time_in_calls_s = run.warmup, run.time_in_calls_s
            result.set_samples(samples)
            self.last_samples = samples  # all of them, for pytest-benchmark in this process
            self._check_bound(result)
        except CellError as exc:
            result.status, result.error = STATUS_ERROR, str(exc)
        except ReplaySkipped as exc:
            result.status, result.error = STATUS_SKIPPED, str(exc)
        except CaseTimeout as exc:
            result.status, result.error = STATUS_TIMEOUT, str(exc)
            self._abandon_profiler_cycle()
        except Exception as exc:  # the kernel raised: the case fails, the session goes on
            result.status, result.error = STATUS_FAILED, _first_line(exc)
            result.detail = traceback.format_exc()
            self._abandon_profiler_cycle()
        finally:
            prepared = None  # free the case's tensors before the next case allocates
            self.backend.empty_cache()
        result.wall_s = time.perf_counter() - started
        return result

    def _measure(self, ref: CaseRef, call: Callable[[], object], deadline: float | None):
        policy = self.options.policy
        profiling = self.options.method == METHOD_PROFILER
        wrap = self.profiler.wrap if profiling else None
        with self.backend.named_range(ref.case_id):
            run = sample(call, self.timer, policy, flush=self._flush(), deadline=deadline,
                         wrap=wrap)
        if not profiling:
            return run.samples, run
        device_samples = self.profiler.finish_case()
        if len(device_samples) != len(run.samples):
            raise RuntimeError(f"profiler attributed {len(device_samples)} samples to this case, "
                               f"{len(run.samples)} were taken")
        return device_samples, run

    def _abandon_profiler_cycle(self) -> None:
        """Close the cycle of a case that did not finish, so the next case starts clean."""
        if self._profiler is not None:
            self._profiler.finish_case()

    def _check_bound(self, result: CaseResult) -> None:
        peak = self.backend.peak()
        if peak is None or result.stats is None:
            return
        nbytes = result.bytes
        l2 = self.backend.l2_cache_bytes()
        if not self.options.policy.flush_l2 and (l2 is None or nbytes <= l2):
            # Between samples the data may stay in the cache, which is faster than memory:
            # only the compute bound holds unless the data cannot fit (or the cache is flushed).
            nbytes = 0.0
        result.bound_us = peak.bound_us(result.flops, nbytes)
        if result.bound_us and result.stats.min < BOUND_SLACK * result.bound_us:
            result.status = STATUS_SUSPECT
            result.error = (f"faster than the device allows: min {result.stats.min:.3f} us < "
                            f"bound {result.bound_us:.3f} us for {result.flops:.3g} FLOP, "
                            f"{result.bytes:.3g} B")
        else:
            result.status = STATUS_OK
