"""The device-profiler path: modes, the msprof parent, the hand-off, attribution to cases;
`npuperf profile` (workload.py) and the step marks a profiled script makes (`step`)."""

from .steps import step

__all__ = ["step"]
