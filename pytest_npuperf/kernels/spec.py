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
from .cache_state import Rotation, plan, rotating
from .case import KernelCase, TensorSlot
from .custom_ops import custom_op_environment
from .entry import SlotLayout
from .tensors import generator_for, input_tensor

__all__ = ["KernelSpec", "NpuOnly", "Prepared", "ReplaySkipped", "SameCall", "SlotLayout",
           "api_results", "implemented", "present"]

# What a spec's portable path runs when it does not say (`KernelSpec.portable`), which is also
# what `Prepared.implementation` says of a portable call that does not name itself.
PLAIN_TORCH = "plain torch"


class ReplaySkipped(Exception):
    """This row cannot run here (e.g. a multi-rank kernel without its process group): the
    case is skipped with this message and the row is kept as it is."""


class NpuOnly(ReplaySkipped):
    """A kernel without a portable path was asked to run off the NPU: its case is skipped,
    naming the operator."""


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
    rotation: Rotation = field(default_factory=lambda: Rotation("warm"))


class KernelSpec(ABC):
    kernel_type: ClassVar[str]
    covers: ClassVar[tuple[str, ...]] = ()
    inputs: ClassVar[tuple[SlotLayout, ...]]
    outputs: ClassVar[tuple[SlotLayout, ...]]
    npu_api: ClassVar[str]
    # Inputs a model reads from memory at every call (cache_state.py): the catalog's.
    streamed: ClassVar[tuple[str, ...]] = ()
    # Kernels from vllm-ascend's custom op package need its environment variables.
    custom_op: ClassVar[bool] = False
    # What the portable path runs and the work of one call, as `npuperf kernels` shows them.
    portable: ClassVar[str] = PLAIN_TORCH
    work: ClassVar[str] = ""
    # Outputs (by index) whose last dimension is a set, not a sequence: top-k indices, whose
    # order among (near-)equal scores depends on the device's arithmetic. --npuperf-verify
    # compares them sorted.
    unordered_outputs: ClassVar[tuple[int, ...]] = ()

    def __init_subclass__(cls, **kwargs) -> None:
        """Metadata a subclass does not set itself comes from its catalog entry."""
        super().__init_subclass__(**kwargs)
        entry = catalog.entry_for(cls.__dict__.get("kernel_type", ""))
        if entry is None:
            return
        metadata = {"covers": entry.kernel_types if len(entry.kernel_types) > 1 else (),
                    "inputs": entry.inputs, "outputs": entry.outputs,
                    "npu_api": entry.npu_api, "custom_op": entry.custom_op,
                    "streamed": entry.streamed}
        for name, value in metadata.items():
            if name not in cls.__dict__:
                setattr(cls, name, value)

    @classmethod
    def kernel_types(cls) -> tuple[str, ...]:
        return cls.covers or (cls.kernel_type,)

    @classmethod
    def has_portable_path(cls) -> bool:
        """False for a kernel that only its NPU operator computes (it defines no
        `portable_call`): off the NPU its cases are skipped, naming the operator."""
        return cls.portable_call is not KernelSpec.portable_call

    def prepare(self, case: KernelCase, backend, cache: str = "warm") -> Prepared:
        """Check the row, build inputs once on the device, pick the call for the device; with
        `cache` model or cold, the call rotates the inputs it reads cold (cache_state.py)."""
        self.check(case)
        if backend.kind != "npu" and not self.has_portable_path():
            raise NpuOnly(f"{case.kernel_type} runs only on an NPU: {self.npu_api}"
                          f"{' (a vllm-ascend custom operator)' if self.custom_op else ''} "
                          f"has no portable path; skipped on {backend.kind}")
        # A backend that brings its own operators (the offline schema check's) loads none.
        if self.custom_op and backend.kind == "npu" and not hasattr(backend, "custom_operator"):
            missing = custom_op_environment()
            if missing:
                raise case.error(f"{case.kernel_type} runs from vllm-ascend's custom operators: "
                                 + "; ".join(missing), column=None)
        generator = generator_for(case, backend.device)
        tensors = self.build_inputs(case, backend, generator)
        if backend.kind == "npu":
            def make_call(inputs):
                return self.npu_call(inputs, case, backend)
            default = self.npu_api.split("(")[0].strip()
        else:
            def make_call(inputs):
                return self.portable_call(inputs, case)
            default = self.portable  # what the portable path runs, unless the call says
        rotation = plan(cache, tensors, self.streamed, backend.l2_cache_bytes())
        call = rotating(tensors, rotation, make_call)
        return Prepared(call=call, flops=self.flops(case), bytes=self.bytes_moved(case),
                        tensors=tensors, rotation=rotation,
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

    def portable_call(self, tensors: dict[str, torch.Tensor], case: KernelCase
                      ) -> Callable[[], object]:
        """The same computation in plain torch, for CPU and CUDA (a spec that cannot offer
        one leaves this out: see `has_portable_path`)."""
        raise NpuOnly(f"{case.kernel_type} has no portable path")

    @abstractmethod
    def npu_call(self, tensors: dict[str, torch.Tensor], case: KernelCase, backend
                 ) -> Callable[[], object]:
        """The call the reference replays on the NPU (CONTRACT.md §10)."""

    def results(self, returned: object, tensors: dict[str, torch.Tensor], case: KernelCase
                ) -> tuple[torch.Tensor, ...]:
        """The tensors a call produced, in an order both paths share (what --npuperf-verify
        compares); an in-place kernel returns the tensors it updated."""
        if isinstance(returned, torch.Tensor):
            return (returned,)
        if isinstance(returned, (tuple, list)):
            return tuple(t for t in returned if isinstance(t, torch.Tensor))
        return ()

    def flops(self, case: KernelCase) -> float:
        return 0.0

    def bytes_moved(self, case: KernelCase) -> float:
        """Bytes read and written once: the inputs and outputs of the row."""
        return case.io_bytes


class SameCall(KernelSpec):
    """A kernel torch itself dispatches to (aclnn on the NPU): one call for every device."""

    def npu_call(self, tensors, case, backend) -> Callable[[], object]:
        return self.portable_call(tensors, case)


def present(slots: tuple[TensorSlot, ...]) -> list[TensorSlot]:
    return [s for s in slots if s.present]


def returned_values(returned: object) -> tuple[object, ...]:
    """What a call returned, as a tuple (a lone tensor is one value; a `Tensor[]` return, a
    list, is unpacked)."""
    if isinstance(returned, (tuple, list)):
        return tuple(returned)
    return () if returned is None else (returned,)


def api_results(returned: object, keep: tuple[bool, ...]) -> tuple[torch.Tensor, ...]:
    """The outputs at the `keep` positions of what an API returned, in its order.

    The NPU operators return their full output list with empty placeholders where a flag
    asked for nothing (an LSE of shape (0,), an empty output_offset); an older schema may
    return fewer values, and a portable path only what it computes. Positions past the end
    of what came back are left out: the verification then counts the outputs and says so."""
    values = returned_values(returned)
    return tuple(v for v, wanted in zip(values, keep) if wanted and isinstance(v, torch.Tensor))
