"""pytest-benchmark's JSON, saving, comparison and table, fed with each case's device-time
samples by the process that receives every result: the serial process, or the xdist
controller (pytest-benchmark itself refuses to measure under xdist, and its fixture, which
the cases never call, would warn once per case that it was not used).

pytest-benchmark has no public way to hand it measured samples: its session's `benchmarks`
list and `Metadata` record are what its own fixture fills. Without them (another version),
the run's notes say that its JSON holds no case.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from ..measure.result import CaseResult

_WANTED = ("benchmark_json", "benchmark_autosave", "benchmark_save", "benchmark_compare")


def benchmark_session(config: pytest.Config):
    """pytest-benchmark's session when its JSON, saving or comparison is asked for."""
    if not config.pluginmanager.hasplugin("benchmark"):
        return None
    if not any(config.getoption(name, None) for name in _WANTED):
        return None
    return getattr(config, "_benchmarksession", None)


def add_result(session, result: CaseResult) -> str | None:
    """The case's kept samples (seconds) as one pytest-benchmark record; what went wrong, or
    None."""
    if result.stats is None or not result.samples:
        return None
    try:
        from pytest_benchmark.stats import Metadata
    except ImportError as exc:
        return f"pytest-benchmark's JSON holds no case: {exc}"
    stats = result.stats
    name = result.nodeid.rsplit("::", 1)[-1] or result.case_id
    source = SimpleNamespace(
        name=name, fullname=result.nodeid or result.case_id, group=result.kernel_type,
        param=result.case_id, params={"npuperf_case": result.case_id}, cprofile_stats=None,
        has_error=False, extra_info={
            "npuperf_method": result.method, "npuperf_device": result.device,
            "npuperf_status": result.status, "npuperf_statistic": result.statistic,
            "npuperf_value_us": result.value, "npuperf_min_us": stats.min,
            "npuperf_samples": stats.samples, "unit": "device time",
            "npuperf_data": f"{len(result.samples)} of {stats.samples} samples, evenly spread "
                            f"over the case (the npuperf_* statistics are of all of them)"})
    record = Metadata(source, iterations=1, options={
        "timer": f"npuperf {result.method}", "warmup": result.warmup, "min_rounds": None,
        "max_time": None, "min_time": None, "disable_gc": False})
    for sample in result.samples:
        record.stats.update(sample / 1e6)
    session.benchmarks.append(record)
    return None
