"""pytest-benchmark's JSON and compare output, fed with a case's device-time samples.

pytest-benchmark has no public way to hand it measured samples; `_make_stats` is the call its
own fixture uses. Without it (another version), the case is left out of its JSON.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from ..measure.result import CaseResult

_WANTED = ("benchmark_json", "benchmark_autosave", "benchmark_save", "benchmark_compare")


def benchmark_fixture(request: pytest.FixtureRequest):
    """pytest-benchmark's fixture when its JSON/compare output is wanted (no xdist)."""
    config = request.config
    if not config.pluginmanager.hasplugin("benchmark") or hasattr(config, "workerinput"):
        return None
    wanted = any(config.getoption(name, None) for name in _WANTED)
    if not wanted or getattr(config.option, "numprocesses", None):
        return None
    return request.getfixturevalue("benchmark")


def feed_benchmark(benchmark, result: CaseResult, samples: list[float]) -> None:
    """Give pytest-benchmark this case's device-time samples (seconds), not its own timing."""
    make_stats = getattr(benchmark, "_make_stats", None)
    if make_stats is None:
        return
    stats = make_stats(1)
    for sample in samples:
        stats.update(sample / 1e6)
    benchmark.extra_info.update({"npuperf_method": result.method, "npuperf_device": result.device,
                                 "npuperf_status": result.status, "unit": "device time"})
