"""The msprof wrap, parent side: re-run this pytest invocation under msprof, then attribute
msprof's kernels to the cases and write the database and the reports.

The parent is the process the user started. Before anything is collected
(`plugin.pytest_cmdline_main`) it decides whether to wrap; if so it runs
`msprof --output=<out>/msprof/<run> <switches> <this python> -m pytest <the same arguments>`
in the same directory, with `NPUPERF_MSPROF_CHILD` naming the child's hand-off file. The child
measures as usual (each case's calls inside an mstx range), writes no database, and hands
its results over. When it has exited, the parent exports msprof's summaries where msprof did
not, reads `op_summary_*.csv` and `msprof_tx_*.csv`, attributes (measure/attribution.py),
backfills through the same code as any session, writes the reports, and exits with the
child's status (1 when the backfill failed).

Module level stays light (standard library): `should_wrap` runs in every pytest run.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Iterator
from fnmatch import fnmatch
from pathlib import Path

import pytest

from ..harness.options import DEFAULT_OUT, _value
from ..measure.policy import PROFILER_AUTO, PROFILER_MSPROF
from .mode import CHILD_ENV, resolve_profiler

FIXTURE = "npuperf_case"
MSPROF_DIR = "msprof"
_SKIP_DIRS = ("venv", ".venv", "node_modules", "__pycache__", "build", "dist", "*.egg*")
_MAX_PROBE_BYTES = 1 << 20
_INFO_ONLY = ("help", "version", "collectonly", "showfixtures", "show_fixtures_per_test",
              "markers")


def _option(config: pytest.Config, name: str, kind: str, default: object) -> object:
    return _value(config, name, kind, default, None)


def should_wrap(config: pytest.Config) -> bool:
    """Whether this process is the parent of an msprof-wrapped run."""
    if os.environ.get(CHILD_ENV) or hasattr(config, "workerinput"):
        return False
    if any(getattr(config.option, name, False) for name in _INFO_ONLY):
        return False
    requested = str(_option(config, "profiler", "str", PROFILER_AUTO))
    device = str(_option(config, "device", "str", "auto"))
    if resolve_profiler(requested, device) != PROFILER_MSPROF:
        return False
    # auto wraps only a run that replays rows: one whose test files name the fixture.
    return requested == PROFILER_MSPROF or names_fixture(config)


def _candidates(config: pytest.Config) -> Iterator[Path]:
    base = Path(config.invocation_params.dir)
    patterns = [*config.getini("python_files"), "conftest.py"]
    for arg in config.args or ["."]:
        path = Path(str(arg).split("::", 1)[0])
        path = path if path.is_absolute() else base / path
        if path.is_file():
            yield path
            continue
        for directory, dirs, files in os.walk(path):
            dirs[:] = sorted(d for d in dirs if not d.startswith(".")
                             and not any(fnmatch(d, p) for p in _SKIP_DIRS))
            for name in sorted(files):
                if name.endswith(".py") and any(fnmatch(name, p) for p in patterns):
                    yield Path(directory) / name


def names_fixture(config: pytest.Config) -> bool:
    """Whether a test or conftest file this run collects from mentions `npuperf_case`."""
    for path in _candidates(config):
        try:
            with open(path, "rb") as handle:
                if FIXTURE.encode() in handle.read(_MAX_PROBE_BYTES):
                    return True
        except OSError:
            continue
    return False


# -- the parent run -----------------------------------------------------------------------------

def run_wrapped(config: pytest.Config) -> int:
    import shlex
    import subprocess
    import uuid

    from ..db.errors import NpuperfError
    from .handoff import HANDOFF_NAME
    from .mode import find_msprof
    from .msprof import msprof_command

    started = time.time()
    try:
        msprof = find_msprof()
    except NpuperfError as exc:
        raise pytest.UsageError(str(exc)) from None
    out = _option(config, "out", "path", None)
    out = Path(out) if out else Path(config.rootpath) / DEFAULT_OUT
    stamp = time.strftime("%Y%m%d_%H%M%S", time.localtime(started))
    run_dir = out / MSPROF_DIR / f"{stamp}_{uuid.uuid4().hex[:6]}"
    try:
        run_dir.mkdir(parents=True, exist_ok=False)
    except OSError as exc:
        raise pytest.UsageError(f"npuperf: cannot create {run_dir}: {exc.strerror or exc}") \
            from None
    command = msprof_command(msprof, run_dir,
                             [sys.executable, "-m", "pytest", *config.invocation_params.args])
    env = {**os.environ, CHILD_ENV: str(run_dir / HANDOFF_NAME)}
    _say(f"npuperf: measuring under msprof: {shlex.join(command)}")
    process = subprocess.Popen(command, cwd=str(config.invocation_params.dir), env=env)
    try:
        code = process.wait()
    except KeyboardInterrupt:
        code = process.wait()  # the child got the interrupt too; let it end its session
        _say(f"npuperf: interrupted; raw profiler output kept in {run_dir}")
        return int(pytest.ExitCode.INTERRUPTED)
    keep = bool(_option(config, "keep-prof", "bool", False))
    return ParentRun(run_dir, msprof, code, keep, started).finish()


def _say(line: str) -> None:
    print(line, flush=True)


class ParentRun:
    """After the child: its hand-off, msprof's output, attribution, backfill, reports."""

    def __init__(self, run_dir: Path, msprof: str, child_code: int, keep: bool,
                 started: float) -> None:
        self.run_dir = Path(run_dir)
        self.msprof = msprof
        self.child_code = child_code
        self.keep = keep
        self.started = started
        self.notes: list[str] = []
        self.problem = False  # something went wrong: the raw output is kept

    def finish(self) -> int:
        from .profiled import gc_paused

        with gc_paused():
            return self._finish()

    def _finish(self) -> int:
        from ..db.errors import NpuperfError
        from .handoff import HANDOFF_NAME, read_handoff

        handoff_path = self.run_dir / HANDOFF_NAME
        if not handoff_path.is_file():
            if self.child_code in (pytest.ExitCode.OK, pytest.ExitCode.NO_TESTS_COLLECTED):
                _say("npuperf: no replay case ran under msprof: nothing to attribute")
                self._clean()
            else:
                _say(f"npuperf: the child exited with status {self.child_code} before handing "
                     f"its results over; raw profiler output kept in {self.run_dir}")
            return self.child_code
        try:
            handoff = read_handoff(handoff_path)
        except NpuperfError as exc:
            _say(f"npuperf: {exc}; raw profiler output kept in {self.run_dir}")
            return 1
        if self.child_code not in (pytest.ExitCode.OK, pytest.ExitCode.TESTS_FAILED):
            self.problem = True
        self.notes += handoff.session.get("notes", [])
        if handoff.results:
            self._attribute(handoff.results)
        code = publish(handoff.session, handoff.results, self.notes,
                       time.time() - self.started, exit_status=self.child_code)
        if not self.problem and not self.keep:
            self._clean()
        else:
            _say(f"npuperf: raw profiler output kept in {self.run_dir}")
        return self.child_code if code == 0 else code

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

    def _attribute(self, results) -> None:
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


def publish(session: dict, results, notes: list[str], wall_s: float,
            exit_status: int | None = None) -> int:
    """Backfill the results into the database the child chose, then the end every session has
    (publish.py: verdicts against the baseline, history, figures, reports) and the summary;
    0, or 1 when the backfill failed (the database is left as it was), a case is SLOWER than
    its baseline, or the history or the reports were not written."""
    import dataclasses

    from ..db.errors import NpuperfError
    from ..replay.outcome import BackfillOutcome, SessionInfo
    from ..replay.writeback import backfill
    from ..report.terminal import terminal_lines
    from ..run.finish import Publisher, RunFacts

    info = SessionInfo(**{k: v for k, v in (session.get("info") or {}).items()
                          if k in SessionInfo.__dataclass_fields__})
    info = dataclasses.replace(info, wall_s=wall_s, wall_from="the msprof parent's start")
    source = Path(session["source"])
    dry_run = bool(session.get("dry_run"))
    stamp, run_id = str(session.get("stamp")), str(session.get("run_id"))
    facts = RunFacts.from_options(info.options or {}, run_id=run_id, started_iso=info.started,
                                  source=str(source),
                                  root=Path(session["root"]) if session.get("root") else None)
    publisher = Publisher(facts, device=lambda: str((info.device or {}).get("database_device")
                                                    or ""), dry_run=dry_run)
    code = 0
    # The child measured no durations under msprof: its cases are judged now, before the
    # backfill writes their verdicts.
    if publisher.judge(results):
        code = 1
    if session.get("grid"):
        outcome = BackfillOutcome(source=source, target=None, native=False, dry_run=dry_run,
                                  run_id=run_id, stamp=stamp)
        outcome.notes.append("grid cases: measured, not written to any database")
    else:
        target = Path(session["target"])
        try:
            outcome = backfill(source, target, results, native=bool(session.get("native")),
                               prune_empty=bool(session.get("prune_empty")), dry_run=dry_run,
                               run_id=run_id, stamp=stamp, lock=True,
                               purpose=f"msprof run {run_id}")
        except NpuperfError as exc:
            _say(f"npuperf: backfill failed, the database was left as it was: {exc}")
            publisher.close()
            return 1
    outcome.notes[:0] = notes + publisher.notes
    reported = len(publisher.notes)
    if not dry_run and not publisher.finish(outcome, results, info,
                                            Path(session["reports_dir"]),
                                            exit_status=code or exit_status):
        code = 1
    publisher.close()
    for line in publisher.notes[reported:]:
        _say(f"npuperf: {line}")  # the history or the reports were not written
    for line in terminal_lines(outcome, results, publisher.info or info, publisher.paths,
                               baseline=publisher.keeper.label,
                               history=publisher.history_line()):
        _say(f"npuperf: {line}")
    return code
