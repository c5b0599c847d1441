"""What every timing method shares: the session's clocks, the L2 flush and the profiler of
the `profiler` method, and the samples a method hands back (`Measured`).

One method per module, the way NVBench keeps a measure file per method: `method_events.py`
(the device's event timer around each call), `method_graph.py` (device-graph replays),
`method_profiler.py` (kernel time from torch.profiler). `replay/runner.py` chooses among
them and falls back from one to the next.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from ..devices.base import Backend, HostClockTimer
from .policy import SamplingPolicy
from .sampler import SamplingRun
from .torch_profiler import ProfilerSession


@dataclass
class Measured:
    samples: list[float]  # microseconds per call
    run: SamplingRun
    method: str  # the method that measured them
    fallback: str = ""  # why the session's method did not
    # The wall clock (us) the timed calls' range spanned, where the method knows it.
    range_us: tuple[float, float] | None = None


def first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0]}" if text else type(exc).__name__


class Timing:
    """The session-scoped tools of the timing methods on one backend."""

    def __init__(self, backend: Backend, policy: SamplingPolicy) -> None:
        self.backend, self.policy = backend, policy
        self.timer = backend.timer()
        # The profiler method pairs every call with a host-clock reading: on a CPU the
        # backend's timer leaves preempted calls out, the plain host clock does not.
        self.plain_timer = HostClockTimer(backend.synchronize) if backend.kind == "cpu" \
            else self.timer
        self._flush_buffer: torch.Tensor | None = None
        self._profiler: ProfilerSession | None = None

    def flush(self) -> Callable[[], object] | None:
        """What evicts the L2 cache before each sample, when the policy asks for it."""
        if not self.policy.flush_l2:
            return None
        if self._flush_buffer is None:
            size = self.backend.l2_cache_bytes() or 64 * 2 ** 20
            # Writing twice the cache size evicts whatever the previous sample left there.
            self._flush_buffer = torch.empty(2 * size // 4, dtype=torch.float32,
                                             device=self.backend.device)
        buffer = self._flush_buffer
        return lambda: buffer.zero_()

    def new_profiler(self) -> ProfilerSession:
        return ProfilerSession(self.backend.profiler_activities(),
                               uses_device=self.backend.kind != "cpu")

    @property
    def profiler(self) -> ProfilerSession:
        """The session's profiler (starting one costs about a second): started once."""
        if self._profiler is None:
            self._profiler = self.new_profiler()
        return self._profiler

    def abandon_profiler_cycle(self) -> None:
        """Close the cycle of a case that did not finish, so the next case starts clean."""
        if self._profiler is not None:
            self._profiler.finish_case()

    def close(self) -> None:
        if self._profiler is not None:
            self._profiler.stop()
            self._profiler = None
