"""Profiling a workload the way `npuperf parse` reads it: warm-up steps first, untraced, then
the measured steps under the device's profiler with input shapes recorded.

- CPU and CUDA: torch.profiler, the trace exported as one Chrome trace (`<out>.json`);
- NPU: torch_npu's profiler at level 1 (kernel shapes), its output directory (`<out>/`, with
  `kernel_details.csv` and `trace_view.json`) written by its tensorboard handler.

Warm-up matters: a first call pays for allocation, kernel selection and caches (a first CPU
GEMM here took 20 ms where the next took 30 us), and a model's steady state is what a
simulator adds up.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

from ..db.errors import NpuperfError

DEVICE_KINDS = ("auto", "cpu", "cuda", "npu")


def resolve_kind(kind: str) -> str:
    """`auto`: the NPU where torch_npu imports, else CUDA where available, else the CPU."""
    if kind != "auto":
        return kind
    from .mode import torch_npu_present

    if torch_npu_present():
        return "npu"
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def _synchronize(kind: str) -> None:
    import torch

    if kind == "cuda":
        torch.cuda.synchronize()
    elif kind == "npu":
        torch.npu.synchronize()  # type: ignore[attr-defined]


def trace_workload(step: Callable[[], object], out: str | Path, *, kind: str = "auto",
                   warmup: int = 1, steps: int = 1) -> Path:
    """Run `step` `warmup` times, then `steps` times under the profiler; returns the trace
    (CPU, CUDA: a `.json` file) or the torch_npu output directory (NPU)."""
    if warmup < 0 or steps < 1:
        raise NpuperfError(f"warm-up steps must be >= 0 and steps >= 1, got {warmup}, {steps}")
    kind = resolve_kind(kind)
    out = Path(out)
    for _ in range(warmup):
        step()
    _synchronize(kind)
    if kind == "npu":
        return _trace_npu(step, out, steps)
    from torch.profiler import ProfilerActivity, profile

    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if kind == "cuda" else [])
    with profile(activities=activities, record_shapes=True) as prof:
        for _ in range(steps):
            step()
        _synchronize(kind)
    path = out if out.suffix == ".json" else out.with_suffix(".json")
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    prof.export_chrome_trace(str(temporary))
    os.replace(temporary, path)
    return path


def _trace_npu(step: Callable[[], object], out: Path, steps: int) -> Path:
    import torch_npu  # the NPU's own profiler: kernel_details.csv carries the kernels' shapes

    profiler = torch_npu.profiler
    # As torch_npu.py's session profile: Level1 adds the kernels' shapes and AI Core counters.
    config = profiler._ExperimentalConfig(profiler_level=profiler.ProfilerLevel.Level1,
                                          aic_metrics=profiler.AiCMetrics.PipeUtilization)
    out.mkdir(parents=True, exist_ok=True)
    with profiler.profile(
            activities=[profiler.ProfilerActivity.CPU, profiler.ProfilerActivity.NPU],
            record_shapes=True, experimental_config=config,
            on_trace_ready=profiler.tensorboard_trace_handler(str(out))):
        for _ in range(steps):
            step()
        _synchronize("npu")
    return out


def script_step(command: list[str]) -> Callable[[], None]:
    """One run of `SCRIPT ARGS...` or `-m MODULE ARGS...` as `python` would run it, in this
    process (its `sys.argv` set; an exit with status 0 is a normal end)."""
    import runpy
    import sys

    if not command:
        raise NpuperfError("no script to profile: give SCRIPT [ARGS] or -m MODULE [ARGS]")
    module = command[0] == "-m"
    if module and len(command) < 2:
        raise NpuperfError("-m needs a module name")
    target = command[1] if module else command[0]
    if not module and not Path(target).is_file():
        raise NpuperfError(f"{target}: no such script")
    argv = [target, *command[2 if module else 1:]]

    def step() -> None:
        saved = sys.argv
        sys.argv = list(argv)
        try:
            if module:
                runpy.run_module(target, run_name="__main__", alter_sys=True)
            else:
                runpy.run_path(target, run_name="__main__")
        except SystemExit as exc:
            if exc.code not in (None, 0):
                raise NpuperfError(f"{target} exited with status {exc.code}") from None
        finally:
            sys.argv = saved
    return step


def main(argv: list[str] | None = None) -> int:
    """`python -m pytest_npuperf.profiling.workload --out OUT [--device K] [--warmup N]
    [--steps N] -- SCRIPT [ARGS] | -m MODULE [ARGS]` (what `npuperf profile` runs)."""
    import argparse
    import sys

    parser = argparse.ArgumentParser(prog="python -m pytest_npuperf.profiling.workload")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--device", choices=DEVICE_KINDS, default="auto")
    parser.add_argument("--warmup", type=int, default=1)
    parser.add_argument("--steps", type=int, default=1)
    parser.add_argument("command", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    try:
        path = trace_workload(script_step(command), args.out, kind=args.device,
                              warmup=args.warmup, steps=args.steps)
    except NpuperfError as exc:
        print(f"npuperf profile: {exc}", file=sys.stderr)
        return 2
    print(path)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
