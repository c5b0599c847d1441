"""Random input data on a CPU without a random number generator per case.

A CPU draws normal floats at a few hundred million a second: the weights of one GEMM row
(tens of MB) cost tens of milliseconds to draw, and a case's inputs were the largest part of
what a case cost beside its measured calls. Here each dtype (and integer range) has one pool
of random values, drawn once per process from a fixed seed; a tensor is a copy of the pool
from an offset the case's own generator picks (several when the tensor is larger than the
pool). Values keep their distribution (normal floats, integers in the range), a case gets
the same data on every run and in any order, and a copy runs at memory speed.

Devices draw on the device at memory speed already: they do not use a pool.
"""

from __future__ import annotations

import torch

POOL_ELEMENTS = 1 << 22  # 4 Mi values: 16 MB of float32, drawn in a few tens of ms once
_POOL_SEED = 0x6E707570  # any fixed value: the pools are the same in every process
_pools: dict[tuple, torch.Tensor] = {}


def _pool(dtype: torch.dtype, low: int, high: int) -> torch.Tensor:
    key = (dtype, low, high) if not dtype.is_floating_point else (dtype,)
    pool = _pools.get(key)
    if pool is None:
        generator = torch.Generator().manual_seed(_POOL_SEED)
        if dtype.is_floating_point:
            pool = torch.randn(POOL_ELEMENTS, generator=generator).to(dtype)
        else:
            pool = torch.randint(low, high, (POOL_ELEMENTS,), dtype=dtype, generator=generator)
        _pools[key] = pool
    return pool


def pooled(shape: tuple[int, ...], dtype: torch.dtype, generator: torch.Generator, *,
           low: int = 0, high: int = 8) -> torch.Tensor:
    """A new CPU tensor of `shape` holding pool values of `dtype` (N(0, 1) floats, integers
    in [low, high)), from offsets drawn with `generator`."""
    pool = _pool(dtype, low, high)
    out = torch.empty(shape, dtype=dtype)
    flat, total, done = out.view(-1), out.numel(), 0
    while done < total:
        length = min(total - done, POOL_ELEMENTS // 2)
        start = int(torch.randint(0, POOL_ELEMENTS - length + 1, (1,), generator=generator))
        flat[done:done + length].copy_(pool[start:start + length])
        done += length
    return out


def poolable(dtype: torch.dtype, device: torch.device) -> bool:
    """Real floats and integers on a CPU (bools and complex values are drawn as before)."""
    return (device.type == "cpu" and dtype != torch.bool and not dtype.is_complex
            and dtype.itemsize <= 8)
