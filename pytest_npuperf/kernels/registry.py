"""Kernel type -> replay spec, imported on first use from the module its catalog entry names.

A type without a replay is still collected, as a skipped case; which types have one is the
catalog's to say (no import needed).
"""

from __future__ import annotations

import dataclasses
import importlib

from . import catalog
from .entry import KernelEntry, SlotLayout
from .spec import KernelSpec

# Specs built so far, one instance per entry, under each kernel type it covers.
REGISTRY: dict[str, KernelSpec] = {}


def load_replay(target: str) -> type[KernelSpec]:
    """The spec class of a "module:Class" replay target."""
    module_name, _, class_name = target.partition(":")
    spec_class = getattr(importlib.import_module(module_name), class_name, None)
    if not (isinstance(spec_class, type) and issubclass(spec_class, KernelSpec)):
        raise ImportError(f"replay {target!r} is not a KernelSpec class")
    return spec_class


def register(spec_class: type[KernelSpec]) -> type[KernelSpec]:
    """Make a spec class (e.g. one a conftest defines) the replay of its kernel types; a type the
    catalog does not know enters it with the class's own layout."""
    spec = spec_class()
    target = f"{spec_class.__module__}:{spec_class.__qualname__}"
    known = catalog.entry_for(spec_class.kernel_type)
    if known is None:
        catalog.add(KernelEntry(spec.kernel_types(), "other", catalog.VECTOR, spec.inputs,
                                spec.outputs, spec.npu_api, custom_op=spec.custom_op,
                                replay=target))
    elif known.replay != target:  # the entry's operators and grid stay
        catalog.add(dataclasses.replace(
            known, kernel_types=spec.kernel_types(), inputs=spec.inputs, outputs=spec.outputs,
            npu_api=spec.npu_api, custom_op=spec.custom_op, replay=target, streamed=()))
    for kernel_type in spec.kernel_types():
        REGISTRY[kernel_type] = spec
    return spec_class


def spec_for(kernel_type: str) -> KernelSpec | None:
    spec = REGISTRY.get(kernel_type)
    if spec is None:
        entry = catalog.entry_for(kernel_type)
        if entry is None or entry.replay is None:
            return None
        spec_class = load_replay(entry.replay)
        spec_class.take_entry(entry)
        spec = spec_class()
        for covered in entry.kernel_types:
            REGISTRY[covered] = spec
    return spec


def replayable_types() -> list[str]:
    return catalog.replayable_types()


def slot_layout(kernel_type: str) -> tuple[tuple[SlotLayout, ...], tuple[SlotLayout, ...]] | None:
    """Input and output slot layouts of a kernel type (dtypes and formats of a new row)."""
    return catalog.slot_layout(kernel_type)
