"""The device profiler of one in-process replay session (--npuperf-profiler).

Modes as this process sees them:
- `child`: this process is the child the msprof wrap started (`NPUPERF_MSPROF_CHILD` names
  its hand-off file). It measures as usual, each case's calls inside an mstx range of CANN's
  C API (the msprof command line collects those), and at the end writes the hand-off instead
  of the database: the parent reads msprof's output, attributes and writes.
- `torch_npu`: one torch_npu profiler session per measuring process around all its cases; at
  session finish the owner reads each process's output and completes the results before the
  write.
- `none`: the in-case timing is what is stored.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from ..db.errors import NpuperfError
from ..measure.policy import METHOD_TORCH_NPU, PROFILER_MSPROF, PROFILER_NONE, PROFILER_TORCH_NPU
from ..measure.result import CaseResult
from .handoff import write_handoff
from .mode import CHILD_ENV, SOURCE_CANN, resolve_profiler, torch_npu_present

MODE_CHILD = "child"
TORCH_NPU_DIR = "torch_npu"
TRACE_KEY = "trace"  # CaseResult.profile: the torch_npu output root of the measuring process


class SessionProfiler:
    def __init__(self, requested: str, device: str, out: Path, run_id: str,
                 env: dict[str, str] | None = None, graph_timing: bool = False) -> None:
        env = dict(os.environ) if env is None else env
        self.handoff = Path(env[CHILD_ENV]) if env.get(CHILD_ENV) else None
        self.requested = requested
        self.notes: list[str] = []
        if self.handoff is not None:
            self.mode = MODE_CHILD
        else:
            resolved = resolve_profiler(requested, device)
            if resolved == PROFILER_MSPROF:
                # The wrap happens before collection (plugin.pytest_cmdline_main); a session
                # reaching here was not wrapped (auto found no npuperf_case in its files).
                self.notes.append("--npuperf-profiler auto/msprof: this run was not wrapped in "
                                  "msprof; its NPU cases keep their event timing")
                resolved = PROFILER_NONE
            elif resolved == PROFILER_TORCH_NPU and requested != resolved and graph_timing:
                # `auto` where msprof does not wrap the session: NPUGraph replays time the
                # kernels (--npuperf-method auto/graph), a profiler around them would trace
                # replays nobody reads. Asked for by name, torch_npu's profiler still runs.
                self.notes.append("NPU cases timed from NPUGraph replays (kernel time, no "
                                  "launches); --npuperf-profiler torch_npu for its kernel times "
                                  "and counters")
                resolved = PROFILER_NONE
            self.mode = resolved
        self.trace_root = Path(out) / TORCH_NPU_DIR / run_id
        self._profile = None

    @property
    def hands_off(self) -> bool:
        """The msprof child: its results go to the parent, which writes."""
        return self.mode == MODE_CHILD

    @property
    def profiled(self) -> bool:
        return self.mode in (MODE_CHILD, PROFILER_TORCH_NPU)

    def check(self, kind: str) -> None:
        """Before any case: torch_npu's profiler only profiles an NPU session."""
        if self.mode == PROFILER_TORCH_NPU and kind != "npu":
            hint = ("" if torch_npu_present() else
                    f" (torch_npu is not installed here: install it and {SOURCE_CANN})")
            raise pytest.UsageError(f"--npuperf-profiler torch_npu profiles NPU kernels; this "
                                    f"session measures on {kind}{hint}")

    def start(self, backend) -> None:
        """Before the process's first case: markers the collector sees, and (torch_npu) the
        profiler session itself."""
        self.check(backend.kind)
        if self.mode == MODE_CHILD and backend.kind == "npu":
            from ..devices.mstx import MstxUnavailable

            try:
                backend.use_cann_markers()
            except MstxUnavailable as exc:
                raise pytest.UsageError(f"npuperf under msprof: {exc}") from None
        if self.mode == PROFILER_TORCH_NPU and self._profile is None:
            from .torch_npu import TorchNpuProfile

            self._profile = TorchNpuProfile(backend.torch_npu, self.trace_root, backend.index)

    def tag(self, result: CaseResult) -> None:
        if self.mode == PROFILER_TORCH_NPU and result.profile:
            result.profile[TRACE_KEY] = str(self.trace_root)

    def stop(self) -> None:
        if self._profile is not None:
            self._profile.stop()
            self._profile = None

    # -- the owner process, at session finish -------------------------------------------------
    def complete(self, results: list[CaseResult], keep: bool) -> list[str]:
        """torch_npu mode: attribute every measuring process's output to the results."""
        roots = sorted({r.profile[TRACE_KEY] for r in results if r.profile.get(TRACE_KEY)})
        if self.mode != PROFILER_TORCH_NPU or not roots:
            return []
        from ..ingest.op_summary import find_sources
        from .profiled import attribute_results

        notes: list[str] = []
        sources = []
        for root in roots:
            try:
                sources += find_sources(root)
            except NpuperfError as exc:
                notes.append(f"torch_npu profiler output: {exc}")
        try:
            outcome = attribute_results(results, sources, method=METHOD_TORCH_NPU) \
                if sources else None
        except NpuperfError as exc:
            notes.append(f"torch_npu profiler output could not be read: {exc}; raw output "
                         f"kept in {', '.join(roots)}")
            return notes
        if outcome is None:
            notes.append(f"no torch_npu profiler output in {', '.join(roots)}: cases keep "
                         f"their event timing")
            return notes
        notes += outcome.notes
        notes.append(f"torch_npu profiler: {outcome.attributed} case(s) attributed, "
                     f"{outcome.unattributed} unattributed, {outcome.kernels:,} kernel "
                     f"launch(es), {outcome.markers:,} marker(s)")
        if outcome.unattributed or keep:
            notes.append(f"raw torch_npu profiler output kept in {', '.join(roots)}")
        else:
            for root in roots:
                shutil.rmtree(root, ignore_errors=True)
        return notes

    def write_handoff(self, session: dict, results: list[CaseResult]) -> None:
        assert self.handoff is not None
        write_handoff(self.handoff, session, results)
