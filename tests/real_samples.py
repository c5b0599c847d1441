"""Where the tests and benchmarks find the real profiler samples (kernel tables, msprof exports,
traces, collective logs, a simulator fixture). They are not part of the repository: this is the
one place that says where they are.

`NPUPERF_REALDATA` names their folder; without it, the folder the development machines keep
beside every checkout. A test whose samples are absent is skipped and says so (`needs`, or the
`realdata` fixture of conftest.py).
"""

from __future__ import annotations

import os
from pathlib import Path

REALDATA = Path(os.environ.get("NPUPERF_REALDATA")
                or Path(__file__).resolve().parents[2] / "shared" / "realdata")
ABSENT = f"real profiler samples not found at {REALDATA} (set NPUPERF_REALDATA)"


def needs(*paths: Path):
    """A skip mark for a test that reads these sample files."""
    import pytest  # benchmarks import this module without pytest's machinery

    return pytest.mark.skipif(not all(Path(p).is_file() for p in paths), reason=ABSENT)
