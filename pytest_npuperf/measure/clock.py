"""When the whole command started: the origin of the session's wall time and duty cycle.

The duty cycle (time inside measured calls / wall time) is meant against everything the user
waits for: interpreter start-up, imports, collection, cases, backfill and reports. On Linux
the process's start time is in /proc/self/stat (clock ticks after boot); its age is the
system's uptime minus that, both at 10 ms resolution (the boot time in /proc/stat is whole
seconds, too coarse for a run of a few seconds). Elsewhere the earliest import of this package
stands in for it, which leaves out the interpreter's own start-up.
"""

from __future__ import annotations

import os
import time
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
