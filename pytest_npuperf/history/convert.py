"""A session's results, or a run JSON written earlier, as history records; and the provenance
of a run (git commit of the suite, host)."""

from __future__ import annotations

import json
import math
import socket
import subprocess
from collections.abc import Callable, Iterable
from operator import attrgetter
from pathlib import Path
from typing import Any

from ..comm.collective_result import CommResult
from ..db.errors import ContractError, NpuperfError
from ..db.samples import samples_from_text
from ..measure.result import CaseResult
from .records import KIND_COLLECTIVE, KIND_KERNEL, CaseRecord, RunRecord, collective_key

RUN_JSON_SCHEMA_PREFIX = "npuperf-run/"
_GIT_TIMEOUT_S = 5.0
_EXTRA_FIELDS = ("file", "row", "nodeid", "error", "fallback", "note", "threads", "host_load",
                 "warmup", "measured_kernel_type", "verified", "wall_s", "time_in_calls_s",
                 "reference_us", "reference_memory_us", "cache", "preempted", "preempted_kept",
                 "impl")


def git_commit(directory: Path) -> tuple[str, bool | None]:
    """(commit, dirty) of the git checkout holding `directory`; ("", None) outside one (or
    without git): never an error."""
    def git(*args: str) -> str | None:
        try:
            done = subprocess.run(["git", "-C", str(directory), *args], capture_output=True,
                                  text=True, timeout=_GIT_TIMEOUT_S, check=False)
        except (OSError, subprocess.SubprocessError):
            return None
        return done.stdout.strip() if done.returncode == 0 else None

    commit = git("rev-parse", "HEAD")
    if not commit:
        return "", None
    status = git("status", "--porcelain", "--untracked-files=no")
    return commit, (None if status is None else bool(status))


def host_name() -> str:
    return socket.gethostname()


def _finite(value: Any) -> float | None:
    if type(value) is float:  # the usual case, 10^6 times in a large run: no conversion
        return value if value - value == 0.0 else None  # nan and +-inf give nan
    if value is None:
        return None
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return number if math.isfinite(number) else None


def _extra(field: Callable[[str], Any]) -> dict[str, Any]:
    return _kept_extra(zip(_EXTRA_FIELDS, map(field, _EXTRA_FIELDS)))


def _kept_extra(pairs: Iterable[tuple[str, Any]]) -> dict[str, Any]:
    extra = {name: value for name, value in pairs if value is not None and value != ""}
    if not extra.get("preempted"):  # the usual case: said by the keys' absence
        extra.pop("preempted", None)
        extra.pop("preempted_kept", None)
    return extra


_extra_values = attrgetter(*_EXTRA_FIELDS)


def case_record(result: CaseResult) -> CaseRecord:
    st = result.stats
    regression = result.regression or {}
    extra = _kept_extra(zip(_EXTRA_FIELDS, _extra_values(result)))
    return CaseRecord(
        kind=KIND_KERNEL, key=result.case_id, kernel=result.kernel_type,
        signature=result.signature, status=result.status, method=result.method,
        statistic=result.statistic, value_us=_finite(result.value),
        samples_count=st.samples if st else 0,
        mean_us=_finite(st.mean) if st else None, median_us=_finite(st.median) if st else None,
        std_us=_finite(st.std) if st else None, min_us=_finite(st.min) if st else None,
        max_us=_finite(st.max) if st else None, p90_us=_finite(st.p90) if st else None,
        q1_us=_finite(st.q1) if st else None, q3_us=_finite(st.q3) if st else None,
        outliers=st.outliers if st else None, precision=_finite(result.precision),
        stop_reason=result.stop_reason, device=result.device, stack=result.stack,
        timestamp=result.timestamp, flops=_finite(result.flops), bytes=_finite(result.bytes),
        bound_us=_finite(result.bound_us), compute_bound_us=_finite(result.compute_bound_us),
        memory_bound_us=_finite(result.memory_bound_us), memory_level=result.memory_level,
        hbm_bound_us=_finite(result.hbm_bound_us), bound_by=result.bound_by,
        achieved_tflops=_finite(result.achieved_tflops),
        achieved_gbps=_finite(result.achieved_gbps), mfu=_finite(result.mfu),
        mbu=_finite(result.mbu), verdict=str(regression.get("verdict") or ""),
        ratio=_finite(regression.get("ratio")), p_value=_finite(regression.get("p_value")),
        baseline_run=str(regression.get("base_run") or ""), extra=extra,
        samples=[float(s) for s in result.samples])


def collective_record(result: CommResult) -> CaseRecord:
    """A collective case (a size-sweep point; comm/collective_result.py): its time is the straggler
    rank's statistic, its samples the straggler's per-op times."""
    point = result.point
    worst = result.slowest()
    regression = result.regression or {}
    extra = {"nodeid": result.nodeid, "error": result.error, "backend": result.backend,
             "straggler_rank": result.straggler_rank, "check": result.check,
             "ops_per_sample": result.ops_per_sample, "timed_calls": result.timed_calls,
             "warmup": result.warmup, "ranks": [r.rank for r in result.ranks],
             "wall_s": result.wall_s}
    return CaseRecord(
        kind=KIND_COLLECTIVE, kernel=point.op, signature=point.case_id,
        key=collective_key(point.op, point.message_bytes, point.num_devices, point.dtype,
                           point.topology_tier),
        status=result.status, method=result.method, statistic=result.statistic,
        value_us=_finite(result.duration_us) if result.measured else None,
        samples_count=len(result.samples) or (worst.samples if worst else 0),
        mean_us=_finite(worst.mean) if worst else None,
        median_us=_finite(worst.median) if worst else None,
        min_us=_finite(worst.min) if worst else None, max_us=_finite(worst.max) if worst else None,
        q1_us=_finite(worst.q1) if worst else None, q3_us=_finite(worst.q3) if worst else None,
        precision=_finite(result.precision), stop_reason=result.stop_reason,
        device=result.device, stack=result.stack, timestamp=result.finished,
        message_bytes=point.message_bytes, num_devices=point.num_devices, dtype=point.dtype,
        tier=point.topology_tier, algbw_gbps=_finite(result.algbw_gbps()),
        busbw_gbps=_finite(result.busbw_gbps()),
        verdict=str(regression.get("verdict") or ""), ratio=_finite(regression.get("ratio")),
        p_value=_finite(regression.get("p_value")),
        baseline_run=str(regression.get("base_run") or ""),
        extra={k: v for k, v in extra.items() if v not in (None, "", [])},
        samples=[float(s) for s in result.samples])


def history_record(result: CaseResult | CommResult) -> CaseRecord:
    """The history record of a kernel case or a collective case."""
    return collective_record(result) if isinstance(result, CommResult) else case_record(result)


def run_record(*, run_id: str, started: float, started_iso: str, device: dict[str, Any],
               options: dict[str, Any], source: str, target: str, cases: int,
               exit_status: int | None, baseline: str = "", root: Path | None = None,
               good: bool = True) -> RunRecord:
    """`good`: False keeps a run that exited 0 out of `last-good` (a partial run, one measured
    on a preempted host)."""
    commit, dirty = git_commit(root) if root is not None else ("", None)
    stack = device.get("stack") if isinstance(device.get("stack"), dict) else {}
    return RunRecord(
        run_id=run_id, started=started, started_iso=started_iso,
        device=str(device.get("database_device") or ""), device_kind=str(device.get("kind") or ""),
        device_name=str(device.get("name") or ""), stack=dict(stack), host=host_name(),
        git_commit=commit, git_dirty=dirty, options=options, source=source, target=target,
        cases=cases, exit_status=exit_status,
        passed=None if exit_status is None else exit_status == 0 and good, baseline=baseline)


# -- run JSON files (report/runjson.py) ------------------------------------------------------------
def read_run_json(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise NpuperfError(f"{path}: no such file") from None
    except IsADirectoryError:
        raise NpuperfError(f"{path}: a directory, not a run JSON file") from None
    except OSError as exc:
        raise NpuperfError(f"{path}: cannot read it: {exc.strerror or exc}") from None
    except (ValueError, UnicodeDecodeError) as exc:
        raise ContractError(f"{path}: not a run JSON file (invalid JSON: {exc})") from None
    schema = data.get("schema") if isinstance(data, dict) else None
    if not isinstance(schema, str) or not schema.startswith(RUN_JSON_SCHEMA_PREFIX):
        raise ContractError(f"{path}: not a run JSON file (no {RUN_JSON_SCHEMA_PREFIX}N schema)")
    if not isinstance(data.get("cases"), list) or not data.get("run_id"):
        raise ContractError(f"{path}: run JSON without a run id or a case list")
    return data


def _epoch(iso: str) -> float:
    import datetime as _dt

    try:
        return _dt.datetime.fromisoformat(iso).timestamp()
    except (TypeError, ValueError):
        return 0.0


def records_from_run_json(data: dict[str, Any], path: Path) -> tuple[RunRecord, list[CaseRecord]]:
    session = data.get("session") or {}
    database = data.get("database") or {}
    device = session.get("device") or {}
    started_iso = str(session.get("started") or "")
    run = RunRecord(
        run_id=str(data["run_id"]), started=float(data.get("started_epoch") or _epoch(started_iso)),
        started_iso=started_iso, device=str(device.get("database_device") or ""),
        device_kind=str(device.get("kind") or ""), device_name=str(device.get("name") or ""),
        stack=device.get("stack") if isinstance(device.get("stack"), dict) else {},
        host=str(data.get("host") or ""), git_commit=str((data.get("git") or {}).get("commit") or ""),
        git_dirty=(data.get("git") or {}).get("dirty"), options=session.get("options") or {},
        source=str(database.get("source") or ""), target=str(database.get("target") or ""),
        cases=len(data["cases"]), imported_from=str(path),
        baseline=str((data.get("baseline") or {}).get("ref") or ""))
    cases = []
    for number, case in enumerate(data["cases"], 1):
        if not isinstance(case, dict) or not case.get("case_id"):
            raise ContractError(f"{path}: case {number} has no case_id")
        cases.append(_case_from_json(case, path))
    return run, cases


def _case_from_json(case: dict[str, Any], path: Path) -> CaseRecord:
    stats = case.get("stats") or {}
    regression = case.get("regression") or {}
    try:
        samples = samples_from_text(str(case.get("samples_z") or ""))
    except ValueError as exc:
        raise ContractError(f"{path}: case {case.get('case_id')}: damaged samples: "
                            f"{exc}") from None
    extra = _extra(case.get)
    return CaseRecord(
        kind=str(case.get("kind") or KIND_KERNEL), key=str(case["case_id"]),
        kernel=str(case.get("kernel_type") or ""), signature=str(case.get("signature") or ""),
        status=str(case.get("status") or ""), method=str(case.get("method") or ""),
        statistic=str(case.get("statistic") or "median"), value_us=_finite(case.get("value")),
        samples_count=int(stats.get("samples") or len(samples)),
        mean_us=_finite(stats.get("mean")), median_us=_finite(stats.get("median")),
        std_us=_finite(stats.get("std")), min_us=_finite(stats.get("min")),
        max_us=_finite(stats.get("max")), p90_us=_finite(stats.get("p90")),
        q1_us=_finite(stats.get("q1")), q3_us=_finite(stats.get("q3")),
        outliers=stats.get("outliers"), precision=_finite(case.get("precision")),
        stop_reason=str(case.get("stop_reason") or ""), device=str(case.get("device") or ""),
        stack=str(case.get("stack") or ""), timestamp=str(case.get("timestamp") or ""),
        flops=_finite(case.get("flops")), bytes=_finite(case.get("bytes")),
        bound_us=_finite(case.get("bound_us")),
        compute_bound_us=_finite(case.get("compute_bound_us")),
        memory_bound_us=_finite(case.get("memory_bound_us")),
        memory_level=str(case.get("memory_level") or ""),
        hbm_bound_us=_finite(case.get("hbm_bound_us")), bound_by=str(case.get("bound_by") or ""),
        achieved_tflops=_finite(case.get("achieved_tflops")),
        achieved_gbps=_finite(case.get("achieved_gbps")), mfu=_finite(case.get("mfu")),
        mbu=_finite(case.get("mbu")), verdict=str(regression.get("verdict") or ""),
        ratio=_finite(regression.get("ratio")), p_value=_finite(regression.get("p_value")),
        baseline_run=str(regression.get("base_run") or ""), extra=extra, samples=samples)
