"""What the kernel catalog records about one kernel type: plain data, no torch.

Collection, the shape grid and ingest read these entries; only a replay (named by its entry,
imported on first use) needs torch.
"""

from __future__ import annotations

from dataclasses import dataclass

# `Accelerator Core` cells (docs/format.md §2) of the cores a kernel runs on.
CUBE = "AI_CORE"
VECTOR = "AI_VECTOR_CORE"
MIX = "MIX_AIC"
CORES = (CUBE, VECTOR, MIX)


@dataclass(frozen=True)
class SlotLayout:
    """One slot of a kernel's signature: its name and the dtype/format a new row gets."""

    name: str
    dtype: str = "DT_BF16"
    format: str = "ND"
    optional: bool = False


@dataclass(frozen=True)
class KernelEntry:
    """One kernel of the catalog.

    `kernel_types` are the database kernel types (CSV files) one replay covers: MatMulV2,
    MatMulV3 and MatMulCommon rows are the same call, which of them ran is only known after
    profiling, so they share one entry and one signature space. `replay` is the torch-backed
    spec as "module:Class", imported on first use; None until the kernel has a replay.
    `device_kernels` are the kernel types the replay launches on the device (what msprof
    names); empty means the entry's own kernel types. `streamed` names the inputs a model
    reads from memory at every call (weights, KV caches, experts, embedding tables: each layer
    has its own, evicted by the rest of the step before the next use); the other inputs are
    activations the step has just written, found in the cache. A replay measures streamed
    inputs cold and the others warm (kernels/cache_state.py).
    """

    kernel_types: tuple[str, ...]
    family: str
    core: str
    inputs: tuple[SlotLayout, ...]
    outputs: tuple[SlotLayout, ...]
    npu_api: str
    custom_op: bool = False  # from vllm-ascend's custom OPP (needs its environment: custom_ops.py)
    device_kernels: tuple[str, ...] = ()
    replay: str | None = None
    streamed: tuple[str, ...] = ()

    @property
    def name(self) -> str:
        return self.kernel_types[0]

    @property
    def launches(self) -> tuple[str, ...]:
        return self.device_kernels or self.kernel_types

    def __post_init__(self) -> None:
        unknown = [n for n in self.streamed if n not in {s.name for s in self.inputs}]
        if unknown:
            raise ValueError(f"{self.name}: streamed inputs {unknown} are not input slots")

    def input_index(self, name: str) -> int:
        return _index(self.inputs, name, self.name)

    def output_index(self, name: str) -> int:
        return _index(self.outputs, name, self.name)


def _index(slots: tuple[SlotLayout, ...], name: str, kernel: str) -> int:
    for i, slot in enumerate(slots):
        if slot.name == name:
            return i
    raise KeyError(f"{kernel} has no slot {name!r}")
