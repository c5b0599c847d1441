"""The device-profiler path: modes, the msprof parent, the hand-off, attribution to cases."""
