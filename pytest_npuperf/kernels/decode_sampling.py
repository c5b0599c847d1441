"""Sampling kernels of a decode step: ArgMaxV2 (greedy), Sort (top-k / top-p) and MaskedFill
(masking logits), all dispatched by torch itself (aclnnArgMax, aclnnSort,
aclnnInplaceMaskedFillScalar on the NPU: the reference op_mapping.yaml)."""

from __future__ import annotations

from collections.abc import Callable

import torch

from .case import KernelCase
from .spec import SameCall
from .tensors import broadcast_shape, random_tensor, torch_dtype


def reduced_dim(case: KernelCase) -> int:
    """The dim a reduction removed: the output is the input without it (or with it kept as
    1); the last such dim when several fit, as logits reduce over the vocabulary."""
    x, out = case.input(0).dims, case.output(0).dims if case.output(0).present else None
    if out is None:
        return len(x) - 1
    for dim in reversed(range(len(x))):
        if tuple(out) in (x[:dim] + x[dim + 1:], x[:dim] + (1,) + x[dim + 1:]):
            return dim
    raise case.error(f"{case.kernel_type}: output {out} is not {x} reduced over one dim",
                     column="Output Shapes")


class ArgMaxV2(SameCall):
    """`torch.argmax(x, dim)`, dim from the output shape (keepdim when it keeps a 1)."""

    kernel_type = "ArgMaxV2"
    portable = "torch.argmax"
    work = "0 flops (comparisons); numel(x)*bytes + numel(y)*8"

    def check(self, case: KernelCase) -> None:
        super().check(case)
        reduced_dim(case)

    def build_inputs(self, case, backend, generator):
        return {"x": self.tensor(case, 0, backend, generator)}

    def portable_call(self, tensors, case) -> Callable[[], object]:
        x, dim = tensors["x"], reduced_dim(case)
        keep = case.output(0).present and len(case.output(0).dims) == x.dim()
        return lambda: torch.argmax(x, dim=dim, keepdim=keep)

    def results(self, returned, tensors, case):
        # Ties may resolve to different positions on different devices: compare the maxima
        # the indices point at.
        x, dim = tensors["x"], reduced_dim(case)
        index = returned if returned.dim() == x.dim() else returned.unsqueeze(dim)
        return (x.gather(dim, index.long()),)


class Sort(SameCall):
    """`torch.sort(x, dim=-1)` ascending, as vLLM's top-k/top-p sampler sorts logits."""

    kernel_type = "Sort"
    portable = "torch.sort"
    work = "0 flops (n*log2(n) comparisons per row); numel(x)*bytes + numel(y)*(bytes + 8)"

    def check(self, case: KernelCase) -> None:
        super().check(case)
        x = case.input(0).dims
        if not x or any(case.output(i).present and case.output(i).dims != x for i in range(2)):
            raise case.error(f"Sort: outputs {case.output(0).dims}, {case.output(1).dims} are "
                             f"not the shape of x {x}", column="Output Shapes")

    def build_inputs(self, case, backend, generator):
        return {"x": self.tensor(case, 0, backend, generator)}

    def portable_call(self, tensors, case) -> Callable[[], object]:
        x = tensors["x"]
        return lambda: torch.sort(x, dim=-1)

    def results(self, returned, tensors, case):
        # Equal keys may come out in any order: compare the sorted values, and what the indices
        # point at (which must be those values).
        values, indices = returned
        return values, tensors["x"].gather(-1, indices.long())


class MaskedFill(SameCall):
    """`x.masked_fill_(mask, value)` in place, value -inf for floating x (masked logits)."""

    kernel_type = "MaskedFill"
    portable = "torch: Tensor.masked_fill_"
    work = "0 flops; (2*numel(x))*bytes + numel(mask)"

    def check(self, case: KernelCase) -> None:
        super().check(case)
        x, mask = case.input(0).dims, case.input(1).dims
        if broadcast_shape(x, mask) != tuple(x):
            raise case.error(f"MaskedFill: mask {mask} does not broadcast to x {x}")

    def build_inputs(self, case, backend, generator):
        mask = case.input(1)
        return {"x": self.tensor(case, 0, backend, generator),
                "mask": random_tensor(mask.dims, torch_dtype(mask.dtype, case), backend.device,
                                      generator, high=2).bool()}

    def portable_call(self, tensors, case) -> Callable[[], object]:
        x, mask = tensors["x"], tensors["mask"]
        value = float("-inf") if x.dtype.is_floating_point else 0
        return lambda: x.masked_fill_(mask, value)
