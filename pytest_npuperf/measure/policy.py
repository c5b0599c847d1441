"""What a session can ask of measurement: methods, statistics, update modes, sampling policy.

Plain data with no torch, numpy or pandas behind it, so that the plugin's options can name
and check them when pytest starts, before (and without) any case being collected.
"""

from __future__ import annotations

from dataclasses import dataclass

METHOD_EVENTS = "events"
METHOD_PROFILER = "profiler"
METHOD_GRAPH = "graph"  # device-graph replays of a batch of calls, timed with device events
METHOD_MSPROF = "msprof"  # kernel durations msprof recorded inside the case's mstx range
# Kernel durations matched to the case by launch order, kernel type and shapes: the profile
# had no marker output (CANN without msproftx export).
METHOD_MSPROF_ORDER = "msprof (order + type, no markers)"
# Kernel durations matched to a row by kernel type and shapes only (a profile without markers
# and without the run's hand-off: `npuperf backfill` of foreign output).
METHOD_MSPROF_SIGNATURE = "msprof (type + signature)"
METHOD_TORCH_NPU = "torch_npu profiler"  # kernel durations of torch_npu's profiler, by marker

# How an NPU session gets kernel device times (--npuperf-profiler).
PROFILER_AUTO, PROFILER_MSPROF, PROFILER_TORCH_NPU, PROFILER_NONE = (
    "auto", "msprof", "torch_npu", "none")
PROFILERS = (PROFILER_AUTO, PROFILER_MSPROF, PROFILER_TORCH_NPU, PROFILER_NONE)

def auto_method(kind: str, *, flush: bool, profiled: bool, graphs: bool) -> str:
    """What --npuperf-method auto times with on a device of `kind`.

    CUDA: graph replays (kernel time without launches), the profiler with an L2 flush (a
    flush between calls cannot be told apart from a replay's time). NPU: NPUGraph replays by
    the same rule, unless the session's profiler supplies the kernel times (msprof wrapping
    the session, torch_npu's profiler asked for: both need every call launched inside its
    case's range) or a flush is asked for (no torch.profiler there): events then. Events on a
    CPU, and on a device without graphs."""
    if kind == "cuda":
        return METHOD_PROFILER if flush else METHOD_GRAPH
    if kind == "npu" and graphs and not (flush or profiled):
        return METHOD_GRAPH
    return METHOD_EVENTS


STATISTICS = ("median", "mean")
UPDATE_MODES = ("all", "missing-only")


@dataclass(frozen=True)
class SamplingPolicy:
    warmup: int = 3  # calls before sampling, at most:
    # warming up stops once this much time went into it (after one call at least): a 60 ms
    # GEMM is warm after its first call, and two more would cost more than its samples' time.
    warmup_time_s: float = 0.025
    min_samples: int = 10
    max_samples: int = 10_000
    budget_s: float = 1.0  # stop sampling once this much time went into calls
    min_time_s: float = 0.1  # and not before this much (steadier numbers for fast kernels)
    precision: float = 0.02  # target relative 95 % CI half-width
    statistic: str = "median"
    flush_l2: bool = False
    # A sample the host's other processes took CPU time from is not the kernel's (a timer
    # that can tell: the CPU's); False keeps such samples, counted.
    reject_preempted: bool = True

    def __post_init__(self) -> None:
        if self.statistic not in STATISTICS:
            raise ValueError(f"statistic must be one of {STATISTICS}, not {self.statistic!r}")
        if self.min_samples < 1 or self.max_samples < self.min_samples:
            raise ValueError("need 1 <= min samples <= max samples")
        if self.warmup < 0:
            raise ValueError(f"warmup must be a count >= 0, got {self.warmup}")
        # `nan <= 0` is False: each bound is asked the way round that NaN fails.
        for name, value, least in (("warmup time", self.warmup_time_s, 0.0),
                                   ("min time", self.min_time_s, 0.0),
                                   ("budget", self.budget_s, None),
                                   ("precision", self.precision, None)):
            if not (_finite(value) and (value > 0 if least is None else value >= least)):
                bound = "> 0" if least is None else ">= 0"
                raise ValueError(f"{name} must be a finite number {bound}, got {value}")


def _finite(value: float) -> bool:
    return value == value and value not in (float("inf"), float("-inf"))


def case_timeout(value: float) -> float | None:
    """`--npuperf-case-timeout`: seconds (None for 0, no timeout); ValueError for a negative,
    infinite or NaN value, which would otherwise silently mean no timeout."""
    if not (_finite(value) and value >= 0):
        raise ValueError(f"case timeout must be a finite number of seconds >= 0 (0: none), "
                         f"got {value}")
    return value or None

# --npuperf-threshold: the minimum effect (a fraction of the baseline's median)
# for a case to be called SLOWER or FASTER (history/compare.py).
DEFAULT_REGRESSION_THRESHOLD = 0.05
