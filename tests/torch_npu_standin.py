"""A stand-in for torch_npu's profiler and mstx (tests only), with the real signatures.

Signatures as in Ascend/pytorch: torch_npu/profiler/profiler.py (`profile` keyword-only
arguments, `tensorboard_trace_handler(dir_name, worker_name, analyse_flag, async_mode)`),
experimental_config.py (`_ExperimentalConfig` keywords and defaults), npu/mstx.py
(`range_start(message, stream=None, domain='default')`, `range_end(range_id, domain=...)`).
Behaviour copied from what torch_npu does, where the product depends on it:
- mstx ranges are recorded only while a profiler with msprof_tx is running (mstx_mgr.cpp);
- `stop()` hands the trace to `on_trace_ready`; the handler writes
  `<dir>/<worker>_<pid>_<time>_ascend_pt/ASCEND_PROFILER_OUTPUT/kernel_details.csv` and the
  markers to `PROF_*/mindstudio_profiler_output/msprof_tx_*.csv`, then deletes
  `mindstudio_profiler_output` unless data_simplification=False (_profiling_parser.py).
Kernels: one RmsNorm kernel per `npu_rms_norm` call made inside a range, with duration
`kernel_duration(range_index, call_index)`.
"""

from __future__ import annotations

import os
import shutil
import time
import types
from pathlib import Path

from tests.conftest import kd_row, write_kernel_details
from tests.profile_data import Range, write_markers


def kernel_duration(range_index: int, call: int) -> float:
    return round(20.0 + 5.0 * range_index + 0.5 * call, 3)


class Recorder:
    def __init__(self) -> None:
        self.calls: list[tuple[str, dict]] = []  # (api, arguments)
        self.ranges: list[dict] = []
        self.kernels: list[dict] = []
        self.active: object | None = None  # the running profile's config


def install(module: types.ModuleType) -> Recorder:
    """Give a stand-in torch_npu module (tests/test_devices.fake_torch_npu) a profiler, an mstx
    that records while it runs, and an npu_rms_norm that launches a "kernel"."""
    rec = Recorder()
    profiler = types.ModuleType("torch_npu.profiler")
    profiler.ProfilerActivity = types.SimpleNamespace(CPU="ProfilerActivity.CPU",
                                                      NPU="ProfilerActivity.NPU")
    profiler.ProfilerLevel = types.SimpleNamespace(Level0="Level0", Level1="Level1",
                                                   Level2="Level2")
    profiler.AiCMetrics = types.SimpleNamespace(AiCoreNone="AiCoreNone",
                                                PipeUtilization="PipeUtilization")
    profiler.ExportType = types.SimpleNamespace(Text="text", Db="db")

    class _ExperimentalConfig:
        def __init__(self, profiler_level="Level0", aic_metrics="PipeUtilization",
                     l2_cache=False, msprof_tx=False, mstx=False, data_simplification=True,
                     record_op_args=False, op_attr=False, gc_detect_threshold=None,
                     export_type="text", host_sys=None, mstx_domain_include=None,
                     mstx_domain_exclude=None, sys_io=False, sys_interconnection=False):
            self.kwargs = dict(profiler_level=profiler_level, aic_metrics=aic_metrics,
                               msprof_tx=msprof_tx, mstx=mstx,
                               data_simplification=data_simplification)
            rec.calls.append(("_ExperimentalConfig", dict(self.kwargs)))

    def tensorboard_trace_handler(dir_name=None, worker_name=None, analyse_flag=True,
                                  async_mode=False):
        rec.calls.append(("tensorboard_trace_handler", {"dir_name": dir_name,
                                                        "worker_name": worker_name}))

        def handler(prof):
            _write_output(rec, Path(dir_name), worker_name, prof.experimental_config)
        return handler

    class profile:
        def __init__(self, *, activities=None, schedule=None, on_trace_ready=None,
                     record_shapes=False, profile_memory=False, with_stack=False,
                     with_flops=False, with_modules=False, experimental_config=None,
                     execution_trace_observer=None, custom_trace_id_callback=None,
                     use_cuda=None):
            self.on_trace_ready = on_trace_ready
            self.experimental_config = experimental_config
            rec.calls.append(("profile", {"activities": activities, "schedule": schedule,
                                          "record_shapes": record_shapes}))

        def start(self):
            rec.calls.append(("start", {}))
            rec.active = self.experimental_config

        def stop(self):
            rec.calls.append(("stop", {}))
            rec.active = None
            if self.on_trace_ready is not None:
                self.on_trace_ready(self)

    profiler._ExperimentalConfig = _ExperimentalConfig
    profiler.tensorboard_trace_handler = tensorboard_trace_handler
    profiler.profile = profile
    module.profiler = profiler

    def range_start(message, stream=None, domain="default"):
        config = rec.active
        if config is None or not (config.kwargs["msprof_tx"] or config.kwargs["mstx"]):
            return 0  # torch_npu's mstx is silent unless its profiler collects it
        rec.ranges.append({"message": message, "start": time.time() * 1e6, "end": None,
                           "stream": stream, "calls": 0})
        return len(rec.ranges)

    def range_end(range_id, domain="default"):
        if range_id:
            rec.ranges[range_id - 1]["end"] = time.time() * 1e6

    module.npu.mstx = types.SimpleNamespace(range_start=range_start, range_end=range_end)

    def npu_rms_norm(x, gamma, epsilon=1e-6):
        open_ranges = [r for r in rec.ranges if r["end"] is None]
        if rec.active is not None and open_ranges:
            current = open_ranges[-1]
            rec.kernels.append({"range": len(rec.ranges) - 1, "call": current["calls"],
                                "start": time.time() * 1e6,
                                "shapes": (",".join(map(str, x.shape)),
                                           ",".join(map(str, gamma.shape)))})
            current["calls"] += 1
        return x, x

    module.npu_rms_norm = npu_rms_norm
    return rec


def _write_output(rec: Recorder, root: Path, worker: str, config) -> None:
    stamp = time.strftime("%Y%m%d%H%M%S") + "000"
    run = root / f"{worker}_{os.getpid()}_{stamp}_ascend_pt"
    rows = []
    for kernel in rec.kernels:
        x, gamma = kernel["shapes"]
        rows.append(kd_row("RmsNorm", kernel_duration(kernel["range"], kernel["call"]),
                           start=f"{kernel['start']:.3f}", in_shapes=f"{x};{gamma}",
                           in_dtypes="DT_BF16;DT_BF16", in_formats="ND;ND",
                           out_shapes=f"{x};{x.rsplit(',', 1)[0]},1",
                           out_dtypes="DT_BF16;FLOAT", out_formats="ND;ND",
                           counters={"aicore_time(us)": 1.0 + kernel["call"]}))
    write_kernel_details(run / "ASCEND_PROFILER_OUTPUT" / "kernel_details.csv", rows)
    output = run / "PROF_000001_STANDIN" / "mindstudio_profiler_output"
    # Ranges opened on a stream carry device times (the newest marker form).
    write_markers(output / f"msprof_tx_{stamp[:14]}.csv",
                  [Range(r["message"], r["start"], r["end"], pid=os.getpid(), device=0,
                         on_device=r["stream"] is not None) for r in rec.ranges if r["end"]],
                  "new")
    if config is None or config.kwargs["data_simplification"]:
        shutil.rmtree(output)
