"""What an implementation of kernels is (kernels/implementation_options.py holds the registry):
plain data, importable without torch or the libraries it names."""

from __future__ import annotations

import importlib.util
import os
import shutil
from dataclasses import dataclass

COMPILED = "compiled"


@dataclass(frozen=True)
class Implementation:
    """One way of running kernels. `kernel_types`: the types a vendor implementation replays
    (a builtin's applicability is the spec's to say); `requires`: the import names of the
    packages it needs; `build`: "module:function" making the call (vendors)."""

    name: str
    runs: str
    devices: tuple[str, ...]
    kernel_types: tuple[str, ...] = ()
    requires: tuple[str, ...] = ()
    install: str = ""
    build: str = ""
    compiles: bool = False  # built through torch.compile: needs inductor's code generator

    def absent(self, device: str) -> str:
        """Why it cannot run on `device` here ("" when it can)."""
        if device not in self.devices:
            return f"runs on {', '.join(self.devices)}, not {device}"
        missing = [m for m in self.requires if not module_installed(m)]
        if missing:
            how = f" ({self.install})" if self.install else ""
            return f"not installed: {', '.join(missing)}{how}"
        if self.name == COMPILED or self.compiles:
            return _compiler_missing(device)
        return ""


@dataclass(frozen=True)
class Option:
    """An implementation of one kernel type on one device, and why it is absent ("" when it
    is available)."""

    implementation: Implementation
    absent: str = ""

    @property
    def name(self) -> str:
        return self.implementation.name


class Unsupported(Exception):
    """This implementation cannot run this row (a layout, a dtype, a block size it does not
    take): another implementation measures it, and the case's note says why."""


def module_installed(name: str) -> bool:
    """Whether `name` can be imported, without importing it (a missing parent is False)."""
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        return False


def _compiler_missing(device: str) -> str:
    if device == "cuda":
        return "" if module_installed("triton") else "not installed: triton (inductor's GPU " \
                                                     "code generator; pip install triton)"
    compilers = [os.environ.get("CXX", ""), "g++", "c++", "clang++"]
    if any(c and shutil.which(c) for c in compilers):
        return ""
    return "no C++ compiler on PATH (inductor builds CPU kernels with one; set CXX)"
