"""Runs this process hands to another: `--npuperf-nproc N` re-runs the invocation under
torchrun (collectives), and the msprof wrap re-runs it as a child under msprof, then ends the
run from what the child handed over (profiling/msprof_parent.py) as every run ends
(run/finish.py).

Module level stays light (standard library and pytest): `run_elsewhere` runs in every pytest
run, before anything is collected.
"""

from __future__ import annotations

import importlib.util
import os
import sys
import time
from collections.abc import Iterator
from fnmatch import fnmatch
from pathlib import Path

import pytest

from ..comm.launch import relaunch, xdist_in_use
from ..measure.overhead import ATTRIBUTION
from ..measure.policy import PROFILER_MSPROF
from ..profiling.mode import CHILD_ENV, resolve_profiler
from .configure import rank_env
from .options import DEFAULT_OUT, option_value

FIXTURE = "npuperf_case"
MSPROF_DIR = "msprof"
_SKIP_DIRS = ("venv", ".venv", "node_modules", "__pycache__", "build", "dist", "*.egg*")
_MAX_PROBE_BYTES = 1 << 20
_INFO_ONLY = ("help", "version", "collectonly", "showfixtures", "show_fixtures_per_test",
              "markers")


def run_elsewhere(config: pytest.Config) -> int | None:
    """The exit status of this invocation run elsewhere (under torchrun or msprof), or None
    when this process runs the session itself."""
    nproc = option_value(config, "nproc")
    if nproc and not rank_env().launched:
        if xdist_in_use(config.option):
            raise pytest.UsageError("--npuperf-nproc runs every rank as one pytest process: "
                                    "drop -n / --dist (xdist)")
        params = config.invocation_params
        return relaunch(int(nproc), params.args, params.dir)
    return run_wrapped(config) if should_wrap(config) else None


def should_wrap(config: pytest.Config) -> bool:
    """Whether this process is the parent of an msprof-wrapped run."""
    if os.environ.get(CHILD_ENV) or hasattr(config, "workerinput"):
        return False
    if any(getattr(config.option, name, False) for name in _INFO_ONLY):
        return False
    requested = str(option_value(config, "profiler"))
    device = str(option_value(config, "device"))
    if resolve_profiler(requested, device) != PROFILER_MSPROF:
        return False
    # auto wraps only a run that replays rows: one whose test files name the fixture.
    return requested == PROFILER_MSPROF or names_fixture(config)


def _module_path(name: str) -> Path | None:
    """Where `--pyargs NAME` collects from, as pytest finds it: a package's directory or a
    module's file (`pytest --pyargs pytest_npuperf.suite` from an installed copy)."""
    try:
        spec = importlib.util.find_spec(name)
    except (ImportError, ValueError, AttributeError):
        return None
    if spec is None or not spec.origin or not os.path.isfile(spec.origin):
        return None
    return Path(spec.origin).parent if spec.submodule_search_locations else Path(spec.origin)


def _candidates(config: pytest.Config) -> Iterator[Path]:
    base = Path(config.invocation_params.dir)
    patterns = [*config.getini("python_files"), "conftest.py"]
    for arg in config.args or ["."]:
        name = str(arg).split("::", 1)[0]
        path = Path(name)
        path = path if path.is_absolute() else base / path
        if config.option.pyargs and not path.exists():
            path = _module_path(name) or path
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


def run_wrapped(config: pytest.Config) -> int:
    """The parent: run the child under msprof, then end the run from its hand-off."""
    from ..db.errors import NpuperfError
    from ..measure.clock import mint_run
    from ..profiling.mode import find_msprof
    from ..profiling.msprof_parent import ParentRun, run_child, say

    started = time.time()
    try:
        msprof = find_msprof()
    except NpuperfError as exc:
        raise pytest.UsageError(str(exc)) from None
    out = option_value(config, "out")
    out = Path(out) if out else Path(config.rootpath) / DEFAULT_OUT
    run = mint_run(started)
    run_dir = out / MSPROF_DIR / run.run_id
    try:
        run_dir.mkdir(parents=True, exist_ok=False)
    except OSError as exc:
        raise pytest.UsageError(f"npuperf: cannot create {run_dir}: {exc.strerror or exc}") \
            from None
    params = config.invocation_params
    code = run_child(msprof, run_dir, run.run_id, list(params.args), Path(params.dir),
                     sys.executable)
    if code is None:
        say(f"npuperf: interrupted; raw profiler output kept in {run_dir}")
        return int(pytest.ExitCode.INTERRUPTED)
    keep = bool(option_value(config, "keep-prof"))
    return end_wrapped(ParentRun(run_dir, msprof, code, keep, started))


def end_wrapped(parent) -> int:
    """After the child: attribution, then the end every run has; the child's exit status, or
    1 when the write-back failed (the database is left as it was), a case is SLOWER than its
    baseline, or the history or the reports were not written."""
    from ..profiling.msprof_parent import say
    from ..profiling.profiled import gc_paused
    from ..run.finish import summary_lines
    from ..run.from_profile import finish_handoff

    with gc_paused(leaving=True):
        reading = time.perf_counter()
        handoff = parent.read()
        if isinstance(handoff, int):
            return handoff
        end = finish_handoff(handoff.session, handoff.results, parent.notes,
                             time.time() - parent.started, exit_status=parent.child_code,
                             parts={ATTRIBUTION: time.perf_counter() - reading})
    for line in summary_lines(end):
        say(f"npuperf: {line}")
    parent.release()
    if end.interrupted:
        return int(pytest.ExitCode.INTERRUPTED)
    return parent.child_code if end.code == 0 else end.code
