"""--npuperf-verify: does the measured call compute what its kernel should?

For a sample of cases (the first case of each kernel type a process runs, plus every Nth one
with --npuperf-verify-every N), before sampling: the inputs are copied to the host, the
device call runs once, and its outputs are compared with the spec's portable path run on the
CPU in float64 (float inputs widened; integer and bool inputs as they are). The case fails
when an output differs beyond the tolerance of its dtype.

On an NPU this checks the NPU operator against the portable math; on CUDA the portable path
on the GPU against the same math in float64 on the CPU; on a CPU-only run it compares the
portable path in the row's dtypes with itself in float64: still a check for NaNs, overflow
and dtype mistakes, not for the math.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable

import torch

from ..kernels.case import KernelCase
from ..kernels.spec import KernelSpec, Prepared

# Relative tolerance per output dtype; the absolute tolerance is this times the largest
# reference magnitude of the output (low-precision kernels round intermediates, so an
# element near zero carries the error of the larger terms it was computed from).
RTOL = {torch.bfloat16: 2 ** -6, torch.float16: 2 ** -9, torch.float32: 1e-4,
        torch.float64: 1e-10}
DEFAULT_RTOL = 2 ** -6  # fp8 and other narrow floats
REFERENCE = "the float64 CPU reference"


class VerifyError(AssertionError):
    """The device output is not the reference's: the case fails with this message."""


def widen(tensor: torch.Tensor) -> torch.Tensor:
    """A host copy, floats in float64 (complex in complex128)."""
    host = tensor.detach().to("cpu", copy=True)
    if host.is_complex():
        return host.to(torch.complex128)
    return host.double() if host.is_floating_point() else host


def tolerance(dtype: torch.dtype) -> float:
    return RTOL.get(dtype, DEFAULT_RTOL)


# Integer outputs that are quantised floats: a value on a rounding boundary may land one step
# either side depending on the device's float arithmetic before the rounding.
QUANTIZED_STEPS = {torch.int8: 1, torch.uint8: 1}


def compare(index: int, got: torch.Tensor, want: torch.Tensor, *,
            unordered: bool = False) -> tuple[float, float]:
    """(max abs error, allowed) of one output; VerifyError when it is off. `unordered`: the
    last dimension is a set (compared sorted)."""
    if tuple(got.shape) != tuple(want.shape):
        raise VerifyError(f"output {index}: shape {tuple(got.shape)} differs from "
                          f"{REFERENCE}'s {tuple(want.shape)}")
    if unordered and got.dim():
        got, want = got.sort(dim=-1).values, want.sort(dim=-1).values
    if not (got.is_floating_point() or got.is_complex()):
        steps = QUANTIZED_STEPS.get(got.dtype, 0)
        difference = (got.cpu().long() - want.to(got.dtype).long()).abs()
        wrong = difference > steps
        if wrong.any():
            allowed = f" by more than {steps} step" if steps else ""
            raise VerifyError(f"output {index} ({got.dtype}): {int(wrong.sum())} of "
                              f"{got.numel()} elements differ{allowed} from {REFERENCE}")
        return float(difference.max()) if difference.numel() else 0.0, float(steps)
    rtol = tolerance(got.dtype)
    device, reference = widen(got), widen(want)
    finite = reference[torch.isfinite(reference)]
    scale = float(finite.abs().max()) if finite.numel() else 1.0
    atol = rtol * max(scale, 1e-30)
    close = torch.isclose(device, reference, rtol=rtol, atol=atol)
    error = (device - reference).abs().nan_to_num(float("inf"))
    error[close] = 0.0  # equal infinities are close; their difference is nan
    worst = float(error.max()) if error.numel() else 0.0
    if not bool(close.all()):
        at = tuple(int(i) for i in torch.unravel_index(error.argmax(), error.shape))
        raise VerifyError(
            f"output {index} ({got.dtype}): {int((~close).sum())} of {got.numel()} elements "
            f"differ from {REFERENCE} beyond rtol {rtol:.3g} / atol {atol:.3g}; worst at {at}: "
            f"{float(device[at]):.6g} vs {float(reference[at]):.6g}")
    return worst, atol


class Verifier:
    """Chooses the cases to verify and verifies them."""

    def __init__(self, every: int, synchronize: Callable[[], None]) -> None:
        self.every = every
        self.synchronize = synchronize
        self.seen: Counter[str] = Counter()

    def wanted(self, kernel_type: str) -> bool:
        count = self.seen[kernel_type]
        self.seen[kernel_type] += 1
        return count == 0 or (self.every > 0 and count % self.every == 0)

    def check(self, spec: KernelSpec, case: KernelCase, prepared: Prepared) -> str:
        """'' for a case not sampled; else what was checked (VerifyError when it is off).
        Each implementation of a kernel type is sampled on its own (the first case of each
        is checked), and compared on the outputs it computes."""
        if not self.wanted(f"{case.kernel_type}/{prepared.impl}"):
            return ""
        if not spec.has_portable_path():
            return "not verified: no portable path to compare with"
        reference_inputs = {name: widen(t) for name, t in prepared.tensors.items()}
        returned = prepared.call()
        self.synchronize()
        got = [t.detach().cpu() for t in spec.results(returned, prepared.tensors, case)]
        want = spec.results(spec.portable_call(reference_inputs, case)(), reference_inputs, case)
        if prepared.outputs is not None:  # e.g. a vendor RMS norm that returns y, not rstd
            want = tuple(want[i] for i in prepared.outputs if i < len(want))
        if len(got) != len(want) or not got:
            raise VerifyError(f"{len(got)} output(s) to compare with {REFERENCE}'s "
                              f"{len(want)}")
        worst = [compare(i, g, w, unordered=i in spec.unordered_outputs)
                 for i, (g, w) in enumerate(zip(got, want))]
        return (f"verified: {len(got)} output(s) within tolerance of {REFERENCE} "
                f"(largest error {max(e for e, _ in worst):.3g})")
