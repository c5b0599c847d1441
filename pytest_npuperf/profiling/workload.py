"""Profiling a workload the way `npuperf parse` reads it: warm-up steps first, untraced, then
the measured steps under the device's profiler with input shapes recorded.

- CPU and CUDA: torch.profiler, the trace exported as one Chrome trace (`<out>.json`);
- NPU: torch_npu's profiler at level 1 (kernel shapes), its output directory (`<out>/`, with
  `kernel_details.csv` and `trace_view.json`) written by its tensorboard handler.

What a step is: a callable's call (`trace_workload`, `npuperf profile --call`), a block a
script marks (`pytest_npuperf.profiling.step`, profiling/steps.py), or, in a script that marks
none, the whole script: then its model construction is in the trace too, and the parse says
how much of it went to initialisation. Each traced step is a range `npuperf.step#N` the
parser keeps apart from what ran between the steps.

While the steps are traced, the calls of known module kinds get ranges that carry their
inputs (module_ranges.py: one RMS norm, one rotary embedding... is one row), and the host is
watched (host_watch.py): the trace's metadata (key `npuperf`) records the device, the
intra-op threads, the host's load and whether the in-model times can be trusted.

Warm-up matters: a first call pays for allocation, kernel selection and caches (a first CPU
GEMM here took 20 ms where the next took 30 us), and a model's steady state is what a
simulator adds up.

Run as `python -m pytest_npuperf.profiling.workload` (what `npuperf profile` does), the result
(trace path, steps, trust) goes to the JSON file `--result` names: the workload's own standard
output is left to the workload.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from ..db.errors import NpuperfError
from ..kernels.module_kinds import STEP_RANGE, STEP_WAITS, ModuleKinds, load_kinds

DEVICE_KINDS = ("auto", "cpu", "cuda", "npu")
META_KEY = "npuperf"


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


@dataclass
class Profiled:
    """What a profile produced: the trace, the steps and the host's verdict."""

    path: Path
    traced_steps: int = 0
    marked_steps: int = 0  # steps the script marked (0: the whole script was the step)
    trust: str = ""
    notes: list[str] = field(default_factory=list)

    def as_dict(self) -> dict:
        return {"trace": str(self.path), "traced_steps": self.traced_steps,
                "marked_steps": self.marked_steps, "trust": self.trust, "notes": self.notes}


def _device_name(kind: str) -> str:
    from ..devices.names import cpu_model, database_device

    if kind == "cuda":
        import torch

        return database_device("cuda", torch.cuda.get_device_name())
    if kind == "cpu":
        return database_device("cpu", cpu_model())
    return ""


def _stack() -> str:
    import platform

    import torch

    return f"torch {torch.__version__}, python {platform.python_version()}"


class _Session:
    """One profiler session around the traced steps: the profiler, the module ranges, the
    host watch, the metadata, the export."""

    def __init__(self, kind: str, out: Path, kinds: ModuleKinds | None) -> None:
        self.kind, self.out, self.kinds = kind, out, kinds
        self._stack = contextlib.ExitStack()
        self._profiler = None
        self._watch = None
        self.path: Path | None = None
        self.trust = ""

    def start(self) -> None:
        import torch

        from .host_watch import HostWatch

        _synchronize(self.kind)
        self._profiler = self._stack.enter_context(self._profile())
        if self.kinds is not None:
            from .module_ranges import module_ranges

            self._stack.enter_context(module_ranges(self.kinds))
        self._watch = HostWatch(torch.get_num_threads(), judge=self.kind == "cpu").start()

    def _profile(self):
        if self.kind == "npu":
            import torch_npu  # the NPU's own profiler: kernel_details.csv has kernel shapes

            profiler = torch_npu.profiler
            # As torch_npu.py's session profile: Level1 adds the kernels' shapes and counters.
            config = profiler._ExperimentalConfig(
                profiler_level=profiler.ProfilerLevel.Level1,
                aic_metrics=profiler.AiCMetrics.PipeUtilization)
            self.out.mkdir(parents=True, exist_ok=True)
            return profiler.profile(
                activities=[profiler.ProfilerActivity.CPU, profiler.ProfilerActivity.NPU],
                record_shapes=True, experimental_config=config,
                on_trace_ready=profiler.tensorboard_trace_handler(str(self.out)))
        from torch.profiler import ProfilerActivity, profile

        activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA]
                                               if self.kind == "cuda" else [])
        return profile(activities=activities, record_shapes=True)

    @contextlib.contextmanager
    def step_range(self, index: int) -> Iterator[None]:
        """One traced step: its range, and what its threads waited for a CPU."""
        import torch

        with torch.autograd.profiler.record_function(f"{STEP_RANGE}{index}"):
            if self._watch is not None:
                self._watch.step_begin()
            yield
            _synchronize(self.kind)  # the step's device work ends inside its range
            if self._watch is not None:
                self._watch.step_end()

    def stop(self) -> Path:
        _synchronize(self.kind)
        verdict = self._watch.verdict() if self._watch is not None else None
        self.trust = verdict.trust if verdict is not None else ""
        meta = {"device": _device_name(self.kind), "stack": _stack(),
                **(verdict.as_dict() if verdict is not None else {})}
        if self._watch is not None and self._watch.steps:
            # [wall, waited for a CPU (us), threads] per step: what the parse and the
            # prediction tell apart from the model's own time on a CPU.
            meta[STEP_WAITS] = [s.as_list() for s in self._watch.steps]
        add = getattr(self._profiler, "add_metadata_json", None)
        if add is not None:
            add(META_KEY, json.dumps(meta))
        self._stack.close()
        if self.kind == "npu":
            self.path = self.out
            return self.out
        path = self.out if self.out.suffix == ".json" else self.out.with_suffix(".json")
        path.parent.mkdir(parents=True, exist_ok=True)
        temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        self._profiler.export_chrome_trace(str(temporary))  # type: ignore[union-attr]
        os.replace(temporary, path)
        self.path = path
        return path


def trace_workload(step: Callable[[], object], out: str | Path, *, kind: str = "auto",
                   warmup: int = 1, steps: int = 1, kinds: ModuleKinds | bool | None = True
                   ) -> Path:
    """Run `step` `warmup` times, then `steps` times under the profiler, each call a step;
    returns the trace (CPU, CUDA: a `.json` file) or the torch_npu output directory (NPU).
    `kinds`: the module kinds that get ranges (True: the package's table; None: none)."""
    return profile_callable(step, out, kind=kind, warmup=warmup, steps=steps,
                            kinds=kinds).path


def _kinds(kinds: ModuleKinds | bool | None) -> ModuleKinds | None:
    if kinds is True:
        return load_kinds()
    return kinds or None


def _check_counts(warmup: int, steps: int) -> None:
    if warmup < 0 or steps < 1:
        raise NpuperfError(f"warm-up steps must be >= 0 and steps >= 1, got {warmup}, {steps}")


def profile_callable(step: Callable[[], object], out: str | Path, *, kind: str = "auto",
                     warmup: int = 1, steps: int = 1, kinds: ModuleKinds | bool | None = True
                     ) -> Profiled:
    _check_counts(warmup, steps)
    kind = resolve_kind(kind)
    for _ in range(warmup):
        step()
    session = _Session(kind, Path(out), _kinds(kinds))
    session.start()
    try:
        for index in range(steps):
            with session.step_range(index):
                step()
    finally:
        path = session.stop()
    return Profiled(path, traced_steps=steps, marked_steps=steps, trust=session.trust)


class _Controller:
    """The steps a script marks: warm-up ones untraced, then the traced ones (the profiler
    starts at the first of them), then untraced again."""

    def __init__(self, session: _Session, warmup: int, steps: int) -> None:
        self.session, self.warmup, self.steps = session, warmup, steps
        self.seen = 0
        self.traced = 0
        self.started = False
        self.stopped = False

    @contextlib.contextmanager
    def step(self) -> Iterator[None]:
        index = self.seen
        self.seen += 1
        if not self.warmup <= index < self.warmup + self.steps or self.stopped:
            yield
            return
        if not self.started:
            self.started = True
            self.session.start()
        with self.session.step_range(index - self.warmup):
            yield
        self.traced += 1
        if self.traced == self.steps:
            self.finish()

    def finish(self) -> None:
        if self.started and not self.stopped:
            self.stopped = True
            self.session.stop()


def profile_script(command: list[str], out: str | Path, *, kind: str = "auto", warmup: int = 1,
                   steps: int = 1, kinds: ModuleKinds | bool | None = True) -> Profiled:
    """Profile `SCRIPT [ARGS]` / `-m MODULE [ARGS]`: its marked steps when it marks them,
    else whole runs of it (the first run, untraced, says which)."""
    from .steps import controlled_by

    _check_counts(warmup, steps)
    run = script_step(command)
    kind = resolve_kind(kind)
    session = _Session(kind, Path(out), _kinds(kinds))
    controller = _Controller(session, warmup, steps)
    try:
        with controlled_by(controller):
            run()
    finally:
        controller.finish()
    if controller.seen:
        if not controller.traced:
            raise NpuperfError(f"the script marked {controller.seen} step(s), all of them warm-up "
                               f"(--warmup {warmup}): lower --warmup or run more steps")
        notes = [] if controller.traced == steps else [
            f"the script marked {controller.seen} step(s): {controller.traced} traced after "
            f"{warmup} warm-up, not the {steps} asked"]
        return Profiled(session.path or Path(out), controller.traced, controller.seen,
                        session.trust, notes)
    # No step marked: whole runs of the script, the first one (above) a warm-up.
    notes = ["the script marks no step: each traced step is a whole run of it, model "
             "construction included (mark the step with pytest_npuperf.profiling.step, or "
             "profile a callable with --call)"]
    if warmup == 0:
        notes.append("--warmup 0: the first run, which found no step marks, was not traced")
    for _ in range(max(warmup - 1, 0)):
        run()
    session.start()
    try:
        for _ in range(steps):
            run()
    finally:
        path = session.stop()
    return Profiled(path, steps, 0, session.trust, notes)


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


def callable_step(spec: str) -> Callable[[], object]:
    """`MODULE:FUNCTION` or `FILE.py:FUNCTION`: the function, its module imported now (what
    the module builds at import, a model, is not part of the step)."""
    import importlib
    import importlib.util
    import sys

    where, _, name = spec.rpartition(":")
    if not where or not name:
        raise NpuperfError(f"--call {spec!r}: expected MODULE:FUNCTION or FILE.py:FUNCTION")
    if where.endswith(".py"):
        path = Path(where)
        if not path.is_file():
            raise NpuperfError(f"--call: {where}: no such file")
        module_spec = importlib.util.spec_from_file_location(path.stem, path)
        module = importlib.util.module_from_spec(module_spec)  # type: ignore[arg-type]
        sys.path.insert(0, str(path.resolve().parent))
        sys.modules[path.stem] = module
        module_spec.loader.exec_module(module)  # type: ignore[union-attr]
    else:
        sys.path.insert(0, os.getcwd())
        try:
            module = importlib.import_module(where)
        except ImportError as exc:
            raise NpuperfError(f"--call: cannot import {where}: {exc}") from None
    function = getattr(module, name, None)
    if not callable(function):
        raise NpuperfError(f"--call: {where} has no function {name!r}")
    return function


def main(argv: list[str] | None = None) -> int:
    """`python -m pytest_npuperf.profiling.workload --out OUT --result FILE [--device K]
    [--warmup N] [--steps N] [--module-kinds FILE] [--no-module-ranges] (--call SPEC | --
    SCRIPT [ARGS] | -m MODULE [ARGS])` (what `npuperf profile` runs)."""
    import argparse
    import sys

    parser = argparse.ArgumentParser(prog="python -m pytest_npuperf.profiling.workload")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--result", type=Path, help="where the result goes (JSON)")
    parser.add_argument("--device", choices=DEVICE_KINDS, default="auto")
    parser.add_argument("--warmup", type=int, default=1)
    parser.add_argument("--steps", type=int, default=1)
    parser.add_argument("--call", metavar="MODULE:FUNCTION")
    parser.add_argument("--module-kinds", type=Path, action="append", default=[])
    parser.add_argument("--no-module-ranges", action="store_true")
    parser.add_argument("command", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    try:
        kinds = None if args.no_module_ranges else load_kinds(args.module_kinds)
        if args.call:
            profiled = profile_callable(callable_step(args.call), args.out, kind=args.device,
                                        warmup=args.warmup, steps=args.steps, kinds=kinds)
        else:
            profiled = profile_script(command, args.out, kind=args.device, warmup=args.warmup,
                                      steps=args.steps, kinds=kinds)
    except NpuperfError as exc:
        print(f"npuperf profile: {exc}", file=sys.stderr)
        return 2
    if args.result is not None:
        args.result.write_text(json.dumps(profiled.as_dict()), encoding="utf-8")
    else:
        print(profiled.path, file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
