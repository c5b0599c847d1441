"""--npuperf-profiler torch_npu: one torch_npu profiler session around a whole pytest session.

Started before the first case and stopped at session finish, never per case (starting a
profiler costs about a second). The API, read in Ascend/pytorch (torch_npu/profiler/
__init__.py, profiler.py, experimental_config.py):
- `torch_npu.profiler.profile(activities=[ProfilerActivity.CPU, ProfilerActivity.NPU],
  record_shapes=..., on_trace_ready=..., experimental_config=...)`, `.start()`, `.stop()`;
  without a schedule every step records, and `stop()` hands the trace to `on_trace_ready`;
- `tensorboard_trace_handler(dir_name, worker_name)` parses it into
  `<dir_name>/<worker_name>_<pid>_<time>_ascend_pt/ASCEND_PROFILER_OUTPUT/kernel_details.csv`
  (profiler/_profiler_path_creator.py names the directory);
- `_ExperimentalConfig(profiler_level=ProfilerLevel.Level1, aic_metrics=AiCMetrics.
  PipeUtilization, msprof_tx=True, data_simplification=False)`: Level1 adds the kernels'
  shapes and AI Core counters, msprof_tx turns `torch_npu.npu.mstx` ranges on (mstx_mgr.cpp
  emits only while it is set), and data_simplification=False keeps the run's
  `PROF_*/mindstudio_profiler_output/msprof_tx_*.csv`, where the ranges are.
"""

from __future__ import annotations

from pathlib import Path
from types import ModuleType

WORKER_PREFIX = "npuperf_dev"  # ingest/op_summary.ASCEND_PT_WORKER reads the device back


class TorchNpuProfile:
    def __init__(self, torch_npu: ModuleType, root: Path, device_index: int) -> None:
        self.root = Path(root)
        self.root.mkdir(parents=True, exist_ok=True)
        profiler = torch_npu.profiler
        config = profiler._ExperimentalConfig(
            profiler_level=profiler.ProfilerLevel.Level1,
            aic_metrics=profiler.AiCMetrics.PipeUtilization,
            msprof_tx=True, data_simplification=False)
        self._profile = profiler.profile(
            activities=[profiler.ProfilerActivity.CPU, profiler.ProfilerActivity.NPU],
            record_shapes=True,
            on_trace_ready=profiler.tensorboard_trace_handler(
                str(self.root), worker_name=f"{WORKER_PREFIX}{device_index}"),
            experimental_config=config)
        self._profile.start()
        self.running = True

    def stop(self) -> None:
        """Stop collecting; torch_npu parses the trace into `root` before this returns."""
        if self.running:
            self.running = False
            self._profile.stop()
