"""Vector kernels: RmsNorm, SwiGlu, SoftmaxV2, Add."""

from __future__ import annotations

import math
from collections.abc import Callable

import torch

from .binding import torch_npu_call
from .case import KernelCase
from .spec import KernelSpec
from .tensors import broadcast_shape, random_tensor, torch_dtype

RMS_NORM_EPS = 1e-6


class RmsNorm(KernelSpec):
    kernel_type = "RmsNorm"
    bytes_exact = True  # every slot read or written once: what the kernel must move
    portable = "torch: float32 RMS norm times gamma"
    work = "4*T*D flops; (2*T*D + D)*bytes + 4*T"

    def check(self, case: KernelCase) -> None:
        super().check(case)
        x, gamma = case.input(0).dims, case.input(1).dims
        if not x or tuple(x[len(x) - len(gamma):]) != tuple(gamma):
            raise case.error(f"RmsNorm: gamma {gamma} does not match the last dims of x {x}")

    def build_inputs(self, case, backend, generator):
        return {"x": self.tensor(case, 0, backend, generator),
                "gamma": self.tensor(case, 1, backend, generator)}

    def portable_call(self, tensors, case) -> Callable[[], object]:
        x, gamma = tensors["x"], tensors["gamma"]
        dims = tuple(range(-gamma.dim(), 0))

        def rms_norm():
            # Accumulate in float32 as the NPU kernel does; return y and rstd like it.
            xf = x.float()
            rstd = torch.rsqrt(xf.pow(2).mean(dim=dims, keepdim=True) + RMS_NORM_EPS)
            return (xf * rstd * gamma.float()).to(x.dtype), rstd
        return rms_norm

    def npu_call(self, tensors, case, backend) -> Callable[[], object]:
        return torch_npu_call(backend, "npu_rms_norm", (tensors["x"], tensors["gamma"]),
                              {"epsilon": RMS_NORM_EPS}, returns=2)

    def flops(self, case: KernelCase) -> float:
        return 4.0 * case.input(0).numel  # square, sum, scale, multiply by gamma


class SwiGlu(KernelSpec):
    kernel_type = "SwiGlu"
    bytes_exact = True  # every slot read or written once: what the kernel must move
    portable = "torch: silu(gate) * up"
    work = "3*numel(x) flops; 1.5*numel(x)*bytes"

    def check(self, case: KernelCase) -> None:
        super().check(case)
        x = case.input(0).dims
        if not x or x[-1] % 2:
            raise case.error(f"SwiGlu: the last dim of {x} must be even (gate and up halves)")

    def build_inputs(self, case, backend, generator):
        return {"x": self.tensor(case, 0, backend, generator)}

    def portable_call(self, tensors, case) -> Callable[[], object]:
        x = tensors["x"]

        def swiglu():
            gate, up = x.chunk(2, dim=-1)
            return torch.nn.functional.silu(gate) * up
        return swiglu

    def npu_call(self, tensors, case, backend) -> Callable[[], object]:
        return torch_npu_call(backend, "npu_swiglu", (tensors["x"],), {"dim": -1}, returns=1)

    def flops(self, case: KernelCase) -> float:
        return 3.0 * case.input(0).numel


class SoftmaxV2(KernelSpec):
    kernel_type = "SoftmaxV2"
    bytes_exact = True  # every slot read or written once: what the kernel must move
    portable = "torch.softmax"
    work = "5*numel flops; 2*numel*bytes"

    def build_inputs(self, case, backend, generator):
        return {"x": self.tensor(case, 0, backend, generator)}

    def portable_call(self, tensors, case) -> Callable[[], object]:
        x = tensors["x"]
        return lambda: torch.softmax(x, dim=-1)

    def npu_call(self, tensors, case, backend) -> Callable[[], object]:
        return self.portable_call(tensors, case)

    def flops(self, case: KernelCase) -> float:
        return 5.0 * case.input(0).numel  # max, subtract, exp, sum, divide


class Add(KernelSpec):
    """`torch.add(a, b)`; an empty slot that carries a dtype is a 0-d (scalar) tensor."""

    kernel_type = "Add"
    bytes_exact = True  # every slot read or written once: what the kernel must move
    portable = "torch.add"
    work = "numel(y) flops; (numel(a) + numel(b) + numel(y))*bytes"

    def check(self, case: KernelCase) -> None:
        for i in range(2):
            slot = case.input(i)
            if not slot.present and not slot.maybe_scalar:
                raise case.error(f"Add: input slot {i} is empty and has no dtype")
        if broadcast_shape(case.input(0).dims, case.input(1).dims) is None:
            raise case.error(f"Add: shapes {case.input(0).dims} and {case.input(1).dims} do "
                             f"not broadcast")

    def build_inputs(self, case, backend, generator):
        tensors = {}
        for i, name in enumerate(("a", "b")):
            slot = case.input(i)
            if slot.present:
                tensors[name] = self.tensor(case, i, backend, generator)
            else:
                tensors[name] = random_tensor((), torch_dtype(slot.dtype, case), backend.device,
                                              generator)
        return tensors

    def portable_call(self, tensors, case) -> Callable[[], object]:
        a, b = tensors["a"], tensors["b"]
        return lambda: torch.add(a, b)

    def npu_call(self, tensors, case, backend) -> Callable[[], object]:
        return self.portable_call(tensors, case)

    def flops(self, case: KernelCase) -> float:
        return float(math.prod(broadcast_shape(case.input(0).dims, case.input(1).dims) or ()))
