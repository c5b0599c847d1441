"""Liger-Kernel's Triton kernels as implementations (linkedin/Liger-Kernel,
src/liger_kernel/transformers/functional.py):

- `liger_rms_norm(X, W, eps, offset=0.0, casting_mode="llama", in_place=True)`: casting mode
  "gemma" computes in float32 throughout and casts the result, as the NPU kernel does (x * rstd
  * gamma in float32); returns y only.

Liger's SwiGLU takes the gate and up projections as two tensors with contiguous rows; a SwiGlu
row holds them as the two halves of one tensor, which it would have to copy first inside the
timed call: not registered for it.
"""

from __future__ import annotations

from collections.abc import Callable

from ..implementation import Unsupported
from ..norm import RMS_NORM_EPS
from ..spec import implemented


def rms_norm(spec, inputs, case, backend) -> Callable[[], object]:
    x, gamma = inputs["x"], inputs["gamma"]
    if gamma.dim() != 1:
        raise Unsupported(f"gamma {tuple(gamma.shape)} spans several dims; liger_rms_norm "
                          f"takes one weight over the last")
    try:
        from liger_kernel.transformers.functional import liger_rms_norm
    except ImportError as exc:
        raise Unsupported(f"liger_kernel cannot be imported: {exc}") from None

    def call():
        return liger_rms_norm(x, gamma, RMS_NORM_EPS, offset=0.0, casting_mode="gemma",
                              in_place=False)
    return implemented("liger_rms_norm (casting gemma; y, no rstd)", call, outputs=(0,))
