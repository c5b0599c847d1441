"""When pytest started: the origin of the session's wall time and duty cycle, and the run's
identity (its id and stamp), minted here and nowhere else.

The duty cycle (time inside measured calls / wall time) is meant against everything the user
waits for once pytest starts: interpreter start-up, imports, collection, cases, the write and
reports; not what ran before pytest in the same process. The operating system dates a process
by its creation (fork), not by its last exec: `bash -c 'pip install ... && pytest bench'`
execs pytest into the shell's own process, and the process's start counted the install
(issue 23: duty cycle 0.50 and 478 ms per case of overhead for a 41.6 s session).

pytest's start is dated from the package's first import (pytest imports it with its plugins,
through the pytest11 entry point) less the CPU time the process had used by then. What runs
before that import, the interpreter's start-up and `import pytest` (0.2-0.3 s of CPU on a
2-core VM), is CPU-bound, so that difference is when the interpreter started. A shell's wait
before its exec (a child like pip, a sleep) is no CPU time of this process and counts nothing;
the shell's own CPU time does (milliseconds). On a busy host the start-up also waited for a
core: the estimate is then that much late (0.1-0.2 s at a load of 5 on 2 cores), never early.
It is never before the process's creation either (in /proc/self/stat on Linux, clock ticks
after boot; its age is the uptime minus that, both at 10 ms resolution).

Only the first pytest run of a process starts there: a later one in the same process
(`pytest.main` called again, pytester's in-process runs) starts at its own configure.
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import os
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

from .. import CPU_AT_IMPORT, IMPORTED_AT

FROM_PYTEST_START = "pytest start"
FROM_CONFIGURE = "pytest configure"  # a later pytest run in the same process
_STARTS = {"claimed": False}


def _process_age_s() -> float | None:
    try:
        stat = Path("/proc/self/stat").read_text()
        uptime = float(Path("/proc/uptime").read_text().split()[0])
        # The command name (field 2) may hold spaces: count fields after its closing paren.
        start_ticks = int(stat.rsplit(")", 1)[1].split()[19])
        ticks = os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError, AttributeError):
        return None
    age = uptime - start_ticks / ticks
    return age if age >= 0 else None


def pytest_start() -> float:
    """Epoch seconds when this process's interpreter started (see the module's docstring)."""
    start = IMPORTED_AT - CPU_AT_IMPORT
    age = _process_age_s()
    if age is not None:
        # CPU time is not wall time: threads of a program that embeds pytest can outrun it.
        start = max(start, time.time() - age)
    return min(start, IMPORTED_AT)


def run_origin() -> tuple[float, str]:
    """(epoch seconds where a pytest run's wall time starts, what that time is): pytest's
    start for the process's first run, now (its configure) for a later one."""
    if _STARTS["claimed"]:
        return time.time(), FROM_CONFIGURE
    _STARTS["claimed"] = True
    return pytest_start(), FROM_PYTEST_START


RUN_ID_ENV = "NPUPERF_RUN_ID"  # set by a parent that started this process for its run
_STAMP = "%Y%m%d_%H%M%S"


@dataclass(frozen=True)
class RunIdentity:
    """A run's name and start: the run id every value it writes carries (database rows,
    history, reports) and the stamp its report files are named with."""

    run_id: str
    stamp: str  # YYYYmmdd_HHMMSS of `started`
    started: float  # epoch seconds
    started_iso: str

    @classmethod
    def of(cls, started: float, run_id: str | None = None) -> RunIdentity:
        moment = _dt.datetime.fromtimestamp(started)
        stamp = moment.strftime(_STAMP)
        return cls(run_id or f"{stamp}-{uuid.uuid4().hex[:8]}", stamp, started,
                   moment.isoformat(timespec="seconds"))


def mint_run(started: float | None = None, *, prefix: str = "") -> RunIdentity:
    """The one place a run id is made: `<prefix><stamp>-<8 hex>`."""
    started = time.time() if started is None else started
    identity = RunIdentity.of(started)
    return dataclasses.replace(identity, run_id=prefix + identity.run_id) if prefix \
        else identity


def inherited_run(started: float, env: dict[str, str] | None = None) -> RunIdentity:
    """This process's run: the one its parent named (an msprof child measures the parent's
    run), else a new one."""
    run_id = (os.environ if env is None else env).get(RUN_ID_ENV)
    return RunIdentity.of(started, run_id) if run_id else mint_run(started)
