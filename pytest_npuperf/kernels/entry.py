"""What the kernel catalog records about one kernel type: plain data, no torch.

Collection, the shape grid and ingest read these entries; only a replay (named by its entry,
imported on first use) needs torch.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

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
class Operator:
    """An operator that stands for a kernel: the name the simulator's operator graph gives
    it (an op_mapping.yaml key: `aten.mm.default`, `tensor_cast.rms_norm.default`); an aten
    operator is also how a torch trace shows the call (`aten::mm`).

    `alternates`: other kernel tables the same call may be in (`alternate_kernel_types`);
    `mapping`: the other op_mapping.yaml keys of the operator (`tc_input_count`,
    `query_mode`, ...); `simulator`: False for an operator only traces show (no simulator
    operator has its name); `slots`: "module:function" turning a traced call's tensors into
    the kernel's input and output slots (kernels/torch_ops.py: a function of a list of
    `Tensor` returning `Slots` or None), where torch_ops.py has no conversion of that name."""

    name: str
    alternates: tuple[str, ...] = ()
    mapping: tuple[tuple[str, object], ...] = ()
    simulator: bool = True
    slots: str = ""

    def op_mapping(self, kernel_type: str) -> dict:
        """This operator's op_mapping.yaml entry."""
        out: dict = {"kernel_type": kernel_type}
        if self.alternates:
            out["alternate_kernel_types"] = list(self.alternates)
        out.update(self.mapping)
        return out


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
    `operators`: the simulator's and the traces' operators that are this kernel (their
    op_mapping.yaml entries and trace conversions, `Operator`). `grid`: the kernel's pattern
    in the default shape grid, written as grid/default_grid.yaml writes one (iterators,
    inputs, outputs, ...), for a kernel type that file does not assign.
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
    operators: tuple[Operator, ...] = ()
    grid: Mapping | None = field(default=None, compare=False)

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
