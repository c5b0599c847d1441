"""Realistic inputs of the report functions: a session with every case status, a backfill
outcome with hotspots, duplicates and pruned rows, and variants (dry run, non-native, empty)."""

from __future__ import annotations

import dataclasses
import hashlib
from pathlib import Path

from pytest_npuperf.history.compare import compare_samples
from pytest_npuperf.measure.result import (
    METHOD_PROFILER,
    STATUS_ERROR,
    STATUS_FAILED,
    STATUS_OK,
    STATUS_SKIPPED,
    STATUS_SUSPECT,
    STATUS_TIMEOUT,
    CaseResult,
)
from pytest_npuperf.replay.outcome import FileOutcome, GapRow, SessionInfo, WriteOutcome

ASCEND = "ATLAS_800_A3_752T_128G_DIE"
VERSION = "vllm0.18.0_torch2.9.0_cann8.5"
STAMP = "20250314_092653"
RUN_ID = "20250314_092653-4f1c"


def case(kernel_type: str, shape: str, status: str = STATUS_OK, *,
         samples: list[float] | None = None,
         error: str = "", wall_s: float = 0.5, in_calls_s: float = 0.3, flops: float = 0.0,
         nbytes: float = 0.0, bound_us: float | None = None, row: int = 1) -> CaseResult:
    digest = hashlib.sha256(f"{kernel_type}{shape}".encode()).hexdigest()[:6]
    case_id = f"{kernel_type}-{shape.replace(';', 'x')}-BF16-{digest}"
    result = CaseResult(
        case_id=case_id, nodeid=f"bench/test_kernels.py::test_kernel[{case_id}]",
        kernel_type=kernel_type, file=f"{kernel_type}.csv",
        signature=f"('{shape}', 'DT_BF16;DT_BF16', 'ND;ND')", row=row, status=status,
        method=METHOD_PROFILER, error=error, device="cpu", warmup=3 if samples else 0,
        time_in_calls_s=in_calls_s if samples else 0.0, wall_s=wall_s, flops=flops,
        bytes=nbytes, bound_us=bound_us,
        implementation=f"{kernel_type} implementation" if samples else "")
    if samples:
        result.set_samples(samples)
        result.precision, result.stop_reason = 0.025, "precision reached"
    return result


def session_results() -> list[CaseResult]:
    """Nine cases: four ok (one with a long tail), one suspect, failed, error, timeout and
    two skipped."""
    return [
        case("MatMulV2", "128,7168;3584,7168", samples=[40.0, 41.0, 42.0, 40.5, 90.0],
             wall_s=2.0, in_calls_s=1.5, flops=2 * 128 * 7168 * 3584,
             nbytes=2 * (128 * 7168 + 3584 * 7168 + 128 * 3584), row=1),
        case("MatMulV2", "1,7168;3584,7168", samples=[10.0] * 8, wall_s=0.4, in_calls_s=0.2,
             flops=2 * 7168 * 3584, nbytes=2 * (7168 + 3584 * 7168 + 3584), row=2),
        case("RmsNorm", "128,7168;7168", samples=[5.0, 5.5, 6.0], wall_s=0.3, in_calls_s=0.1,
             nbytes=2 * 3 * 128 * 7168, row=1),
        case("Add", "128,7168;128,7168", samples=[3.0], wall_s=0.1, in_calls_s=0.01, row=1),
        case("SwiGlu", "128,36864", STATUS_SUSPECT, samples=[0.5, 0.6, 0.55], bound_us=4.2,
             wall_s=0.2, in_calls_s=0.05, nbytes=2 * 128 * 36864 * 1.5, row=1),
        case("MatMulV3", "4096,7168;18432,7168", STATUS_FAILED,
             error="RuntimeError: out of memory | tried to allocate 1.2 GiB\nsecond line",
             wall_s=3.0, row=7),
        case("SoftmaxV2", "32,128,4096", STATUS_ERROR,
             error="SoftmaxV2.csv row 3, column Input Data Types: unknown dtype 'DT_BF17'",
             wall_s=0.01, row=3),
        case("BatchMatMulV2", "64,512,128;64,128,512", STATUS_TIMEOUT,
             error="case exceeded --npuperf-case-timeout=30s", wall_s=30.0, row=2),
        case("GroupedMatmul", "8,7168", STATUS_SKIPPED, error="no replay for GroupedMatmul yet",
             wall_s=0.0, row=1),
        case("GroupedMatmul", "16,7168", STATUS_SKIPPED, error="no replay for GroupedMatmul yet",
             wall_s=0.0, row=2),
    ]


def gaps() -> list[GapRow]:
    """Ratios 0.5 (severity 2), 1.37, 3.0, 1.1 (in band), 0.7 (severity 1.43): hotspot order
    is 3.0, 0.5, 0.7, 1.37."""
    return [
        GapRow("MatMulV2", "MatMulV2.csv", 20.0, 40.0, "128,7168;3584,7168 -> 128,3584"),
        GapRow("RmsNorm", "RmsNorm.csv", 13.7, 10.0, "128,7168;7168 -> 128,7168"),
        GapRow("Add", "Add.csv", 9.0, 3.0, "128,7168;128,7168 -> 128,7168"),
        GapRow("MatMulV2", "MatMulV2.csv", 11.0, 10.0, "1,7168;3584,7168 -> 1,3584"),
        GapRow("SwiGlu", "SwiGlu.csv", 7.0, 10.0, "128,36864 -> 128,18432"),
    ]


def outcome(tmp: Path | None = None, *, native: bool = False, dry_run: bool = False,
            with_gaps: bool = True) -> WriteOutcome:
    root = tmp or Path("/data")
    source = root / "data" / ASCEND / "vllm_ascend" / VERSION
    target = None if dry_run else (
        source if native else root / "out" / "CPU_x86_64" / "vllm_ascend" / VERSION)
    files = [
        FileOutcome("MatMulV2.csv", "MatMulV2", rows=40, updated=2, unchanged=36, missing=2,
                    duplicates=2, examples={"duplicates": ["128,7168;3584,7168 (x2)",
                                                           "1,7168;3584,7168 (x2)"],
                                            "missing": ["2048,7168;3584,7168"]}),
        FileOutcome("MatMulV3.csv", "MatMulV3", rows=10, failed=1, unchanged=9, missing=1),
        FileOutcome("RmsNorm.csv", "RmsNorm", rows=5, updated=1, deleted=2, unchanged=4,
                    examples={"deleted": ["1,7168;7168", "2,7168;7168"]}),
    ]
    return WriteOutcome(source=source, target=target, native=native, dry_run=dry_run,
                           run_id=RUN_ID, stamp=STAMP, files=files,
                           gaps=gaps() if with_gaps else [gaps()[3]],
                           notes=["3 MatMul measurements landed in MatMulV3.csv (cross-file rule)"])


def session(wall_s: float = 40.0) -> SessionInfo:
    return SessionInfo(
        run_id=RUN_ID, started="2025-03-14T09:26:13", wall_s=wall_s,
        device={"kind": "cpu", "index": 0, "name": "x86_64", "database_device": "CPU_x86_64",
                "stack": {"torch": "2.9.0+cpu"}},
        options={"warmup": 3, "min_samples": 5, "max_samples": 200, "budget_s": 1.0,
                 "precision": 0.02, "out": Path("reports-out"), "devices": ("cpu",),
                 "nan_option": float("nan")},
        workers=1)


def with_stamp(value: WriteOutcome, stamp: str) -> WriteOutcome:
    return dataclasses.replace(value, stamp=stamp)


HCOM = """message_bytes,num_devices,dtype,topology_tier,Duration(us),bandwidth_gbps,busbw_gbps
1024,8,DT_BF16,1,20.0,0.0512,0.0896
1048576,8,DT_BF16,1,60.0,17.47,30.58
16777216,8,DT_BF16,1,400.0,41.94,73.4
"""


def gemm_results() -> list[CaseResult]:
    """Eight MatMulV2 cases, M in 1..1024 for two (N, K), with bounds and verdicts against a
    baseline (the two with M=128 are SLOWER)."""
    results = []
    for m in (1, 16, 128, 1024):
        for n, k in ((7168, 1536), (512, 7168)):
            r = case("MatMulV2", f"{m},{k};{n},{k}", samples=[5.0 + m * n * k / 1e9] * 12,
                     flops=2.0 * m * n * k, nbytes=2.0 * (m * k + n * k + m * n))
            r.case_id = f"MatMulV2-{m}x{k}x{n}-BF16-{m:04x}{n:04x}"
            median = r.stats.median
            r.bound_us, r.bound_by, r.memory_level = median / 3, "memory", "LLC"
            r.compute_bound_us, r.memory_bound_us = r.flops / 1e11 * 1e6, r.bytes / 4e10 * 1e6
            r.hbm_bound_us = r.bytes / 2e10 * 1e6
            r.bound_us = max(r.compute_bound_us, r.memory_bound_us)
            r.bound_by = "compute" if r.bound_us == r.compute_bound_us else "memory"
            r.achieved_tflops = r.flops / (median * 1e-6) / 1e12
            base = [median * 0.7] * 12 if m == 128 else [median] * 12
            r.regression = compare_samples(base, r.samples, base_run="r0").to_dict()
            results.append(r)
    return results
