"""Which device profiler a session uses (--npuperf-profiler), decided cheaply.

Standard library only: the plugin asks this in every pytest run before anything is collected,
and a run that is not wrapped must not pay for numpy, pandas or torch.
"""

from __future__ import annotations

import importlib.util
import shutil
from collections.abc import Callable

from ..db.errors import NpuperfError
from ..measure.policy import PROFILER_AUTO, PROFILER_MSPROF, PROFILER_NONE, PROFILER_TORCH_NPU

CHILD_ENV = "NPUPERF_MSPROF_CHILD"  # set in the child: the path of its hand-off file
SOURCE_CANN = ("source the CANN environment first, e.g. `source "
               "/usr/local/Ascend/ascend-toolkit/set_env.sh` (or <CANN install>/set_env.sh)")


def npu_host(device: str) -> bool:
    """Whether a session with this --npuperf-device measures on an NPU (torch_npu installed);
    decided without importing torch_npu."""
    if device == "npu":
        return True
    return device == "auto" and torch_npu_present()


def torch_npu_present() -> bool:
    """Whether torch_npu can be imported (without importing it)."""
    try:
        return importlib.util.find_spec("torch_npu") is not None
    except (ValueError, ImportError):  # loaded without a spec (an embedding or a stand-in)
        return True


def resolve_profiler(requested: str, device: str,
                     which: Callable[[str], str | None] = shutil.which) -> str:
    """`auto`: msprof on an NPU host where the msprof command is found, else torch_npu's
    profiler there, none elsewhere. An explicit choice is kept."""
    if requested != PROFILER_AUTO:
        return requested
    if not npu_host(device):
        return PROFILER_NONE
    return PROFILER_MSPROF if which("msprof") else PROFILER_TORCH_NPU


def find_msprof(which: Callable[[str], str | None] = shutil.which) -> str:
    found = which("msprof")
    if not found:
        raise NpuperfError(f"--npuperf-profiler msprof: the msprof command is not on PATH; "
                           f"{SOURCE_CANN}")
    return found
