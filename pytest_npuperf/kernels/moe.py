"""MoE kernels: GroupedMatmul, GroupedMatmulSwigluQuant, MoeTokenPermute, MoeTokenUnpermute
and DispatchFFNCombine.

NPU APIs (op-plugin op_plugin/config/op_plugin_functions.yaml; vllm-ascend
csrc/torch_binding.cpp for the custom op), called the way vllm-ascend's fused MoE calls them
(vllm_ascend/ops/fused_moe/moe_mlp.py, moe_comm_method.py):
- `npu_grouped_matmul(x: list, weight: list, *, bias, scale, offset, antiquant_scale,
  antiquant_offset, per_token_scale, group_list, split_item, group_type, group_list_type,
  output_dtype, ...) -> list`: one x and one stacked weight, split_item=2, group_type=0
  (groups of rows), group_list_type=1 (per-expert row counts).
- `npu_grouped_matmul_swiglu_quant(x, weight, group_list, weight_scale, x_scale, *, bias,
  offset) -> (y, y_scale, y_offset)`: the group list is cumulative (moe_mlp.py passes
  `cumsum_group_list(...)`); op-plugin's test gives the math: int32 GEMM, times per-channel
  and per-token scales, swiglu (silu of the first half times the second), per-token int8.
- `npu_moe_token_permute(tokens, indices, num_out_tokens=None, padded_mode=False)` and
  `npu_moe_token_unpermute(permuted_tokens, sorted_indices, probs=None, ...)`: the permute's
  `sorted_indices` is where each (token, k) lands (the inverse of the stable sort by expert,
  op-plugin test/test_custom_ops/test_npu_moe_token_permute_and_unpermute.py), which the
  unpermute reads back.
- `torch.ops._C_ascend.dispatch_ffn_combine(x, weight1: list, weight2: list, expert_idx,
  scale1: list, scale2: list, bias1: list, bias2: list, probs, group, max_output_size, out,
  expert_token_nums, x_active_mask=None, swiglu_limit) -> (out, expert_token_nums)`: a
  multi-rank op over an HCCL group; vllm-ascend v0.18.0's schema has no bias1, bias2,
  x_active_mask or swiglu_limit (bound to whichever is installed: binding.py).

Group sizes are read on the host when a case is prepared: the portable loops of GEMMs are
timed without a device-to-host copy of the group list in each call.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import torch

from .binding import Variant, bound_call, torch_npu_call
from .case import KernelCase
from .custom_ops import operator
from .quant import (
    FLOAT_EMULATION,
    INT8_MAX,
    float_bits_as_int64,
    group_sizes,
    int64_bits_as_float,
    positive_scales,
    quant_param,
    quant_param_scale,
    quantize_per_token,
)
from .spec import KernelSpec, ReplaySkipped, api_results, implemented
from .tensors import nd_shape, random_tensor, shaped_input, torch_dtype

# Expert ids routed to when a row does not say how many experts there are (DeepSeek-V3's).
DEFAULT_EXPERTS = 256
# vllm-ascend's default `mega_moe_max_tokens` (ascend_config.py), DispatchFFNCombine's cap;
# v0.18.0 passes a constant instead.
MAX_OUTPUT_SIZE = 131072
V0_18_MAX_OUTPUT_SIZE = 65536


def routed_experts(tokens: int, top_k: int, experts: int, backend,
                   generator: torch.Generator) -> torch.Tensor:
    """(tokens, top_k) distinct expert ids per token in [0, experts), int64."""
    if top_k > experts:
        raise ValueError(f"top-{top_k} routing over {experts} experts")
    scores = torch.rand((tokens, experts), device=backend.device, generator=generator)
    return scores.topk(top_k, dim=-1).indices


def routing_weights(tokens: int, top_k: int, backend, generator: torch.Generator
                    ) -> torch.Tensor:
    """(tokens, top_k) positive weights summing to one per token (float32)."""
    logits = torch.randn((tokens, top_k), device=backend.device, generator=generator)
    return logits.softmax(dim=-1)


def segments(sizes: list[int]) -> list[tuple[int, int, int]]:
    """(group, first row, end row) of each non-empty group."""
    out, start = [], 0
    for group, size in enumerate(sizes):
        if size:
            out.append((group, start, start + size))
        start += size
    return out


def active_expert_bytes(case: KernelCase, total: float, experts: int,
                        sizes: list[int]) -> float:
    """`total` less the per-expert slots (weights, their scales, biases: leading dim
    `experts`) of the experts that got no tokens: a grouped GEMM reads only the experts its
    group list names (on an H200, 16 of 30 grid rows were flagged faster than a bound that
    counted every expert)."""
    idle = sum(1 for size in sizes if size <= 0)
    if not idle or experts <= 0:
        return total
    per_expert = sum(slot.nbytes for slot in case.inputs
                     if slot.present and slot.dims[:1] == (experts,) and len(slot.dims) > 1)
    return total - per_expert * idle / experts


def scale_values(tensor: torch.Tensor) -> torch.Tensor:
    """Float32 scales back from a scale tensor in either form."""
    return int64_bits_as_float(tensor) if tensor.dtype == torch.int64 else tensor.float()


# -- GroupedMatmul ----------------------------------------------------------------------------
(X, WEIGHT, BIAS, SCALE, OFFSET, ANTIQUANT_SCALE, ANTIQUANT_OFFSET, GROUP_LIST,
 PER_TOKEN_SCALE) = range(9)
PLAIN, W8A8, ANTIQUANT = "plain", "w8a8", "antiquant"


@dataclass(frozen=True)
class GroupedLayout:
    m: int
    k: int
    n: int
    experts: int
    weight_transposed: bool  # stored (E, N, K)
    mode: str


def grouped_layout(case: KernelCase) -> GroupedLayout:
    x, w = nd_shape(case.input(X)), nd_shape(case.input(WEIGHT))
    if len(x) != 2 or len(w) != 3:
        raise case.error(f"GroupedMatmul: x {x} must be (M, K) and weight {w} (E, K, N)")
    (m, k), out = x, case.output(0).shape
    if w[1] == k and (out is None or tuple(out) == (m, w[2])):
        layout = (w[2], False)
    elif w[2] == k and (out is None or tuple(out) == (m, w[1])):
        layout = (w[1], True)
    else:
        raise case.error(f"GroupedMatmul: x {x} and weight {w} do not give {out}")
    if case.input(GROUP_LIST).dims != (w[0],):
        raise case.error(f"GroupedMatmul: group_list {case.input(GROUP_LIST).dims} must hold "
                         f"one entry per expert ({w[0]})")
    if case.input(OFFSET).present:
        raise case.error("GroupedMatmul: rows with a quantisation offset are not replayed")
    x_int8 = case.input(X).dtype.endswith("INT8")
    w_int8 = case.input(WEIGHT).dtype.endswith("INT8")
    if x_int8 and w_int8 and case.input(SCALE).present:
        mode = W8A8
    elif not x_int8 and w_int8 and case.input(ANTIQUANT_SCALE).present:
        mode = ANTIQUANT
    elif not x_int8 and not w_int8:
        mode = PLAIN
    else:
        raise case.error("GroupedMatmul: an int8 operand needs its scales (scale for int8 x "
                         "and weight, antiquant_scale for an int8 weight)")
    return GroupedLayout(m, k, layout[0], w[0], layout[1], mode)


class GroupedMatmul(KernelSpec):
    """Row groups of x (one per expert, sizes in group_list) times their expert's weight."""

    kernel_type = "GroupedMatmul"
    portable = ("torch._grouped_mm on CUDA, else a loop of torch.mm (int8 weights: float32 GEMMs, "
                "dequantised)")
    work = "2*M*K*N flops; bytes of every slot of the row, of the experts that got tokens"
    bytes_exact = True

    def bytes_touched(self, case, tensors) -> float:
        sizes = [int(s) for s in tensors["group_list"].tolist()]
        return active_expert_bytes(case, self.bytes_moved(case), len(sizes), sizes)

    def check(self, case: KernelCase) -> None:
        super().check(case)
        grouped_layout(case)

    def build_inputs(self, case, backend, generator):
        layout = grouped_layout(case)
        level = 1.0 / (INT8_MAX * math.sqrt(layout.k))
        weight = case.input(WEIGHT)
        if self._nz_transposed(case, layout):
            weight = shaped_input(weight, (layout.experts, layout.k, layout.n), case, backend,
                                  generator, low=-128, high=128)
        else:
            weight = self.tensor(case, WEIGHT, backend, generator, low=-128, high=128)
        tensors = {"x": self.tensor(case, X, backend, generator, low=-128, high=128),
                   "weight": weight,
                   "group_list": group_sizes(layout.m, layout.experts, backend, generator).to(
                       torch_dtype(case.input(GROUP_LIST).dtype, case))}
        if case.input(BIAS).present:
            tensors["bias"] = self.tensor(case, BIAS, backend, generator)
        if layout.mode == W8A8:
            values = positive_scales(case.input(SCALE).dims, backend, generator,
                                     low=0.5 * level, high=1.5 * level)
            if case.input(SCALE).dtype.endswith("INT64"):  # a quant parameter (quant.py)
                tensors["scale"] = quant_param(quant_param_scale(values), backend)
            else:
                tensors["scale"] = values.to(torch_dtype(case.input(SCALE).dtype, case))
            if case.input(PER_TOKEN_SCALE).present:
                tensors["per_token_scale"] = positive_scales(
                    case.input(PER_TOKEN_SCALE).dims, backend, generator, low=0.5 / INT8_MAX,
                    high=1.5 / INT8_MAX)
        elif layout.mode == ANTIQUANT:
            dtype = torch_dtype(case.input(ANTIQUANT_SCALE).dtype, case)
            tensors["antiquant_scale"] = positive_scales(
                case.input(ANTIQUANT_SCALE).dims, backend, generator, low=0.5 * level,
                high=1.5 * level).to(dtype)
            if case.input(ANTIQUANT_OFFSET).present:
                tensors["antiquant_offset"] = random_tensor(
                    case.input(ANTIQUANT_OFFSET).dims, torch.float32, backend.device,
                    generator).round_().to(dtype)
        return tensors

    @staticmethod
    def _nz_transposed(case: KernelCase, layout: GroupedLayout) -> bool:
        """An NZ weight stored (E, N, K): built (E, K, N) instead (tensors.shaped_input)."""
        return layout.weight_transposed and case.input(WEIGHT).format == "FRACTAL_NZ"

    def _weight(self, tensors, case: KernelCase, layout: GroupedLayout) -> torch.Tensor:
        """The weight as (E, K, N): a view of an ND one stored (E, N, K)."""
        w = tensors["weight"]
        return w.transpose(1, 2) if layout.weight_transposed and not self._nz_transposed(
            case, layout) else w

    def portable_call(self, tensors, case) -> Callable[[], object]:
        layout = grouped_layout(case)
        x, w = tensors["x"], self._weight(tensors, case, layout)
        sizes = [int(s) for s in tensors["group_list"].tolist()]
        bias = tensors.get("bias")
        out_dtype = torch_dtype(case.output(0).dtype, case)
        if layout.mode == W8A8:
            return self._w8a8_call(tensors, x, w, sizes, out_dtype, layout)
        if layout.mode == ANTIQUANT:
            return self._antiquant_call(tensors, x, w, sizes, out_dtype, layout)
        native = grouped_mm(x, w, sizes, bias)
        if native is not None:
            return native
        groups = segments(sizes)

        def loop_of_mm():
            y = torch.zeros((layout.m, layout.n), dtype=x.dtype, device=x.device)
            for g, start, end in groups:
                if bias is not None:
                    torch.addmm(bias[g], x[start:end], w[g], out=y[start:end])
                else:
                    torch.mm(x[start:end], w[g], out=y[start:end])
            return y
        return implemented("loop of torch.mm", loop_of_mm)

    @staticmethod
    def _w8a8_call(tensors, x, w, sizes, out_dtype, layout) -> Callable[[], object]:
        wf = w.float()  # converted once, outside the measured call
        scale = scale_values(tensors["scale"]).view(layout.experts, layout.n)
        pertoken, bias = tensors.get("per_token_scale"), tensors.get("bias")
        if pertoken is not None:
            pertoken = pertoken.view(-1)
        groups = segments(sizes)

        def w8a8():
            y = torch.zeros((x.shape[0], wf.shape[2]), dtype=out_dtype, device=x.device)
            for g, start, end in groups:
                acc = (x[start:end].float() @ wf[g]) * scale[g]
                if pertoken is not None:
                    acc = acc * pertoken[start:end].unsqueeze(-1)
                if bias is not None:
                    acc = acc + bias[g].float()
                y[start:end] = acc.to(out_dtype)
            return y
        return implemented(f"loop of {FLOAT_EMULATION}", w8a8)

    @staticmethod
    def _antiquant_call(tensors, x, w, sizes, out_dtype, layout) -> Callable[[], object]:
        per_expert = (layout.experts, layout.n)
        scale = tensors["antiquant_scale"].view(per_expert)
        offset = tensors.get("antiquant_offset")
        offset = offset.view(per_expert) if offset is not None else None
        bias = tensors.get("bias")
        groups = segments(sizes)

        def antiquant():
            y = torch.zeros((x.shape[0], w.shape[2]), dtype=out_dtype, device=x.device)
            for g, start, end in groups:
                weight = w[g].to(x.dtype)
                if offset is not None:
                    weight = weight + offset[g]
                weight = weight * scale[g]
                part = x[start:end] @ weight
                y[start:end] = part + bias[g] if bias is not None else part
            return y
        return implemented("loop of torch.mm on dequantised weights", antiquant)

    def npu_call(self, tensors, case, backend) -> Callable[[], object]:
        layout = grouped_layout(case)
        x, w = tensors["x"], self._weight(tensors, case, layout)

        def listed(name):
            return [tensors[name]] if name in tensors else None

        kwargs = {name: listed(name) for name in ("bias", "scale", "antiquant_scale",
                                                  "antiquant_offset", "per_token_scale")}
        kwargs.update(group_list=tensors["group_list"], split_item=2, group_type=0,
                      group_list_type=1)
        if layout.mode == W8A8:
            kwargs["output_dtype"] = torch_dtype(case.output(0).dtype, case)
        # Tensor[] back: one y with split_item=2 (results() takes it out of the list).
        return torch_npu_call(backend, "npu_grouped_matmul", ([x], [w]), kwargs, returns=1)

    def flops(self, case: KernelCase) -> float:
        layout = grouped_layout(case)
        return 2.0 * layout.m * layout.k * layout.n


def grouped_mm(x: torch.Tensor, w: torch.Tensor, sizes: list[int],
               bias: torch.Tensor | None) -> Callable[[], object] | None:
    """`torch._grouped_mm` on CUDA when it takes these operands, else None."""
    if x.device.type != "cuda" or not hasattr(torch, "_grouped_mm"):
        return None
    offsets = torch.tensor(sizes, device=x.device).cumsum(0).to(torch.int32)
    try:
        torch._grouped_mm(x, w, offs=offsets)
    except (RuntimeError, TypeError):
        return None
    if bias is None:
        return implemented("torch._grouped_mm", lambda: torch._grouped_mm(x, w, offs=offsets))
    per_row = torch.repeat_interleave(torch.arange(len(sizes), device=x.device),
                                      torch.tensor(sizes, device=x.device))
    return implemented("torch._grouped_mm",
                       lambda: torch._grouped_mm(x, w, offs=offsets) + bias[per_row])


# -- GroupedMatmulSwigluQuant -----------------------------------------------------------------
SQ_X, SQ_WEIGHT, SQ_WEIGHT_SCALE, SQ_X_SCALE, SQ_ASSIST, SQ_GROUP_LIST = range(6)


def swiglu_quant_layout(case: KernelCase) -> tuple[int, int, int, int]:
    """(M, K, N, experts) of a GroupedMatmulSwigluQuant row."""
    x, w = nd_shape(case.input(SQ_X)), nd_shape(case.input(SQ_WEIGHT))
    if len(x) != 2 or len(w) != 3 or w[1] != x[1] or w[2] % 2:
        raise case.error(f"GroupedMatmulSwigluQuant: x {x} must be (M, K) and weight {w} "
                         f"(E, K, N) with N even")
    m, k = x
    experts, n = w[0], w[2]
    expected = {SQ_WEIGHT_SCALE: (experts, n), SQ_X_SCALE: (m,), SQ_GROUP_LIST: (experts,)}
    for slot, dims in expected.items():
        if case.input(slot).dims != dims:
            raise case.error(f"GroupedMatmulSwigluQuant: {case.input(slot).dims} where "
                             f"{dims} was expected (slot {slot})")
    if case.input(SQ_ASSIST).present:
        raise case.error("GroupedMatmulSwigluQuant: rows with a weight assistance matrix "
                         "(A8W4 weights) are not replayed")
    if case.output(0).shape is not None and tuple(case.output(0).shape) != (m, n // 2):
        raise case.error(f"GroupedMatmulSwigluQuant: output {case.output(0).shape} is not "
                         f"{(m, n // 2)}")
    return m, k, n, experts


class GroupedMatmulSwigluQuant(KernelSpec):
    kernel_type = "GroupedMatmulSwigluQuant"
    portable = "torch: loop of float32 GEMMs (int8 emulated), swiglu, per-token int8"
    work = "2*M*K*N + 8*M*N flops; bytes of every slot of the row, of the experts that got tokens"

    def bytes_touched(self, case, tensors) -> float:
        ends = [int(e) for e in tensors["group_list"].tolist()]  # cumulative
        sizes = [b - a for a, b in zip([0, *ends[:-1]], ends)]
        return active_expert_bytes(case, self.bytes_moved(case), len(sizes), sizes)

    def check(self, case: KernelCase) -> None:
        super().check(case)
        swiglu_quant_layout(case)

    def build_inputs(self, case, backend, generator):
        m, k, n, experts = swiglu_quant_layout(case)
        level = 1.0 / (INT8_MAX * math.sqrt(k))
        return {
            "x": self.tensor(case, SQ_X, backend, generator, low=-128, high=128),
            "weight": self.tensor(case, SQ_WEIGHT, backend, generator, low=-128, high=128),
            "weight_scale": positive_scales((experts, n), backend, generator, low=0.5 * level,
                                            high=1.5 * level).to(
                torch_dtype(case.input(SQ_WEIGHT_SCALE).dtype, case)),
            "x_scale": positive_scales((m,), backend, generator, low=0.5 / INT8_MAX,
                                       high=1.5 / INT8_MAX),
            "group_list": group_sizes(m, experts, backend, generator).cumsum(0).to(
                torch_dtype(case.input(SQ_GROUP_LIST).dtype, case)),
        }

    def portable_call(self, tensors, case) -> Callable[[], object]:
        m, _, n, _ = swiglu_quant_layout(case)
        x, wf = tensors["x"], tensors["weight"].float()  # converted once
        weight_scale, x_scale = tensors["weight_scale"].float(), tensors["x_scale"]
        ends = [int(e) for e in tensors["group_list"].tolist()]
        groups = segments([b - a for a, b in zip([0, *ends[:-1]], ends)])

        def gmm_swiglu_quant():
            h = torch.zeros((m, n), dtype=torch.float32, device=x.device)
            for g, start, end in groups:
                h[start:end] = ((x[start:end].float() @ wf[g]) * weight_scale[g]
                                * x_scale[start:end].unsqueeze(-1))
            gate, up = h.chunk(2, dim=-1)
            return quantize_per_token(torch.nn.functional.silu(gate) * up)
        return implemented(f"loop of {FLOAT_EMULATION}, swiglu, per-token int8",
                           gmm_swiglu_quant)

    def npu_call(self, tensors, case, backend) -> Callable[[], object]:
        t = tensors
        return torch_npu_call(backend, "npu_grouped_matmul_swiglu_quant",
                              (t["x"], t["weight"], t["group_list"], t["weight_scale"],
                               t["x_scale"]), returns=3)

    def results(self, returned, tensors, case):
        # (y, y_scale, y_offset): the operator always returns an empty output_offset third
        # (op_plugin_functions.yaml `-> (Tensor, Tensor, Tensor)`); the portable path two.
        return api_results(returned, (True, True, False))

    def flops(self, case: KernelCase) -> float:
        m, k, n, _ = swiglu_quant_layout(case)
        return 2.0 * m * k * n + 8.0 * m * n


# -- MoeTokenPermute / MoeTokenUnpermute ------------------------------------------------------
def _top_k(case: KernelCase, indices_dims: tuple[int, ...]) -> int:
    if len(indices_dims) not in (1, 2):
        raise case.error(f"{case.kernel_type}: indices {indices_dims} must be (T,) or (T, K)")
    return indices_dims[1] if len(indices_dims) == 2 else 1


class MoeTokenPermute(KernelSpec):
    """Tokens copied into expert order: a stable sort of the flattened (token, k) expert ids."""

    kernel_type = "MoeTokenPermute"
    portable = "torch: stable argsort of the expert ids, index_select"
    work = "0 flops; bytes of every slot of the row"

    def check(self, case: KernelCase) -> None:
        super().check(case)
        tokens, indices = case.input(0).dims, case.input(1).dims
        top_k = _top_k(case, indices)
        if len(tokens) != 2 or indices[0] != tokens[0]:
            raise case.error(f"MoeTokenPermute: tokens {tokens} and indices {indices} differ "
                             f"in token count")
        out = case.output(0).shape
        if out is not None and out[0] != tokens[0] * top_k:
            raise case.error("MoeTokenPermute: rows that drop tokens (num_out_tokens) are not "
                             "replayed")

    def build_inputs(self, case, backend, generator):
        tokens, indices = case.input(0).dims, case.input(1).dims
        top_k = _top_k(case, indices)
        experts = routed_experts(tokens[0], top_k, max(DEFAULT_EXPERTS, top_k), backend,
                                 generator)
        return {"tokens": self.tensor(case, 0, backend, generator),
                "indices": experts.view(indices).to(torch_dtype(case.input(1).dtype, case))}

    def portable_call(self, tensors, case) -> Callable[[], object]:
        tokens, indices = tensors["tokens"], tensors["indices"]
        top_k = _top_k(case, case.input(1).dims)
        index_dtype = torch_dtype(case.output(1).dtype, case) if case.output(1).present \
            else torch.int32

        def permute():
            order = torch.argsort(indices.view(-1), stable=True)
            permuted = tokens.index_select(0, order // top_k)
            destination = torch.empty_like(order)
            destination[order] = torch.arange(order.numel(), device=order.device)
            return permuted, destination.to(index_dtype)
        return permute

    def npu_call(self, tensors, case, backend) -> Callable[[], object]:
        return torch_npu_call(backend, "npu_moe_token_permute",
                              (tensors["tokens"], tensors["indices"]), returns=2)


class MoeTokenUnpermute(KernelSpec):
    """Each token's K expert outputs gathered back and summed, weighted by its probs."""

    kernel_type = "MoeTokenUnpermute"
    portable = "torch: index_select, sum over top-k weighted by probs"
    work = "2*T*K*H flops with probs, else 0; bytes of every slot of the row"

    def check(self, case: KernelCase) -> None:
        super().check(case)
        permuted, order, probs = (case.input(i) for i in range(3))
        if len(permuted.dims) != 2 or order.dims != permuted.dims[:1]:
            raise case.error(f"MoeTokenUnpermute: permuted tokens {permuted.dims} need one "
                             f"sorted index each, got {order.dims}")
        if probs.present and (len(probs.dims) != 2 or probs.numel != permuted.dims[0]):
            raise case.error(f"MoeTokenUnpermute: probs {probs.dims} must be (T, K) with "
                             f"T * K = {permuted.dims[0]}")

    def build_inputs(self, case, backend, generator):
        rows = case.input(0).dims[0]
        tensors = {"permuted_tokens": self.tensor(case, 0, backend, generator),
                   "sorted_indices": torch.randperm(rows, device=backend.device,
                                                    generator=generator).to(
                       torch_dtype(case.input(1).dtype, case))}
        probs = case.input(2)
        if probs.present:
            tensors["probs"] = routing_weights(*probs.dims, backend, generator).to(
                torch_dtype(probs.dtype, case))
        return tensors

    def portable_call(self, tensors, case) -> Callable[[], object]:
        permuted, order = tensors["permuted_tokens"], tensors["sorted_indices"]
        probs = tensors.get("probs")
        index = order.to(torch.int64)

        def unpermute():
            gathered = permuted.index_select(0, index)
            if probs is None:
                return gathered
            rows = gathered.view(*probs.shape, -1).float() * probs.float().unsqueeze(-1)
            return rows.sum(dim=1).to(permuted.dtype)
        return unpermute

    def npu_call(self, tensors, case, backend) -> Callable[[], object]:
        return torch_npu_call(backend, "npu_moe_token_unpermute",
                              (tensors["permuted_tokens"], tensors["sorted_indices"]),
                              {"probs": tensors.get("probs")}, returns=1)

    def flops(self, case: KernelCase) -> float:
        return 2.0 * case.input(0).numel if case.input(2).present else 0.0


# -- DispatchFFNCombine -----------------------------------------------------------------------
DX, DW1, DW2, DIDX, DSCALE1, DSCALE2, DPROBS, DMASK = range(8)


@dataclass(frozen=True)
class DispatchLayout:
    tokens: int
    hidden: int
    inter: int  # the intermediate size after swiglu (weight1 gives 2 * inter)
    top_k: int
    local_experts: int
    ep: int
    quantised: bool


def dispatch_layout(case: KernelCase) -> DispatchLayout:
    x, w1, w2 = (nd_shape(case.input(i)) for i in (DX, DW1, DW2))
    idx, probs = case.input(DIDX).dims, case.input(DPROBS).dims
    if len(x) != 2 or len(w1) != 3 or len(w2) != 3:
        raise case.error(f"DispatchFFNCombine: x {x}, weight1 {w1}, weight2 {w2} must be "
                         f"(T, H), (E, H, 2I), (E, I, H)")
    (tokens, hidden), (experts, _, two_inter) = x, w1
    if w1[1] != hidden or two_inter % 2 or w2 != (experts, two_inter // 2, hidden):
        raise case.error(f"DispatchFFNCombine: weights {w1} and {w2} do not chain from "
                         f"hidden size {hidden}")
    if len(idx) != 2 or idx[0] != tokens or probs != idx:
        raise case.error(f"DispatchFFNCombine: expert_idx {idx} and probs {probs} must both "
                         f"be (T, K) with T = {tokens}")
    try:
        ep = int(float(case.ep_size)) if case.ep_size else 1
    except ValueError:
        raise case.error(f"DispatchFFNCombine: EP Size {case.ep_size!r} is not a number",
                         column="EP Size") from None
    if ep < 1 or idx[1] > experts * ep:
        raise case.error(f"DispatchFFNCombine: top-{idx[1]} routing over {experts} x EP {ep} "
                         f"experts", column="EP Size")
    quantised = case.input(DW1).dtype.endswith("INT8")
    if quantised:
        for slot, count in ((DSCALE1, experts * two_inter), (DSCALE2, experts * hidden)):
            if case.input(slot).numel != count:
                raise case.error(f"DispatchFFNCombine: scale slot {slot} has "
                                 f"{case.input(slot).numel} values, {count} expected")
    return DispatchLayout(tokens, hidden, two_inter // 2, idx[1], experts, ep, quantised)


class DispatchFFNCombine(KernelSpec):
    """One EP rank's fused MoE: dispatch its tokens to their top-k experts, run the expert
    FFN (W8A8: per-token int8 activations, int8 GEMM, dequant, swiglu, requant, int8 GEMM,
    dequant) and combine the outputs weighted by the routing probs.

    Off the NPU it runs on one device: the experts of all EP ranks are emulated by this
    rank's weights (expert e uses local expert e mod E), so the device does the work one rank
    does under balanced routing (T * K token-expert pairs) without any communication.
    """

    kernel_type = "DispatchFFNCombine"
    portable = ("torch on one device, the EP ranks' experts emulated by this rank's: loop of GEMMs"
                " (int8: float32, per-token requantised), swiglu, weighted combine")
    work = ("T*K*(2*H*2I + 2*I*H) flops (T*K token-expert pairs, I: intermediate); bytes of every "
            "slot of the row")

    def check(self, case: KernelCase) -> None:
        super().check(case)
        dispatch_layout(case)

    def build_inputs(self, case, backend, generator):
        layout = dispatch_layout(case)
        experts = layout.local_experts * layout.ep
        tensors = {
            "x": self.tensor(case, DX, backend, generator),
            "weight1": self.tensor(case, DW1, backend, generator, low=-128, high=128),
            "weight2": self.tensor(case, DW2, backend, generator, low=-128, high=128),
            "expert_idx": routed_experts(layout.tokens, layout.top_k, experts, backend,
                                         generator).to(torch_dtype(case.input(DIDX).dtype,
                                                                   case)),
            "probs": routing_weights(layout.tokens, layout.top_k, backend, generator).to(
                torch_dtype(case.input(DPROBS).dtype, case)),
        }
        if layout.quantised:
            for slot, name, k in ((DSCALE1, "scale1", layout.hidden),
                                  (DSCALE2, "scale2", layout.inter)):
                level = 1.0 / (INT8_MAX * math.sqrt(k))
                values = positive_scales(case.input(slot).dims, backend, generator,
                                         low=0.5 * level, high=1.5 * level)
                # float32 bits in INT64, as vllm-ascend's scale_from_float_to_int64 writes
                # them for this operator (v0.18.0 quantization/methods/w8a8_dynamic.py:39-46,
                # 292-293): not a matmul quant parameter (quant.quant_param).
                tensors[name] = (float_bits_as_int64(values)
                                 if case.input(slot).dtype.endswith("INT64")
                                 else values.to(torch_dtype(case.input(slot).dtype, case)))
        if case.input(DMASK).present:
            tensors["x_active_mask"] = torch.ones(case.input(DMASK).dims, dtype=torch.bool,
                                                  device=backend.device)
        return tensors

    def portable_call(self, tensors, case) -> Callable[[], object]:
        layout = dispatch_layout(case)
        x, probs = tensors["x"], tensors["probs"].float()
        local = (tensors["expert_idx"].to(torch.int64) % layout.local_experts).view(-1)
        order = torch.argsort(local, stable=True)
        source_token = order // layout.top_k
        pair_probs = probs.view(-1)[order].unsqueeze(-1)
        counts = torch.bincount(local, minlength=layout.local_experts)
        groups = segments([int(c) for c in counts.tolist()])
        w1, w2 = tensors["weight1"], tensors["weight2"]
        if layout.quantised:
            w1, w2 = w1.float(), w2.float()  # int8 weights converted once, outside the call
        count_dtype = (torch_dtype(case.output(1).dtype, case) if case.output(1).present
                       else torch.int32)
        if layout.quantised:
            s1 = scale_values(tensors["scale1"]).view(layout.local_experts, -1)
            s2 = scale_values(tensors["scale2"]).view(layout.local_experts, -1)

        def expert_gemm(a, a_scale, w, w_scale, cols):
            out = torch.empty((a.shape[0], cols), dtype=torch.float32, device=a.device)
            for g, start, end in groups:
                if layout.quantised:
                    out[start:end] = ((a[start:end].float() @ w[g]) * w_scale[g]
                                      * a_scale[start:end].unsqueeze(-1))
                else:
                    out[start:end] = a[start:end] @ w[g]
            return out

        def dispatch_ffn_combine():
            if layout.quantised:
                xq, x_scale = quantize_per_token(x)
                a, a_scale = xq.index_select(0, source_token), x_scale.index_select(
                    0, source_token)
            else:
                a, a_scale = x.index_select(0, source_token), None
            h = expert_gemm(a, a_scale, w1, s1 if layout.quantised else None,
                            2 * layout.inter)
            gate, up = h.chunk(2, dim=-1)
            act = torch.nn.functional.silu(gate) * up
            if layout.quantised:
                act, act_scale = quantize_per_token(act)
            else:
                act, act_scale = act.to(x.dtype), None
            y = expert_gemm(act, act_scale, w2, s2 if layout.quantised else None,
                            layout.hidden)
            out = torch.zeros((layout.tokens, layout.hidden), dtype=torch.float32,
                              device=x.device)
            out.index_add_(0, source_token, y * pair_probs)
            return out.to(x.dtype), counts.to(count_dtype)
        gemm = FLOAT_EMULATION if layout.quantised else "torch.mm"
        return implemented(f"single device, EP {layout.ep} emulated: loop of {gemm}",
                           dispatch_ffn_combine)

    def npu_call(self, tensors, case, backend) -> Callable[[], object]:
        layout = dispatch_layout(case)
        group = backend.process_group_name(layout.ep)
        if group is None:
            raise ReplaySkipped(
                f"DispatchFFNCombine is a multi-rank kernel: EP Size {layout.ep} needs an "
                f"initialised torch.distributed (HCCL) group of {layout.ep} ranks")
        t = tensors
        experts = layout.local_experts
        if layout.quantised:
            scales = {name: [float_bits_as_int64(scale_values(t[name])).view(experts, -1)]
                      for name in ("scale1", "scale2")}
        else:
            # Unquantised, vllm-ascend passes one empty INT64 host tensor per scale list (the
            # schema requires the lists: v0.18.0 ops/fused_moe/fused_moe.py:173-177, v0.25.1rc1
            # :264-265), not an empty list.
            scales = {name: [torch.tensor([], dtype=torch.int64)] for name in ("scale1", "scale2")}
        out = torch.empty_like(t["x"])
        counts = torch.zeros(experts, dtype=torch.int32, device=t["x"].device)
        common = dict(x=t["x"], weight1=[t["weight1"]], weight2=[t["weight2"]],
                      expert_idx=t["expert_idx"], **scales, probs=t["probs"], group=group,
                      out=out, expert_token_nums=counts)
        # vllm-ascend >= v0.20.2rc1 (csrc/torch_binding.cpp; v0.25.1rc1 calls it so in
        # ops/fused_moe/moe_comm_method.py:463-478): bias lists (one empty float32 host tensor
        # each outside A8W4, quantization/methods/w8a8_dynamic.py:325-326), the routing mask,
        # swiglu_limit left at its 1e6 default (no clamp, as the portable path), and
        # max_output_size = mega_moe_max_tokens (default 131072, ascend_config.py:263).
        newer = Variant("vllm-ascend >= v0.20.2rc1 schema", kwargs=dict(
            common, bias1=[torch.tensor([], dtype=torch.float32)],
            bias2=[torch.tensor([], dtype=torch.float32)], x_active_mask=t.get("x_active_mask"),
            max_output_size=MAX_OUTPUT_SIZE), returns=2)
        # v0.18.0 (torch_binding.cpp:809-812) takes neither bias, mask nor limit, and its
        # caller passes max_output_size=65536 (ops/fused_moe/moe_comm_method.py:283-295). A
        # row's x_active_mask is all ones (every token active): the same work without it.
        v0_18 = Variant("vllm-ascend v0.18.0 schema", kwargs=dict(
            common, max_output_size=V0_18_MAX_OUTPUT_SIZE), returns=2)
        op = operator(backend, "_C_ascend", "dispatch_ffn_combine")
        return bound_call(op, "torch.ops._C_ascend.dispatch_ffn_combine", newer, v0_18)

    def flops(self, case: KernelCase) -> float:
        layout = dispatch_layout(case)
        pairs = layout.tokens * layout.top_k
        return pairs * (2.0 * layout.hidden * 2 * layout.inter + 2.0 * layout.inter
                        * layout.hidden)
