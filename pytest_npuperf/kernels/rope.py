"""Rotary embedding kernels: InterleaveRope (DeepSeek MLA) and split_qkv_rmsnorm_rope_kernel
(vllm-ascend's fused QKV split + per-head RMS norm + RoPE of GQA models)."""

from __future__ import annotations

from collections.abc import Callable

import torch

from .binding import Variant, bound_call, torch_npu_call
from .case import KernelCase
from .custom_ops import operator
from .functional import deinterleave, rms_normalize, rope, rotary_angles
from .spec import KernelSpec
from .tensors import torch_dtype

# Rotary tables span this many positions; tokens take random positions inside it.
MAX_POSITIONS = 4096
QK_NORM_EPS = 1e-6  # Qwen3's rms_norm_eps, what vLLM passes for its q/k norms


def rotary_table(shape: tuple[int, ...], dtype: torch.dtype, device: torch.device,
                 generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """cos and sin of `shape` (last dim d) for random positions: each row holds the d/2
    angles twice, the layout rotate-half RoPE reads."""
    rows = 1
    for dim in shape[:-1]:
        rows *= dim
    positions = torch.randint(0, MAX_POSITIONS, (rows,), generator=generator, device=device)
    angles = rotary_angles(positions, shape[-1])
    emb = torch.cat((angles, angles), dim=-1).reshape(shape)
    return emb.cos().to(dtype), emb.sin().to(dtype)


class InterleaveRope(KernelSpec):
    """q = x reshaped (..., D/2, 2), transposed and flattened; y = q*cos + RotateHalf(q)*sin.

    NPU: `torch_npu.npu_interleave_rope(x, cos, sin) -> Tensor` (op-plugin
    op_plugin_functions.yaml; docs/zh/custom_APIs/torch_npu/torch_npu-npu_interleave_rope.md:
    x (B, N, S, D), cos/sin (B, 1, S or 1, D), D must be 64; the NPU rejects other shapes).
    """

    kernel_type = "InterleaveRope"
    portable = "torch: de-interleave, x*cos + rotate_half(x)*sin"
    work = "3*B*N*S*D flops; (2*B*N*S*D + 2*B*S*D)*bytes"

    def check(self, case: KernelCase) -> None:
        super().check(case)
        x, cos, sin = (case.input(i).dims for i in range(3))
        if len(x) != 4 or len(cos) != 4 or cos != sin:
            raise case.error(f"InterleaveRope: expected x (B, N, S, D) and cos, sin "
                             f"(B, 1, S, D) of one shape, got {x}, {cos}, {sin}")
        if x[-1] % 2 or cos[-1] != x[-1] or any(c not in (1, d) for c, d in zip(cos, x)):
            raise case.error(f"InterleaveRope: cos/sin {cos} do not broadcast to x {x} "
                             f"(an even last dim is rotated)")

    def build_inputs(self, case, backend, generator):
        x = self.tensor(case, 0, backend, generator)
        cos, sin = rotary_table(case.input(1).dims, torch_dtype(case.input(1).dtype, case),
                                backend.device, generator)
        return {"x": x, "cos": cos, "sin": sin}

    def portable_call(self, tensors, case) -> Callable[[], object]:
        x, cos, sin = tensors["x"], tensors["cos"], tensors["sin"]
        return lambda: rope(deinterleave(x), cos, sin).to(x.dtype)

    def npu_call(self, tensors, case, backend) -> Callable[[], object]:
        return torch_npu_call(backend, "npu_interleave_rope",
                              (tensors["x"], tensors["cos"], tensors["sin"]), returns=1)

    def flops(self, case: KernelCase) -> float:
        return 3.0 * case.input(0).numel


class SplitQkvRmsNormRope(KernelSpec):
    """Split a packed (T, Hq + 2*Hkv) projection into q, k, v; RMS-normalise every q and k head
    (head_dim = the norm weight's length) and scale it by its weight; rotate q and k with
    rotate-half RoPE from a cos|sin table at each token's position; copy v.

    NPU: `torch.ops.vllm.qkv_rmsnorm_rope(input, cos_sin_cache, positions, q_weight, k_weight,
    q_hidden_size, kv_hidden_size, head_dim, eps, q_bias=None, k_bias=None) -> (q, k, v)`, a
    Triton kernel vllm-ascend registers in
    vllm_ascend/ops/triton/linearnorm/split_qkv_rmsnorm_rope.py (called so by
    vllm_ascend/device/device_op.py). The row records one weight slot: q and k weights are
    built of that shape, the rotary table covers the whole head (Qwen3), no biases.

    Slot 1 is the 1-D per-head norm weight, not the rotary table the reference replay takes it
    for (msmodeling split_qkv_rmsnorm_rope_kernel_run.py reads its length as the rope dim and
    builds cos_sin_cache from it): cos_sin_cache is 2-D (positions, rope dim; the op reads
    `cos_sin_cache.shape[-1]`) and the kernel loads q/k weights as `HEAD_DIM` values
    (vllm-ascend v0.18.0 split_qkv_rmsnorm_rope.py:56-57, 264-276). With Qwen3's full-head
    rope both readings build the same call.
    """

    streamed = ("q_weight", "k_weight")  # the catalog's norm_weight, as this spec holds it

    kernel_type = "split_qkv_rmsnorm_rope_kernel"
    portable = "torch: split, float32 per-head RMS norm, rotate-half RoPE, copy"
    work = "8*T*(Hq+Hkv) flops; (2*T*(Hq+2*Hkv) + 2*head_dim)*bytes"

    def _sizes(self, case: KernelCase) -> tuple[int, int, int]:
        """(q hidden, kv hidden, head dim) of the row."""
        width, head = case.input(0).dims[-1], case.input(1).dims
        q_hidden, kv_hidden = case.output(0).dims[-1:], case.output(1).dims[-1:]
        if not (q_hidden and kv_hidden and len(head) == 1):
            raise case.error("split_qkv_rmsnorm_rope_kernel: the q and k output slots and a "
                             "1-D norm weight give the split", column="Output Shapes")
        sizes = (q_hidden[0], kv_hidden[0], head[0])
        if width != sizes[0] + 2 * sizes[1] or sizes[0] % sizes[2] or sizes[1] % sizes[2]:
            raise case.error(f"split_qkv_rmsnorm_rope_kernel: qkv width {width} is not "
                             f"q {sizes[0]} + 2 * kv {sizes[1]} in heads of {sizes[2]}")
        return sizes

    def check(self, case: KernelCase) -> None:
        super().check(case)
        if len(case.input(0).dims) != 2:
            raise case.error(f"split_qkv_rmsnorm_rope_kernel: qkv {case.input(0).dims} is "
                             f"not (tokens, width)")
        self._sizes(case)

    def build_inputs(self, case, backend, generator):
        tokens = case.input(0).dims[0]
        head_dim = self._sizes(case)[2]
        qkv = self.tensor(case, 0, backend, generator)
        positions = torch.randint(0, MAX_POSITIONS, (tokens,), generator=generator,
                                  device=backend.device)
        angles = rotary_angles(torch.arange(MAX_POSITIONS, device=backend.device), head_dim)
        return {"input": qkv, "q_weight": self.tensor(case, 1, backend, generator),
                "k_weight": self.tensor(case, 1, backend, generator), "positions": positions,
                "cos_sin_cache": torch.cat((angles.cos(), angles.sin()), -1).to(qkv.dtype)}

    def portable_call(self, tensors, case) -> Callable[[], object]:
        q_hidden, kv_hidden, head_dim = self._sizes(case)
        x, table, positions = tensors["input"], tensors["cos_sin_cache"], tensors["positions"]
        q_weight, k_weight = tensors["q_weight"], tensors["k_weight"]

        def norm_rope(heads, weight, cos, sin):
            normed, _ = rms_normalize(heads.unflatten(-1, (-1, head_dim)), QK_NORM_EPS)
            # The kernel rounds the normalised heads to the input dtype before rotating.
            normed = (normed * weight.to(normed.dtype)).to(x.dtype)
            rot = table.shape[-1]
            turned = rope(normed[..., :rot], cos, sin).to(x.dtype)
            return torch.cat((turned, normed[..., rot:]), -1).flatten(-2)

        def split_qkv_rmsnorm_rope():
            half_cos, half_sin = table[positions].unsqueeze(1).chunk(2, dim=-1)
            cos, sin = torch.cat((half_cos, half_cos), -1), torch.cat((half_sin, half_sin), -1)
            q = norm_rope(x[:, :q_hidden], q_weight, cos, sin)
            k = norm_rope(x[:, q_hidden:q_hidden + kv_hidden], k_weight, cos, sin)
            return q, k, x[:, q_hidden + kv_hidden:].contiguous()
        return split_qkv_rmsnorm_rope

    def npu_call(self, tensors, case, backend) -> Callable[[], object]:
        q_hidden, kv_hidden, head_dim = self._sizes(case)
        op = operator(backend, "vllm", "qkv_rmsnorm_rope")
        t = tensors
        call = Variant("", kwargs=dict(
            input=t["input"], cos_sin_cache=t["cos_sin_cache"], positions=t["positions"],
            q_weight=t["q_weight"], k_weight=t["k_weight"], q_hidden_size=q_hidden,
            kv_hidden_size=kv_hidden, head_dim=head_dim, eps=QK_NORM_EPS, q_bias=None,
            k_bias=None), returns=3)
        return bound_call(op, "torch.ops.vllm.qkv_rmsnorm_rope", call)

    def flops(self, case: KernelCase) -> float:
        q_hidden, kv_hidden, _ = self._sizes(case)
        return 8.0 * case.input(0).dims[0] * (q_hidden + kv_hidden)
