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
