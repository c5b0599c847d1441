"""The msprof wrap, parent side: the child that measures runs under msprof; afterwards its
hand-off is read and msprof's kernels are attributed to the child's cases.

The parent is the process the user started (harness/wrap.py decides to wrap and ends the run).
It runs `msprof --output=<out>/msprof/<run id> <switches> <this python> -m pytest <the same
arguments>` in the same directory, with `NPUPERF_MSPROF_CHILD` naming the child's hand-off
file and `NPUPERF_RUN_ID` the run. The child measures as usual (each case's calls inside an
mstx range), writes no database, and hands its results over. When it has exited, the parent
exports msprof's summaries where msprof did not, reads `op_summary_*.csv` and
`msprof_tx_*.csv`, and attributes (attribution.py, profiled.py).
"""

from __future__ import annotations

import os
import shlex
import subprocess
from pathlib import Path

import pytest

from ..measure.clock import RUN_ID_ENV
from .child import forward_stop_signals, restore
from .handoff import HANDOFF_NAME, Handoff
from .mode import CHILD_ENV
from .msprof import msprof_command


def say(line: str) -> None:
    print(line, flush=True)


def run_child(msprof: str, run_dir: Path, run_id: str, arguments: list[str], cwd: Path,
              python: str) -> int | None:
    """Run `python -m pytest <arguments>` under msprof as the child of run `run_id`; its exit
    status, or None when the user interrupted it (the child got the interrupt too and was
    let end its session)."""
    command = msprof_command(msprof, run_dir, [python, "-m", "pytest", *arguments])
    env = {**os.environ, CHILD_ENV: str(run_dir / HANDOFF_NAME), RUN_ID_ENV: run_id}
    say(f"npuperf: measuring under msprof: {shlex.join(command)}")
    process = subprocess.Popen(command, cwd=str(cwd), env=env)
    forwarded = forward_stop_signals(process)  # the child ends its session as any stopped
    # session does (its finished cases handed over); the parent then writes
    try:
        return process.wait()
    except KeyboardInterrupt:
        process.wait()
        return None
    finally:
        restore(forwarded)


class ParentRun:
    """After the child: its hand-off, and msprof's output attributed to the child's cases."""

    def __init__(self, run_dir: Path, msprof: str, child_code: int, keep: bool,
                 started: float) -> None:
        self.run_dir = Path(run_dir)
        self.msprof = msprof
        self.child_code = child_code
        self.keep = keep
        self.started = started
        self.notes: list[str] = []
        self.problem = False  # something went wrong: the raw output is kept

    def read(self) -> Handoff | int:
        """The child's hand-off with its results attributed, or the exit status to end with
        when there is none to read (said on the terminal)."""
        from ..db.errors import NpuperfError
        from .handoff import read_handoff

        handoff_path = self.run_dir / HANDOFF_NAME
        if not handoff_path.is_file():
            if self.child_code in (pytest.ExitCode.OK, pytest.ExitCode.NO_TESTS_COLLECTED):
                say("npuperf: no replay case ran under msprof: nothing to attribute")
                self._clean()
            else:
                say(f"npuperf: the child exited with status {self.child_code} before handing "
                    f"its results over; raw profiler output kept in {self.run_dir}")
            return self.child_code
        try:
            handoff = read_handoff(handoff_path)
        except NpuperfError as exc:
            say(f"npuperf: {exc}; raw profiler output kept in {self.run_dir}")
            return 1
        if self.child_code not in (pytest.ExitCode.OK, pytest.ExitCode.TESTS_FAILED):
            self.problem = True
        self.notes += handoff.session.get("notes", [])
        if handoff.results:
            self._attribute(handoff.results)
        return handoff

    def release(self) -> None:
        """The raw output: removed after a clean run (unless kept), else kept and said so."""
        if not self.problem and not self.keep:
            self._clean()
        else:
            say(f"npuperf: raw profiler output kept in {self.run_dir}")

    def _sources(self):
        """msprof's run directories, exported where msprof did not export them itself."""
        from ..db.errors import NpuperfError
        from ..ingest.op_summary import find_sources
        from .msprof import run_export

        try:
            sources = find_sources(self.run_dir)
        except NpuperfError:
            return []
        exported = False
        for source in sources:
            if source.kind == "msprof" and not source.exported:
                failure = run_export(self.msprof, source.root)
                exported = True
                if failure:
                    self.problem = True
                    self.notes.append(f"{source.root}: {failure}")
        return find_sources(self.run_dir) if exported else sources

    def _attribute(self, results: list) -> None:
        from ..db.errors import NpuperfError
        from ..measure.result import STATUS_UNATTRIBUTED
        from .profiled import attribute_results, case_specs

        if self.child_code not in (pytest.ExitCode.OK, pytest.ExitCode.TESTS_FAILED):
            self.notes.append(f"the session under msprof exited with status "
                              f"{self.child_code}; its summaries were read anyway")
        sources = [s for s in self._sources() if s.kernel_files]
        indices, _ = case_specs(results)
        if not sources:
            self.problem = True
            types = sorted({results[i].kernel_type for i in indices})
            for i in indices:
                results[i].status = STATUS_UNATTRIBUTED
                results[i].error = "msprof wrote no kernel summaries"
            self.notes.append(
                f"msprof wrote no op_summary for this run (raw output kept in {self.run_dir}); "
                f"kernel types that ran: {', '.join(types) or 'none'}. Re-run them one session "
                f"each, e.g. " + "; ".join(f"pytest bench -m {t}" for t in types[:5]))
            return
        try:
            outcome = attribute_results(results, sources)
        except NpuperfError as exc:
            self.problem = True
            for i in indices:
                results[i].status = STATUS_UNATTRIBUTED
                results[i].error = f"msprof output unreadable: {exc}"
            self.notes.append(f"msprof output could not be read: {exc}")
            return
        self.notes += outcome.notes
        how = "by mstx marker" if outcome.by_markers else "by launch order (no marker output)"
        self.notes.append(f"msprof: {outcome.attributed} case(s) attributed {how}, "
                          f"{outcome.unattributed} unattributed; {outcome.kernels:,} kernel "
                          f"launch(es), {outcome.markers:,} marker(s) in "
                          f"{len(outcome.sources)} run directory(ies)")
        if outcome.unattributed:
            self.problem = True

    def _clean(self) -> None:
        import shutil

        shutil.rmtree(self.run_dir, ignore_errors=True)


