"""Checks before the first case of an NPU session: what would make every number wrong (a
database of another software stack) or every case of a kernel type fail (vllm-ascend's
custom-operator environment), said once, up front."""

from __future__ import annotations

import contextlib
from collections.abc import Iterable

from ..db.errors import VersionError
from ..db.layout import detect_versions, normalize_version, parse_version_dir
from ..kernels.catalog import entry_for
from ..kernels.custom_ops import custom_op_environment

_NAMES = {"vllm": "vLLM-Ascend", "torch": "torch", "cann": "CANN"}


def stack_mismatches(version_dir: str, running: dict[str, str | None] | None = None) -> list[str]:
    """How the running stack differs from the one the database directory is named after."""
    try:
        wanted = parse_version_dir(version_dir)
    except VersionError:
        return [f"the database directory {version_dir!r} does not name a software stack "
                f"(vllm<V>_torch<T>_cann<C>): its numbers cannot be checked against this one"]
    running = detect_versions() if running is None else running
    problems = []
    for kind in ("vllm", "torch", "cann"):
        have = running.get(kind)
        want = getattr(wanted, kind)
        if not have:
            problems.append(f"{_NAMES[kind]} version unknown here (the database is for "
                            f"{want})")
            continue
        with contextlib.suppress(VersionError):  # compared as found
            have = normalize_version(have, kind)
        if have != want:
            problems.append(f"database for {_NAMES[kind]} {want}, running {have}")
    return problems


def custom_op_problems(kernel_types: Iterable[str], env: dict[str, str] | None = None
                       ) -> list[str]:
    """`<KernelType>: <what to set>` for selected kernel types from vllm-ascend's custom
    operator package whose environment is missing (their cases would all fail)."""
    needing = sorted({t for t in kernel_types if (e := entry_for(t)) is not None and e.custom_op})
    if not needing:
        return []
    missing = custom_op_environment(env)
    return [f"{', '.join(needing)}: {line}" for line in missing]
