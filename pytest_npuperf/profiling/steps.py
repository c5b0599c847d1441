"""Marking what a step of a model is, for `npuperf profile`.

    from pytest_npuperf.profiling import step

    model = build_model()          # not traced
    for batch in batches:
        with step():               # one forward, one decode iteration...
            model(batch)

Outside `npuperf profile` a step does nothing (and imports nothing). Under it, the workload's
controller (profiling/workload.py) takes over: the first `--warmup` steps run untraced, the
next `--steps` are traced, each inside a range that the parser keeps (`npuperf.step#N`), and
the steps after them run untraced again. The profiler starts at the first traced step, so the
model's construction, weight loading and warm-up are not in the trace; what runs between
two traced steps is in it, outside the steps, and the parser leaves it out.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Protocol


class StepController(Protocol):
    def step(self) -> contextlib.AbstractContextManager: ...


_controller: StepController | None = None


@contextlib.contextmanager
def step() -> Iterator[None]:
    """One step of the model: a no-op unless `npuperf profile` runs the script."""
    controller = _controller
    if controller is None:
        yield
        return
    with controller.step():
        yield


@contextlib.contextmanager
def controlled_by(controller: StepController) -> Iterator[None]:
    global _controller
    saved, _controller = _controller, controller
    try:
        yield
    finally:
        _controller = saved
