"""What every kernel spec provides: slot layout, input building, the NPU call, a portable
torch call, and the work it does (FLOPs, bytes).

A spec covers one or more kernel types (database files): `torch.mm` replays MatMulV2,
MatMulV3 and MatMulCommon rows alike, since which of them runs is only known after profiling.
What it covers, its slot layout, its NPU API and whether it is a custom operator come from its
kernel catalog entry (`kernels/entries.py`); a spec class only says its `kernel_type`.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import ClassVar

import torch

from . import catalog
from .case import KernelCase, TensorSlot
from .custom_ops import custom_op_environment
from .layout import SlotLayout
from .tensors import generator_for, input_tensor

__all__ = ["KernelSpec", "Prepared", "ReplaySkipped", "SlotLayout", "implemented", "present"]

# What `Prepared.implementation` says of a portable call that does not name itself.
PLAIN_TORCH = "plain torch"


class ReplaySkipped(Exception):
    """This row cannot run here (e.g. a multi-rank kernel without its process group): the
    case is skipped with this message and the row is kept as it is."""


def implemented(name: str, call: Callable[[], object]) -> Callable[[], object]:
    """Tag a call with the implementation it runs (e.g. which scaled-dot-product backend or
    grouped GEMM), which travels to the row's `MicroBench Implementation`."""
    call.implementation = name  # type: ignore[attr-defined]
    return call


@dataclass
class Prepared:
    """A case ready to run: the measured call and the work it does."""

    call: Callable[[], object]
    flops: float = 0.0
    bytes: float = 0.0
    tensors: dict[str, torch.Tensor] = field(default_factory=dict)
    implementation: str = ""  # which implementation `call` runs (see `implemented`)


class KernelSpec(ABC):
    kernel_type: ClassVar[str]
    covers: ClassVar[tuple[str, ...]] = ()
    inputs: ClassVar[tuple[SlotLayout, ...]]
    outputs: ClassVar[tuple[SlotLayout, ...]]
    npu_api: ClassVar[str]
    # Kernels from vllm-ascend's custom op package need its environment variables.
    custom_op: ClassVar[bool] = False

    def __init_subclass__(cls, **kwargs) -> None:
        """Metadata a subclass does not set itself comes from its catalog entry."""
        super().__init_subclass__(**kwargs)
        entry = catalog.entry_for(cls.__dict__.get("kernel_type", ""))
        if entry is None:
            return
        metadata = {"covers": entry.kernel_types if len(entry.kernel_types) > 1 else (),
                    "inputs": entry.inputs, "outputs": entry.outputs,
                    "npu_api": entry.npu_api, "custom_op": entry.custom_op}
        for name, value in metadata.items():
            if name not in cls.__dict__:
                setattr(cls, name, value)

    @classmethod
    def kernel_types(cls) -> tuple[str, ...]:
        return cls.covers or (cls.kernel_type,)

    def prepare(self, case: KernelCase, backend) -> Prepared:
        """Check the row, build inputs once on the device, pick the call for the device."""
        self.check(case)
        if self.custom_op and backend.kind == "npu":
            missing = custom_op_environment()
            if missing:
                raise case.error(f"{case.kernel_type} runs from vllm-ascend's custom operators: "
                                 + "; ".join(missing), column=None)
        generator = generator_for(case, backend.device)
        tensors = self.build_inputs(case, backend, generator)
        if backend.kind == "npu":
            call = self.npu_call(tensors, case, backend)
            default = self.npu_api.split("(")[0].strip()
        else:
            call = self.portable_call(tensors, case)
            default = PLAIN_TORCH
        return Prepared(call=call, flops=self.flops(case), bytes=self.bytes_moved(case),
                        tensors=tensors,
                        implementation=getattr(call, "implementation", None) or default)

    def check(self, case: KernelCase) -> None:
        """Raise `case.error(...)` when the row cannot describe a call of this kernel."""
        needed = [i for i, slot in enumerate(self.inputs) if not slot.optional]
        for i in needed:
            if not case.input(i).present:
                raise case.error(f"{case.kernel_type}: input slot {i} ({self.inputs[i].name}) "
                                 f"is empty; expected a shape")

    def tensor(self, case: KernelCase, index: int, backend, generator: torch.Generator,
               **kwargs) -> torch.Tensor:
        return input_tensor(case.input(index), case, backend, generator, **kwargs)

    @abstractmethod
    def build_inputs(self, case: KernelCase, backend, generator: torch.Generator
                     ) -> dict[str, torch.Tensor]:
        ...

    @abstractmethod
    def portable_call(self, tensors: dict[str, torch.Tensor], case: KernelCase
                      ) -> Callable[[], object]:
        """The same computation in plain torch, for CPU and CUDA."""

    @abstractmethod
    def npu_call(self, tensors: dict[str, torch.Tensor], case: KernelCase, backend
                 ) -> Callable[[], object]:
        """The call the reference replays on the NPU (CONTRACT.md §10)."""

    def flops(self, case: KernelCase) -> float:
        return 0.0

    def bytes_moved(self, case: KernelCase) -> float:
        """Bytes read and written once: the inputs and outputs of the row."""
        return case.io_bytes


def present(slots: tuple[TensorSlot, ...]) -> list[TensorSlot]:
    return [s for s in slots if s.present]
