"""Quantisation kernels: AscendQuantV2 (static int8), DynamicQuant (per-token int8) and
QuantBatchMatmulV3 (int8 x int8 GEMM with dequantisation), plus the int8 helpers the MoE
kernels share.

NPU APIs (op-plugin op_plugin/config/op_plugin_functions.yaml, called as vllm-ascend does):
- `npu_quantize(self, scales, zero_points, dtype, axis=1, div_mode=True)`; vllm-ascend
  (ops/register_custom_ops.py) calls it with `(x, scale, offset, torch.qint8, -1, False)`,
  the multiplying mode that runs aclnnAscendQuant(V3), i.e. the AscendQuantV2 kernel.
- `npu_dynamic_quant(input, *, smooth_scales=None, group_index=None, ...) -> (y, scale)`.
- `npu_quant_matmul(x1, x2, scale, *, offset=None, pertoken_scale=None, bias=None,
  output_dtype=None, ...)`.

Off the NPU: rounding is half to even (torch.round; the NPU's "round" mode is assumed to be
the same), int8 GEMMs run as `torch._int_mm` on CUDA where it accepts the shapes and as a
float32 GEMM elsewhere (exact up to float32 accumulation), with the dequantisation after.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from ..db.signature import GemmLayout, gemm_layout
from .binding import torch_npu_call
from .case import KernelCase
from .spec import KernelSpec, implemented
from .tensors import nd_shape, random_tensor, shaped_input, torch_dtype

INT8_MIN, INT8_MAX = -128, 127
# The smallest per-token scale: an all-zero row quantises to zeros instead of NaN.
MIN_SCALE = 1e-12
FLOAT_EMULATION = "float32 GEMM (int8 emulated)"


def saturate_int8(values: torch.Tensor) -> torch.Tensor:
    """Round half to even and saturate to int8."""
    return torch.round(values).clamp_(INT8_MIN, INT8_MAX).to(torch.int8)


def quantize_per_token(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Symmetric dynamic quantisation of the last dim: (int8 values, float32 scales)."""
    xf = x.float()
    scale = xf.abs().amax(dim=-1).clamp_min_(MIN_SCALE).div_(INT8_MAX)
    return saturate_int8(xf / scale.unsqueeze(-1)), scale


def float_bits_as_int64(scale: torch.Tensor) -> torch.Tensor:
    """A float32 scale in the INT64 form some kernels take (its bit pattern, as vllm-ascend's
    `scale_from_float_to_int64` writes it)."""
    return scale.float().contiguous().view(torch.int32).to(torch.int64)


def int64_bits_as_float(packed: torch.Tensor) -> torch.Tensor:
    return (packed & 0xFFFFFFFF).to(torch.int32).view(torch.float32)


# What `torch_npu.npu_trans_quant_param` keeps of a float32 scale: its high 19 bits (op-plugin
# docs/context/torch_npu-npu_trans_quant_param.md: out = (scale & 0xFFFFE000) | (1 << 46)).
QUANT_PARAM_MASK = 0xFFFFE000  # ~0x1FFF
QUANT_PARAM_FLAG = 1 << 46


def quant_param_scale(values: torch.Tensor) -> torch.Tensor:
    """Float32 scales as the kernel reads them from an INT64 quant parameter (truncated to
    19 bits): what the portable path multiplies by, so that both paths use the same scale."""
    bits = values.float().contiguous().view(torch.int32)
    return (bits & ~0x1FFF).view(torch.float32)  # QUANT_PARAM_MASK as an int32


def quant_param(values: torch.Tensor, backend, offset: torch.Tensor | None = None
                ) -> torch.Tensor:
    """An INT64 scale of a matmul-class kernel, as op-plugin documents it must be made:
    `torch_npu.npu_trans_quant_param(scale[, offset])` (torch_npu-npu_quant_matmul.md:47; the
    raw float bits lack its bit-46 flag and truncation). Off the NPU the documented formula
    (without offset), for the rows' INT64 slots; the portable paths read the float scales."""
    if backend.kind == "npu":
        args = (values.float().contiguous(),) + ((offset.float(),) if offset is not None else ())
        return torch_npu_call(backend, "npu_trans_quant_param", args, returns=1)()
    bits = quant_param_scale(values).view(torch.int32).to(torch.int64) & 0xFFFFFFFF
    return bits | QUANT_PARAM_FLAG


def positive_scales(shape: tuple[int, ...], backend, generator: torch.Generator, *,
                    low: float, high: float) -> torch.Tensor:
    """Finite positive float32 scales, uniform in [low, high)."""
    base = torch.rand(shape, device=backend.device, generator=generator)
    return base.mul_(high - low).add_(low)


class Int8Gemm:
    """`x (M, K) int8 @ w (K, N) int8` as float32 sums: `torch._int_mm` on CUDA when it accepts
    the operands (it has shape and layout limits), else a float32 GEMM on a weight converted
    once, outside the measured call."""

    def __init__(self, x: torch.Tensor, w: torch.Tensor) -> None:
        self.name, self.weight = FLOAT_EMULATION, w
        if x.device.type == "cuda" and hasattr(torch, "_int_mm"):
            try:
                torch._int_mm(x, w)
            except RuntimeError:
                pass
            else:
                self.name = "torch._int_mm"
                return
        self.weight = w.float()

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        if self.name == FLOAT_EMULATION:
            return x.float() @ self.weight
        return torch._int_mm(x, self.weight).float()


# -- AscendQuantV2 ----------------------------------------------------------------------------
class AscendQuantV2(KernelSpec):
    """Static quantisation, y = int8(round(x * scale + offset)) with scale and offset along the
    last dim (`npu_quantize(..., div_mode=False)`)."""

    kernel_type = "AscendQuantV2"
    bytes_exact = True  # every slot read or written once: what the kernel must move
    portable = "torch: x*scale + offset, round half to even, saturate to int8"
    work = "3*numel(x) flops; bytes of every slot of the row"

    def check(self, case: KernelCase) -> None:
        super().check(case)
        x = case.input(0).dims
        for i in (1, 2):
            slot = case.input(i)
            if slot.present and slot.numel not in (1, x[-1] if x else -1):
                raise case.error(f"AscendQuantV2: slot {i} {slot.dims} is neither one value nor "
                                 f"one per element of the last dim of x {x}")

    def build_inputs(self, case, backend, generator):
        x = self.tensor(case, 0, backend, generator)
        scale = case.input(1)
        # |x| is a few units; scales near 127/4 use the int8 range, offsets are small.
        tensors = {"x": x, "scale": positive_scales(scale.dims, backend, generator, low=20.0,
                                                    high=40.0).to(torch_dtype(scale.dtype, case))}
        offset = case.input(2)
        if offset.present:
            tensors["offset"] = random_tensor(offset.dims, torch.float32, backend.device,
                                              generator).round_().mul_(4).to(
                                                  torch_dtype(offset.dtype, case))
        return tensors

    def portable_call(self, tensors, case) -> Callable[[], object]:
        x, scale, offset = tensors["x"], tensors["scale"], tensors.get("offset")

        def ascend_quant():
            scaled = x.float() * scale.float()
            if offset is not None:
                scaled += offset.float()
            return saturate_int8(scaled)
        return ascend_quant

    def npu_call(self, tensors, case, backend) -> Callable[[], object]:
        x, scale, offset = tensors["x"], tensors["scale"], tensors.get("offset")
        return torch_npu_call(backend, "npu_quantize", (x, scale, offset, torch.qint8, -1, False),
                              returns=1)

    def flops(self, case: KernelCase) -> float:
        return 3.0 * case.input(0).numel  # multiply, add, round


# -- DynamicQuant -----------------------------------------------------------------------------
class DynamicQuant(KernelSpec):
    """Per-token symmetric quantisation: scale = max|x| / 127 per row, y = round(x / scale);
    with smooth scales x is multiplied by them first (per group of rows with group_index)."""

    kernel_type = "DynamicQuant"
    bytes_exact = True  # every slot read or written once: what the kernel must move
    portable = "torch: per-row abs-max scale, round half to even, saturate to int8"
    work = "4*numel(x) flops; bytes of every slot of the row"

    def check(self, case: KernelCase) -> None:
        super().check(case)
        x, smooth, groups = case.input(0).dims, case.input(1), case.input(2)
        if not x:
            raise case.error("DynamicQuant: x needs at least one dim")
        if smooth.present and smooth.dims[-1:] != x[-1:]:
            raise case.error(f"DynamicQuant: smooth scales {smooth.dims} do not match the last "
                             f"dim of x {x}")
        if groups.present and (not smooth.present or len(smooth.dims) != 2
                               or groups.dims != smooth.dims[:1]):
            raise case.error("DynamicQuant: group_index needs smooth scales of shape "
                             "(groups, hidden) and one entry per group")

    def build_inputs(self, case, backend, generator):
        tensors = {"x": self.tensor(case, 0, backend, generator)}
        smooth, groups = case.input(1), case.input(2)
        if smooth.present:
            tensors["smooth_scales"] = positive_scales(
                smooth.dims, backend, generator, low=0.5, high=1.5).to(
                    torch_dtype(smooth.dtype, case))
        if groups.present:
            rows = case.input(0).numel // case.input(0).dims[-1]
            tensors["group_index"] = cumulative_group_sizes(
                rows, groups.dims[0], backend, generator).to(torch_dtype(groups.dtype, case))
        return tensors

    def portable_call(self, tensors, case) -> Callable[[], object]:
        x, smooth, groups = tensors["x"], tensors.get("smooth_scales"), tensors.get("group_index")

        def dynamic_quant():
            values = x
            if smooth is not None:
                factor = smooth.float()
                if groups is not None:
                    rows = torch.arange(x.numel() // x.shape[-1], device=x.device)
                    group = torch.searchsorted(groups.to(torch.int64), rows, right=True)
                    factor = factor[group.clamp_(max=factor.shape[0] - 1)].view(x.shape)
                values = x.float() * factor
            return quantize_per_token(values)
        return dynamic_quant

    def npu_call(self, tensors, case, backend) -> Callable[[], object]:
        x = tensors["x"]
        smooth, groups = tensors.get("smooth_scales"), tensors.get("group_index")
        return torch_npu_call(backend, "npu_dynamic_quant", (x,),
                              {"smooth_scales": smooth, "group_index": groups}, returns=2)

    def flops(self, case: KernelCase) -> float:
        return 4.0 * case.input(0).numel  # abs-max, divide, round, (smooth) multiply


def cumulative_group_sizes(rows: int, groups: int, backend, generator: torch.Generator
                           ) -> torch.Tensor:
    """Cumulative row counts of `groups` groups covering all `rows` (int64, last == rows)."""
    sizes = group_sizes(rows, groups, backend, generator)
    return sizes.cumsum(0)


def group_sizes(rows: int, groups: int, backend, generator: torch.Generator) -> torch.Tensor:
    """Row counts of `groups` groups summing to `rows`, as a router would make them: every row
    goes to a random group (int64)."""
    if groups <= 0:
        return torch.zeros(0, dtype=torch.int64, device=backend.device)
    owner = torch.randint(0, groups, (rows,), device=backend.device, generator=generator)
    return torch.bincount(owner, minlength=groups)


# -- QuantBatchMatmulV3 -----------------------------------------------------------------------
X1, X2, SCALE, OFFSET, BIAS, PERTOKEN = range(6)


def quant_gemm_layout(case: KernelCase) -> GemmLayout:
    a, b = case.input(X1), case.input(X2)
    layout = gemm_layout(nd_shape(a), nd_shape(b), case.output(0).shape)
    if layout is None:
        raise case.error(f"QuantBatchMatmulV3: x1 {a.shape} and x2 {b.shape} (as "
                         f"{nd_shape(b)}) do not form a matrix product giving "
                         f"{case.output(0).shape}")
    return layout


class QuantBatchMatmulV3(KernelSpec):
    """y = (x1 @ x2) * scale [* pertoken_scale] (+ bias), in the output dtype; an int8 output
    adds `offset` and saturates. An INT64 scale slot is a quant parameter
    (`npu_trans_quant_param`, which folds the offset in: `quant_param`).

    FRACTAL_NZ weights are replayed eagerly, not through torchair's graph mode as the
    reference replay does (msmodeling QuantBatchMatmulV3_run.py): eager `npu_quant_matmul` on
    an NZ weight is what vllm-ascend itself runs (v0.18.0 quantization/methods/
    w8a8_dynamic.py:87 after maybe_trans_nz at :117-119; w8a8_static.py:133, :151-152), and
    the graph method captures that call in an NPUGraph, as vLLM's aclgraph mode does."""

    kernel_type = "QuantBatchMatmulV3"
    bytes_exact = True  # every slot read or written once: what the kernel must move
    portable = "torch._int_mm on CUDA, else a float32 GEMM (int8 emulated); dequantised"
    work = "2*M*N*K flops; bytes of every slot of the row"

    def check(self, case: KernelCase) -> None:
        super().check(case)
        layout = quant_gemm_layout(case)
        if layout.a_transposed:
            raise case.error("QuantBatchMatmulV3: a transposed x1 is not replayed")
        for i, expected in ((SCALE, layout.n), (OFFSET, layout.n), (BIAS, layout.n),
                            (PERTOKEN, layout.m)):
            slot = case.input(i)
            if slot.present and slot.numel not in (1, expected):
                raise case.error(f"QuantBatchMatmulV3: {self.inputs[i].name} {slot.dims} has "
                                 f"neither 1 nor {expected} values")

    @staticmethod
    def _nz_weight(case: KernelCase) -> bool:
        return case.input(X2).format == "FRACTAL_NZ"

    def build_inputs(self, case, backend, generator):
        layout = quant_gemm_layout(case)
        if self._nz_weight(case):
            # vllm-ascend's W8A8 linears make the weight (K, N) contiguous, cast it to
            # FRACTAL_NZ and pass it as it is (v0.18.0 quantization/methods/w8a8_dynamic.py
            # process_weights_after_loading, npu_quant_matmul at :87): built (K, N).
            weight = shaped_input(case.input(X2), (layout.k, layout.n), case, backend,
                                  generator, low=-128, high=128)
        else:
            weight = self.tensor(case, X2, backend, generator, low=-128, high=128)
        tensors = {"x1": self.tensor(case, X1, backend, generator, low=-128, high=128),
                   "x2": weight}
        scale = case.input(SCALE)
        # Dequantised outputs of order one: the int32 sums are ~ 127^2 sqrt(K).
        level = 1.0 / (INT8_MAX * INT8_MAX * max(layout.k, 1) ** 0.5)
        values = positive_scales(scale.dims, backend, generator, low=0.5 * level,
                                 high=1.5 * level)
        if case.input(OFFSET).present:
            tensors["offset"] = random_tensor(case.input(OFFSET).dims, torch.float32,
                                              backend.device, generator).round_()
        if scale.dtype.endswith("INT64"):
            values = quant_param_scale(values)
            tensors["scale"] = quant_param(values, backend, tensors.get("offset"))
        else:
            tensors["scale"] = values.to(torch_dtype(scale.dtype, case))
        tensors["scale_value"] = values
        if case.input(PERTOKEN).present:
            tensors["pertoken_scale"] = positive_scales(
                case.input(PERTOKEN).dims, backend, generator, low=0.5, high=1.5)
        if case.input(BIAS).present:
            bias = case.input(BIAS)
            dtype = torch_dtype(bias.dtype, case)
            tensors["bias"] = (self.tensor(case, BIAS, backend, generator, low=-1000, high=1000)
                               if not dtype.is_floating_point
                               else self.tensor(case, BIAS, backend, generator))
        return tensors

    def _operands(self, tensors, case):
        layout = quant_gemm_layout(case)
        transposed = layout.b_transposed and not self._nz_weight(case)
        return tensors["x1"], tensors["x2"].t() if transposed else tensors["x2"]

    def portable_call(self, tensors, case) -> Callable[[], object]:
        x1, x2 = self._operands(tensors, case)
        gemm = Int8Gemm(x1, x2)
        scale, pertoken = tensors["scale_value"], tensors.get("pertoken_scale")
        bias, offset = tensors.get("bias"), tensors.get("offset")
        out_dtype = torch_dtype(case.output(0).dtype, case)

        def quant_matmul():
            acc = gemm(x1)
            if bias is not None and not bias.dtype.is_floating_point:
                acc = acc + bias.float()  # an int32 bias joins the int32 sums
            y = acc * scale
            if pertoken is not None:
                y = y * pertoken.unsqueeze(-1)
            if bias is not None and bias.dtype.is_floating_point:
                y = y + bias.float()
            if out_dtype == torch.int8:
                return saturate_int8(y + offset if offset is not None else y)
            return y.to(out_dtype)
        return implemented(gemm.name, quant_matmul)

    def npu_call(self, tensors, case, backend) -> Callable[[], object]:
        x1, x2 = self._operands(tensors, case)
        scale = tensors["scale"]
        kwargs = {"pertoken_scale": tensors.get("pertoken_scale"), "bias": tensors.get("bias"),
                  "output_dtype": torch_dtype(case.output(0).dtype, case)}
        if not case.input(SCALE).dtype.endswith("INT64"):
            # An INT64 scale carries the offset already (quant_param); a float one takes it
            # beside (torch_npu-npu_quant_matmul.md, "Method 2").
            kwargs["offset"] = tensors.get("offset")
        return torch_npu_call(backend, "npu_quant_matmul", (x1, x2, scale), kwargs, returns=1)

    def flops(self, case: KernelCase) -> float:
        layout = quant_gemm_layout(case)
        return 2.0 * layout.m * layout.n * layout.k
