"""Math the portable paths of several kernels share: RMS normalisation, rotary embeddings,
and the rotary tables and cache slots they run on.

Reductions accumulate in float32 as the NPU kernels do, or in float64 when given float64
(the CPU reference of --npuperf-verify), and results come back in the input's dtype.
"""

from __future__ import annotations

import torch


def accumulate_dtype(tensor: torch.Tensor) -> torch.dtype:
    return torch.float64 if tensor.dtype == torch.float64 else torch.float32


def rms_normalize(x: torch.Tensor, eps: float) -> tuple[torch.Tensor, torch.Tensor]:
    """x * rstd over the last dim, in the accumulation dtype, and rstd (keepdim)."""
    xf = x.to(accumulate_dtype(x))
    rstd = torch.rsqrt(xf.pow(2).mean(dim=-1, keepdim=True) + eps)
    return xf * rstd, rstd


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    """[x0 .. x(d/2-1), x(d/2) .. x(d-1)] -> [-x(d/2) .. -x(d-1), x0 .. x(d/2-1)]."""
    first, second = x.chunk(2, dim=-1)
    return torch.cat((-second, first), dim=-1)


def deinterleave(x: torch.Tensor) -> torch.Tensor:
    """Pairs (x0, x1), (x2, x3), ... -> [x0, x2, ..., x1, x3, ...]: the reshape to
    (..., d/2, 2) and transpose that interleaved rotary embeddings start with."""
    return x.unflatten(-1, (-1, 2)).transpose(-1, -2).flatten(-2)


def rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """x * cos + rotate_half(x) * sin (broadcast), in x's accumulation dtype."""
    acc = accumulate_dtype(x)
    xf = x.to(acc)
    return xf * cos.to(acc) + rotate_half(xf) * sin.to(acc)


def rotary_angles(positions: torch.Tensor, dim: int, base: float = 10000.0) -> torch.Tensor:
    """The angles position * base^(-2i/dim), i < dim/2, of a rotary table (float32)."""
    exponent = torch.arange(0, dim, 2, dtype=torch.float32, device=positions.device) / dim
    return positions.to(torch.float32)[:, None] * torch.pow(base, -exponent)[None, :]


def distinct_slots(count: int, total: int, generator: torch.Generator, device: torch.device
                   ) -> torch.Tensor:
    """`count` different slots out of `total` (int64): a valid slot mapping, no two tokens
    writing the same cache entry."""
    return torch.randperm(total, generator=generator, device=device)[:count]
