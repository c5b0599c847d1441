"""How this package starts its helper processes (`python -m pytest_npuperf....`)."""

from __future__ import annotations

import os
from pathlib import Path


def child_env() -> dict[str, str]:
    """This process's environment, with this package's directory first on the child's path
    (the parent may have found it through its own sys.path, not the environment)."""
    root = str(Path(__file__).resolve().parents[2])
    path = os.environ.get("PYTHONPATH")
    return {**os.environ, "PYTHONPATH": os.pathsep.join([root, path] if path else [root])}


def peak_mib() -> float:
    """This process's peak resident memory, MiB: Linux's VmHWM, which starts again at the
    exec that made a child; `ru_maxrss` keeps the peak of the process it was forked from
    (a child started by a 2 GB parent would report 2 GB)."""
    try:
        with open("/proc/self/status", encoding="ascii") as status:
            for line in status:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
    except (OSError, ValueError, IndexError):
        pass
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux
