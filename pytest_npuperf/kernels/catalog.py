"""The kernel catalog: which kernel types exist, what their rows hold, where their replay lives.

Torch-free and pandas-free, so that collection (which rows are replayable), the shape grid
(slot dtypes and formats of new rows, their core) and ingest (the attention slots) read kernel
metadata without importing any replay. `kernels.registry.spec_for` imports the replay an
entry names, on first use.

Adding a kernel type: one `KernelEntry` in `kernels/kernel_types.py` (its `replay` "module:Class"
set once the replay module exists) and that replay module.
"""

from __future__ import annotations

from .entry import CORES, CUBE, MIX, VECTOR, KernelEntry, SlotLayout
from .kernel_types import (
    ENTRIES,
    FIA_BLOCK_TABLE,
    FIA_INPUT_SLOTS,
    FIA_KEY,
    FIA_KEY_ROPE,
    FIA_KV_SEQ_LENS,
    FIA_MASK,
    FIA_QUERY,
    FIA_QUERY_ROPE,
    FIA_SEQ_LENS,
    FIA_VALUE,
)

_BY_TYPE: dict[str, KernelEntry] = {}


def add(entry: KernelEntry) -> KernelEntry:
    """Enter a kernel (e.g. one a conftest brings along); it replaces any entry of its types."""
    for kernel_type in entry.kernel_types:
        _BY_TYPE[kernel_type] = entry
    return entry


for _entry in ENTRIES:
    add(_entry)


def entry_for(kernel_type: str) -> KernelEntry | None:
    return _BY_TYPE.get(kernel_type)


def require(kernel_type: str) -> KernelEntry:
    """The entry of a kernel type the caller relies on (KeyError when the catalog lacks it)."""
    entry = _BY_TYPE.get(kernel_type)
    if entry is None:
        raise KeyError(f"kernel catalog: no entry for {kernel_type!r}")
    return entry


def entries() -> list[KernelEntry]:
    """Every entry once, in catalog order."""
    return list(dict.fromkeys(_BY_TYPE.values()))


def kernel_types() -> list[str]:
    return sorted(_BY_TYPE)


def replayable(kernel_type: str) -> bool:
    entry = _BY_TYPE.get(kernel_type)
    return entry is not None and entry.replay is not None


def replayable_types() -> list[str]:
    return sorted(t for t in _BY_TYPE if replayable(t))


def slot_layout(kernel_type: str) -> tuple[tuple[SlotLayout, ...], tuple[SlotLayout, ...]] | None:
    """Input and output slot layouts of a kernel type (dtypes and formats of a new row)."""
    entry = _BY_TYPE.get(kernel_type)
    return (entry.inputs, entry.outputs) if entry else None


def accelerator_core(kernel_type: str) -> str:
    """The `Accelerator Core` of a new row; a kernel the catalog does not know is a vector one."""
    entry = _BY_TYPE.get(kernel_type)
    return entry.core if entry else VECTOR


def same_call_types(kernel_type: str) -> tuple[str, ...]:
    """The kernel types whose rows are calls of the same replay (itself included)."""
    entry = _BY_TYPE.get(kernel_type)
    return entry.kernel_types if entry else (kernel_type,)


__all__ = [
    "CORES", "CUBE", "FIA_BLOCK_TABLE", "FIA_INPUT_SLOTS", "FIA_KEY", "FIA_KEY_ROPE",
    "FIA_KV_SEQ_LENS", "FIA_MASK", "FIA_QUERY", "FIA_QUERY_ROPE", "FIA_SEQ_LENS", "FIA_VALUE",
    "MIX", "VECTOR", "KernelEntry",
    "SlotLayout", "accelerator_core", "add", "entries", "entry_for", "kernel_types",
    "replayable", "replayable_types", "require", "same_call_types", "slot_layout",
]
