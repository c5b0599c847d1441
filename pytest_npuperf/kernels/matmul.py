"""GEMM kernels: MatMulV2 / MatMulV3 / MatMulCommon (`torch.mm`), BatchMatMulV2 and
TransposeBatchMatMul."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import torch

from ..db.signature import GemmLayout, gemm_layout
from .binding import torch_npu_call
from .case import KernelCase
from .quant import quant_param, quant_param_scale
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
    bytes_exact = True  # every slot read or written once: what the kernel must move
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
    bytes_exact = True  # every slot read or written once: what the kernel must move
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


# -- TransposeBatchMatMul ---------------------------------------------------------------------
@dataclass(frozen=True)
class TransposeLayout:
    batch: int
    m: int
    k: int
    n: int
    x1_mbk: bool  # x1 stored (M, B, K): perm_x1 = (1, 0, 2)


def _transpose_layout(case: KernelCase) -> TransposeLayout:
    """`torch_npu.npu_transpose_batchmatmul` (op-plugin docs/zh/custom_APIs/torch_npu/
    torch_npu-npu_transpose_batchmatmul.md): x1 (B, M, K) or (M, B, K), x2 (B, K, N), output
    (M, B, N) (perm_y = (1, 0, 2), the only one supported); with a scale the int8 output is
    (M, 1, B * N). MLA's up-projection (vllm-ascend attention/dsa_v1.py) passes x1 as
    (M, B, K), the layout chosen when both readings fit."""
    x1, x2 = case.input(0).dims, case.input(1).dims
    if len(x1) != 3 or len(x2) != 3 or x1[2] != x2[1]:
        raise case.error(f"TransposeBatchMatMul: x1 {x1} and x2 {x2} must be (B, M, K) or "
                         f"(M, B, K) and (B, K, N)")
    batch, k, n = x2
    if x1[1] == batch:
        layout = TransposeLayout(batch, x1[0], k, n, True)
    elif x1[0] == batch:
        layout = TransposeLayout(batch, x1[1], k, n, False)
    else:
        raise case.error(f"TransposeBatchMatMul: x1 {x1} has no batch dim of {batch}")
    out = case.output(0)
    if out.present and out.numel != layout.m * batch * n:
        raise case.error(f"TransposeBatchMatMul: output {out.dims} is not (M, B, N) = "
                         f"{(layout.m, batch, n)}")
    if case.input(2).present:
        raise case.error("TransposeBatchMatMul: bias is not supported by the API")
    return layout


class TransposeBatchMatMul(KernelSpec):
    """y = (x1^T1 @ x2)^(1, 0, 2): a batched product whose batch moves to the middle of the
    output; with a scale (an INT64 quant parameter of float32 scales, one per output column of
    each batch: quant.quant_param) the output is int8."""

    kernel_type = "TransposeBatchMatMul"
    portable = "torch.bmm + transpose (with a scale: requantised to int8)"
    work = "2*B*M*K*N flops; bytes of every slot of the row"

    def check(self, case: KernelCase) -> None:
        super().check(case)
        _transpose_layout(case)

    def build_inputs(self, case, backend, generator):
        tensors = {"x1": self.tensor(case, 0, backend, generator),
                   "x2": self.tensor(case, 1, backend, generator)}
        scale = case.input(3)
        if scale.present:
            values = quant_param_scale(
                torch.rand(scale.dims, device=backend.device, generator=generator) + 0.5)
            tensors["scale_value"] = values
            tensors["scale"] = quant_param(values, backend)
        return tensors

    def portable_call(self, tensors, case) -> Callable[[], object]:
        layout = _transpose_layout(case)
        x1 = tensors["x1"].transpose(0, 1) if layout.x1_mbk else tensors["x1"]
        x2, scale = tensors["x2"], tensors.get("scale_value")
        out_shape = case.output(0).dims or (layout.m, layout.batch, layout.n)

        def transpose_bmm():
            y = torch.bmm(x1, x2).transpose(0, 1)  # (M, B, N)
            if scale is not None:
                y = torch.round(y.float().reshape(layout.m, -1) * scale).clamp_(-128, 127)
                return y.to(torch.int8).reshape(out_shape)
            return y.contiguous().reshape(out_shape)  # (M, B, N) in memory, as the kernel
        return transpose_bmm

    def npu_call(self, tensors, case, backend) -> Callable[[], object]:
        layout = _transpose_layout(case)
        x1, x2, scale = tensors["x1"], tensors["x2"], tensors.get("scale")
        perm_x1 = (1, 0, 2) if layout.x1_mbk else (0, 1, 2)
        return torch_npu_call(backend, "npu_transpose_batchmatmul", (x1, x2),
                              {"bias": None, "scale": scale, "perm_x1": perm_x1,
                               "perm_x2": (0, 1, 2), "perm_y": (1, 0, 2), "batch_split_factor": 1},
                              returns=1)

    def flops(self, case: KernelCase) -> float:
        layout = _transpose_layout(case)
        return 2.0 * layout.batch * layout.m * layout.k * layout.n
