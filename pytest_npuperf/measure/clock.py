"""When the whole command started: the origin of the session's wall time and duty cycle, and
the run's identity (its id and stamp), minted here and nowhere else.

The duty cycle (time inside measured calls / wall time) is meant against everything the user
waits for: interpreter start-up, imports, collection, cases, backfill and reports. On Linux
the process's start time is in /proc/self/stat (clock ticks after boot); its age is the
system's uptime minus that, both at 10 ms resolution (the boot time in /proc/stat is whole
seconds, too coarse for a run of a few seconds). Elsewhere the earliest import of this package
stands in for it, which leaves out the interpreter's own start-up.
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import os
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

from .. import IMPORTED_AT

FROM_PROCESS_START = "process start"
FROM_PACKAGE_IMPORT = "package import"


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


def process_start() -> tuple[float, str]:
    """(epoch seconds when the command started, what that time is)."""
    age = _process_age_s()
    if age is not None:
        return time.time() - age, FROM_PROCESS_START
    return IMPORTED_AT, FROM_PACKAGE_IMPORT


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
