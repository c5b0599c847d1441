"""GEMM kernels: MatMulV2 / MatMulV3 / MatMulCommon (`torch.mm`) and BatchMatMulV2."""

from __future__ import annotations

import math
from collections.abc import Callable

import torch

from ..db.signature import GemmLayout, gemm_layout
from .case import KernelCase
from .spec import KernelSpec
from .tensors import broadcast_shape, nd_shape


def _layout(case: KernelCase) -> GemmLayout:
    a, b = case.input(0), case.input(1)
    layout = gemm_layout(nd_shape(a), nd_shape(b), case.output(0).shape)
    if layout is None:
        raise case.error(f"{case.kernel_type}: input shapes {a.shape} and {b.shape} do not form "
                         f"a matrix product giving {case.output(0).shape}")
    return layout


class MatMul(KernelSpec):
    """`torch.mm(a, b.t())` with b stored (N, K); the reference replay of all three types."""

    kernel_type = "MatMulV2"  # and the other types of its catalog entry
    portable = "torch.mm / torch.addmm"
    work = "2*M*N*K flops; (M*K + N*K + M*N)*bytes"

    def check(self, case: KernelCase) -> None:
        super().check(case)
        _layout(case)

    def build_inputs(self, case, backend, generator):
        # Operands in their stored (physical) layout; the call transposes views, as the
        # NPU replays do, so that the kernel sees the same strides as in the profile.
        tensors = {"a": self.tensor(case, 0, backend, generator),
                   "b": self.tensor(case, 1, backend, generator)}
        if case.input(2).present:
            tensors["bias"] = self.tensor(case, 2, backend, generator)
        return tensors

    def portable_call(self, tensors, case) -> Callable[[], object]:
        layout = _layout(case)
        a = tensors["a"].t() if layout.a_transposed else tensors["a"]
        b = tensors["b"].t() if layout.b_transposed else tensors["b"]
        bias = tensors.get("bias")
        if bias is not None:
            return lambda: torch.addmm(bias, a, b)
        return lambda: torch.mm(a, b)

    def npu_call(self, tensors, case, backend) -> Callable[[], object]:
        return self.portable_call(tensors, case)

    def flops(self, case: KernelCase) -> float:
        layout = _layout(case)
        return 2.0 * layout.m * layout.n * layout.k


def _batch_layout(case: KernelCase) -> tuple[bool, bool, int, int, int, int]:
    """(a transposed, b transposed, batch, M, K, N) of a batched product."""
    a, b, out = nd_shape(case.input(0)), nd_shape(case.input(1)), case.output(0).shape
    if len(a) < 2 or len(b) < 2:
        raise case.error(f"BatchMatMulV2: operands need at least 2 dims, got {a} and {b}")
    m_n = tuple(out[-2:]) if out is not None and len(out) >= 2 else None
    for a_t in (False, True):
        m, k = (a[-1], a[-2]) if a_t else (a[-2], a[-1])
        for b_t in (False, True):
            kb, n = (b[-1], b[-2]) if b_t else (b[-2], b[-1])
            batch_dims = broadcast_shape(tuple(a[:-2]), tuple(b[:-2]))
            if kb == k and batch_dims is not None and (m_n is None or m_n == (m, n)):
                return a_t, b_t, math.prod(batch_dims), m, k, n
    raise case.error(f"BatchMatMulV2: shapes {a} and {b} do not form a batched product giving "
                     f"{out}")


class BatchMatMulV2(KernelSpec):
    kernel_type = "BatchMatMulV2"
    portable = "torch.matmul"
    work = "2*B*M*N*K flops; (B*M*K + B*K*N + B*M*N)*bytes"

    def check(self, case: KernelCase) -> None:
        super().check(case)
        _batch_layout(case)

    def build_inputs(self, case, backend, generator):
        return {"a": self.tensor(case, 0, backend, generator),
                "b": self.tensor(case, 1, backend, generator)}

    def portable_call(self, tensors, case) -> Callable[[], object]:
        a_t, b_t, *_ = _batch_layout(case)
        a = tensors["a"].transpose(-1, -2) if a_t else tensors["a"]
        b = tensors["b"].transpose(-1, -2) if b_t else tensors["b"]
        return lambda: torch.matmul(a, b)

    def npu_call(self, tensors, case, backend) -> Callable[[], object]:
        return self.portable_call(tensors, case)

    def flops(self, case: KernelCase) -> float:
        _, _, batch, m, k, n = _batch_layout(case)
        return 2.0 * batch * m * n * k
