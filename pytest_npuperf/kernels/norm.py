"""Normalisation kernels: AddRmsNormBias (residual add + RMS norm + bias, vllm-ascend)."""

from __future__ import annotations

from collections.abc import Callable

from .binding import Variant, bound_call
from .case import KernelCase
from .custom_ops import operator
from .functional import rms_normalize
from .spec import KernelSpec

# The epsilon vLLM's RMSNorm layers pass for DeepSeek-V3 and Qwen3 (their rms_norm_eps), and
# the operator's own default.
RMS_NORM_EPS = 1e-6


def check_trailing(case: KernelCase, name: str, index: int, against: tuple[int, ...]) -> None:
    """Slot `index` (a per-channel weight) must equal the last dims of `against`."""
    dims = case.input(index).dims
    if not against or not dims or tuple(against[len(against) - len(dims):]) != tuple(dims):
        raise case.error(f"{case.kernel_type}: {name} {dims} does not match the last dims of "
                         f"{against}")


class AddRmsNormBias(KernelSpec):
    """x = x1 + x2; y = x * rstd * gamma + beta, with rstd = 1/sqrt(mean(x^2) + eps).

    NPU: `torch.ops._C_ascend.npu_add_rms_norm_bias(Tensor x1, Tensor x2, Tensor gamma,
    Tensor? beta=None, float epsilon=1e-6) -> (Tensor y, Tensor rstd, Tensor x)`, defined in
    vllm-ascend's csrc/torch_binding.cpp (kernel: csrc/moe/add_rms_norm_bias/); rstd keeps
    x's leading dims and is 1 on the normalised ones. An empty beta slot is a call without it.
    """

    streamed = ("gamma", "beta")  # the catalog's gamma and bias, by this spec's names

    kernel_type = "AddRmsNormBias"
    bytes_exact = True  # every slot read or written once: what the kernel must move
    portable = "torch: add, float32 RMS norm, gamma and bias"
    work = "6*T*D flops (x: T*D); (4*T*D + 2*D)*bytes + 4*T"

    def check(self, case: KernelCase) -> None:
        super().check(case)
        x1 = case.input(0).dims
        if case.input(1).dims != x1:
            raise case.error(f"AddRmsNormBias: x2 {case.input(1).dims} differs from x1 {x1}")
        check_trailing(case, "gamma", 2, x1)
        if case.input(3).present:
            check_trailing(case, "beta", 3, x1)
        if len(case.input(2).dims) != 1:
            raise case.error("AddRmsNormBias: only a 1-D gamma (the last dim) is replayed")

    def build_inputs(self, case, backend, generator):
        tensors = {name: self.tensor(case, i, backend, generator)
                   for i, name in enumerate(("x1", "x2", "gamma"))}
        if case.input(3).present:
            tensors["beta"] = self.tensor(case, 3, backend, generator)
        return tensors

    def portable_call(self, tensors, case) -> Callable[[], object]:
        x1, x2, gamma, beta = tensors["x1"], tensors["x2"], tensors["gamma"], tensors.get("beta")

        def add_rms_norm_bias():
            x = x1 + x2  # rounded to the input dtype, as the kernel's x output is
            normed, rstd = rms_normalize(x, RMS_NORM_EPS)
            y = normed * gamma.to(normed.dtype)
            if beta is not None:
                y = y + beta.to(normed.dtype)
            return y.to(x1.dtype), rstd, x  # rstd stays float32 (float64 for the reference)
        return add_rms_norm_bias

    def npu_call(self, tensors, case, backend) -> Callable[[], object]:
        op = operator(backend, "_C_ascend", "npu_add_rms_norm_bias")
        args = (tensors["x1"], tensors["x2"], tensors["gamma"], tensors.get("beta"), RMS_NORM_EPS)
        return bound_call(op, "torch.ops._C_ascend.npu_add_rms_norm_bias",
                          Variant("", args, returns=3))

    def flops(self, case: KernelCase) -> float:
        return 6.0 * case.input(0).numel

