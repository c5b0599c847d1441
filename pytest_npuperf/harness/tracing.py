"""The `npuperf_trace` fixture's function: profile a model step from a test the way `npuperf
profile` profiles a script (warm-up steps untraced, then traced with shapes recorded), on the
run's device, into `<--npuperf-out>/traces/`; optionally parsed into a database at once."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

import pytest

from .options import read_settings


def tracer(request: pytest.FixtureRequest) -> Callable[..., Path]:
    settings = read_settings(request.config)
    test = re.sub(r"[^0-9A-Za-z_.-]+", "_", request.node.name)

    def trace(step: Callable[[], object], name: str = "trace", *, warmup: int = 1,
              steps: int = 1, parse_into: Path | None = None) -> Path:
        from ..profiling.workload import trace_workload

        path = trace_workload(step, settings.out / "traces" / f"{test}_{name}",
                              kind=settings.device, warmup=warmup, steps=steps)
        if parse_into is not None:
            from ..ingest.parse import parse_profiling

            parse_profiling(path, parse_into, show_progress=False)
        return path
    return trace
