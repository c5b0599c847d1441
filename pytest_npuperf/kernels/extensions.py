"""Kernels users bring: what `register` accepts, and the `pytest_npuperf.kernels` entry points.

A package makes its kernels known to every run (pytest and `npuperf kernels` / `grid`) with an
entry point in the `pytest_npuperf.kernels` group; a project does it for its pytest runs with
the `pytest_npuperf_register_kernels(register)` hook in a conftest.py (hookspecs.py). Both
hand `register` one of:

- a `KernelSpec` subclass: its kernel types become replayable (a type the catalog does not
  know enters it with the class's own layout, NPU API and custom-op flag);
- a `KernelEntry`: catalog metadata only (layout, core, NPU API), its replay named as
  "module:Class" and imported on first use, so registering costs no torch import;
- a callable taking `register` (a function that registers several kernels).

Torch-free itself: it imports a spec module only when given a spec class.
"""

from __future__ import annotations

import importlib.metadata
import sys
from collections.abc import Iterable

from ..db.errors import NpuperfError
from . import catalog
from .entry import KernelEntry

ENTRY_POINT_GROUP = "pytest_npuperf.kernels"


class KernelRegistrationError(NpuperfError):
    pass


def register(kernel: object) -> None:
    """Register a user kernel: a KernelSpec subclass, a KernelEntry, or a callable that
    registers some (it is called with this function)."""
    if isinstance(kernel, KernelEntry):
        catalog.add(kernel)
        registry = sys.modules.get(f"{__package__}.registry")  # not imported: nothing built
        for kernel_type in kernel.kernel_types if registry else ():
            registry.REGISTRY.pop(kernel_type, None)  # a spec built earlier is not this entry's
        return
    if isinstance(kernel, type):
        from .registry import register as register_spec
        from .spec import KernelSpec

        if not issubclass(kernel, KernelSpec):
            raise KernelRegistrationError(f"{kernel.__qualname__} is not a KernelSpec subclass")
        register_spec(kernel)
        return
    if callable(kernel):
        kernel(register)
        return
    raise KernelRegistrationError(f"cannot register {kernel!r}: expected a KernelSpec subclass, "
                                  f"a KernelEntry or a function taking register")


def entry_points() -> Iterable[importlib.metadata.EntryPoint]:
    return importlib.metadata.entry_points(group=ENTRY_POINT_GROUP)


def load_entry_points() -> list[str]:
    """Register every installed `pytest_npuperf.kernels` entry point; their names."""
    loaded = []
    for point in entry_points():
        try:
            register(point.load())
        except KernelRegistrationError as exc:
            raise KernelRegistrationError(f"entry point {point.name} ({point.value}) in "
                                          f"{ENTRY_POINT_GROUP}: {exc}") from None
        except Exception as exc:
            raise KernelRegistrationError(
                f"entry point {point.name} ({point.value}) in {ENTRY_POINT_GROUP} failed to "
                f"load: {type(exc).__name__}: {exc}") from exc
        loaded.append(point.name)
    return loaded
