"""Kernel type -> spec. A type without a spec is still collected, as a skipped case."""

from __future__ import annotations

from .matmul import BatchMatMulV2, MatMul
from .spec import KernelSpec, SlotLayout
from .vector import Add, RmsNorm, SoftmaxV2, SwiGlu

_SPECS: tuple[type[KernelSpec], ...] = (MatMul, BatchMatMulV2, RmsNorm, SwiGlu, SoftmaxV2, Add)

REGISTRY: dict[str, KernelSpec] = {}


def register(spec_class: type[KernelSpec]) -> type[KernelSpec]:
    spec = spec_class()
    for kernel_type in spec.kernel_types():
        REGISTRY[kernel_type] = spec
    return spec_class


for _spec in _SPECS:
    register(_spec)


def spec_for(kernel_type: str) -> KernelSpec | None:
    return REGISTRY.get(kernel_type)


def replayable_types() -> list[str]:
    return sorted(REGISTRY)


def slot_layout(kernel_type: str) -> tuple[tuple[SlotLayout, ...], tuple[SlotLayout, ...]] | None:
    """Input and output slot layouts of a kernel type (dtypes and formats of a new row)."""
    spec = spec_for(kernel_type)
    return (spec.inputs, spec.outputs) if spec else None
