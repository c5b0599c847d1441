"""Wall time of a command in a fresh process, for the benchmarks that compare such runs."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path


def timed(argv: list[str], cwd: Path) -> float:
    """Seconds `argv` took in `cwd`; a failing command stops the benchmark with its output."""
    start = time.perf_counter()
    proc = subprocess.run(argv, cwd=cwd, capture_output=True, text=True)
    elapsed = time.perf_counter() - start
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} failed:\n{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}")
    return elapsed
