"""A case's buffers, allocated once, the collective call on them, and its correctness check.

Check patterns are small integers, exact in every dtype (bf16, fp16, int8 and fp8 included)
whatever the group size, so the check compares bit patterns:
- sums (all_reduce, reduce_scatter): element i of the chunk reduced into group rank j holds 1
  on exactly one rank, (i + j) mod n, and 0 elsewhere: every result element is 1, and a rank
  that is missing or counted twice leaves a 0 or a 2 where it should have contributed;
- all_gather: rank r's element i is (r + i) mod 7; all_to_all: the chunk rank r sends to rank j
  holds (r + 2j + i) mod 7; broadcast: the root holds (i mod 7) + 1, the others 0.
Timed iterations of a sum run on zeros (a result that never grows or overflows); the check is
one more call on freshly filled buffers after the timed loop (as nccl-tests' #wrong).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import torch

from .channel import Channel
from .ops import DTYPES, OPS

_MOD = 7
_BITS = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}


def torch_dtype(dtype: str) -> torch.dtype:
    name = DTYPES[dtype][1]
    value = getattr(torch, name, None)
    if value is None:
        raise TypeError(f"torch {torch.__version__} has no {name}")
    return value


def _periodic(values: list[float], numel: int, dtype: torch.dtype,
              device: torch.device) -> torch.Tensor:
    """`values` repeated to `numel` elements, built on the device in `dtype` (no int64 index
    tensor of the buffer's length)."""
    base = torch.tensor(values, dtype=torch.float32, device=device).to(dtype)
    return base.repeat(math.ceil(numel / len(values)))[:numel]


@dataclass
class Mismatch:
    wrong: int
    index: int = -1
    got: float = math.nan
    expected: float = math.nan


class Buffers:
    """The tensors of one case on this rank, and the call that runs the collective on them."""

    def __init__(self, op: str, elements: int, dtype: str, channel: Channel,
                 device: torch.device) -> None:
        self.op = OPS[op]
        self.channel = channel
        self.n = channel.size
        self.me = channel.index
        self.elements = elements
        self.dtype = torch_dtype(dtype)
        self.device = device
        n, e = self.n, elements
        in_count = e * (n if self.op.in_chunks == 0 else self.op.in_chunks)
        self.input = torch.zeros(in_count, dtype=self.dtype, device=device)
        if self.op.out_chunks == -1:
            self.output = self.input
        else:
            self.output = torch.zeros(e * (n if self.op.out_chunks == 0 else self.op.out_chunks),
                                      dtype=self.dtype, device=device)
        self.call = self._call()

    def _call(self) -> Callable[[], None]:
        channel, name = self.channel, self.op.name
        if name == "all_reduce":
            return lambda: channel.all_reduce(self.input)
        if name == "all_gather":
            return lambda: channel.all_gather(self.output, self.input)
        if name == "reduce_scatter":
            return lambda: channel.reduce_scatter(self.output, self.input)
        if name == "all_to_all":
            ins = list(self.input.view(self.n, -1).unbind(0))
            outs = list(self.output.view(self.n, -1).unbind(0))
            return lambda: channel.all_to_all(outs, ins)
        return lambda: channel.broadcast(self.input, 0)

    def _fill(self, tensor: torch.Tensor, chunks: list[list[float]]) -> None:
        """Chunk c of `tensor` (tensor split in len(chunks) equal parts) <- pattern c."""
        parts = tensor.view(len(chunks), -1)
        for part, values in zip(parts, chunks):
            part.copy_(_periodic(values, part.numel(), self.dtype, self.device))

    def _sum_pattern(self, rank: int, chunk: int) -> list[float]:
        return [1.0 if (i + chunk) % self.n == rank else 0.0 for i in range(self.n)]

    def fill_timing(self) -> None:
        if self.op.reduces:
            self.input.zero_()
        else:
            self.fill_check()

    def fill_check(self) -> None:
        n, me, name = self.n, self.me, self.op.name
        if name == "all_reduce":
            self._fill(self.input, [self._sum_pattern(me, 0)])
        elif name == "reduce_scatter":
            self._fill(self.input, [self._sum_pattern(me, j) for j in range(n)])
        elif name == "all_gather":
            self._fill(self.input, [[float((me + i) % _MOD) for i in range(_MOD)]])
            self.output.zero_()
        elif name == "all_to_all":
            self._fill(self.input, [[float((me + 2 * j + i) % _MOD) for i in range(_MOD)]
                                    for j in range(n)])
            self.output.zero_()
        elif me == 0:
            self._fill(self.input, [[float(i % _MOD + 1) for i in range(_MOD)]])
        else:
            self.input.zero_()

    def expected(self) -> torch.Tensor:
        n, me, name = self.n, self.me, self.op.name
        out = torch.empty_like(self.output)
        if self.op.reduces:
            out.fill_(1)
        elif name == "all_gather":
            self._fill(out, [[float((r + i) % _MOD) for i in range(_MOD)] for r in range(n)])
        elif name == "all_to_all":
            self._fill(out, [[float((r + 2 * me + i) % _MOD) for i in range(_MOD)]
                             for r in range(n)])
        else:
            self._fill(out, [[float(i % _MOD + 1) for i in range(_MOD)]])
        return out

    def check(self) -> Mismatch:
        """Compare the output (after one call on `fill_check` data) with the expected values,
        bit for bit."""
        expected = self.expected()
        bits = _BITS[self.output.element_size()]
        differs = self.output.view(bits) != expected.view(bits)
        wrong = int(differs.sum().item())
        if not wrong:
            return Mismatch(0)
        index = int(differs.nonzero()[0].item())
        return Mismatch(wrong, index, float(self.output[index].float().item()),
                        float(expected[index].float().item()))

    @property
    def nbytes(self) -> int:
        extra = 0 if self.output is self.input else self.output.numel()
        return (self.input.numel() + extra) * self.input.element_size()
