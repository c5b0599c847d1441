"""One process group as this rank uses it: the measured collectives and the small control
exchanges (barrier, gather to the group's first rank, broadcast from it, all-gather of bytes).

Calls go to the c10d `ProcessGroup` object's own methods (`allreduce`, `_allgather_base`,
`_reduce_scatter_base`, `alltoall`, `broadcast`, the calls torch.distributed's functions
make), so a group is usable whether or not it is registered as a torch.distributed world:
the session's groups come from `dist.new_group`, the tests' from `ProcessGroupGloo` objects
made in threads. `wait()` blocks the host on gloo; on NCCL / HCCL it orders the current stream
after the collective, as torch.distributed's functions do.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.distributed as dist


class Channel:
    def __init__(self, group, ranks: Sequence[int]) -> None:
        self.group = group  # a c10d ProcessGroup
        self.ranks = tuple(ranks)  # global ranks, in group order
        self.index = int(group.rank())  # this process's rank within the group
        self.size = int(group.size())
        if self.size != len(self.ranks):
            raise ValueError(f"group of {self.size} ranks named with {len(self.ranks)}")

    # -- the measured collectives (tensors on the measured device) ------------------------------
    def all_reduce(self, tensor: torch.Tensor) -> None:
        self.group.allreduce([tensor]).wait()

    def all_gather(self, output: torch.Tensor, input: torch.Tensor) -> None:
        self.group._allgather_base(output, input).wait()

    def reduce_scatter(self, output: torch.Tensor, input: torch.Tensor) -> None:
        self.group._reduce_scatter_base(output, input).wait()

    def all_to_all(self, outputs: list[torch.Tensor], inputs: list[torch.Tensor]) -> None:
        # The list form: HCCL runs it as its alltoallv kernel (hcom_alltoallv_, the table name).
        self.group.alltoall(outputs, inputs).wait()

    def broadcast(self, tensor: torch.Tensor, root: int = 0) -> None:
        opts = dist.BroadcastOptions()
        opts.rootRank = root
        opts.rootTensor = 0
        self.group.broadcast([tensor], opts).wait()

    # -- control (CPU tensors on a gloo group) --------------------------------------------------
    def barrier(self) -> None:
        self.group.barrier().wait()

    def gather_floats(self, values: Sequence[float]) -> list[list[float]] | None:
        """Every rank's equally long `values` on the group's first rank (None elsewhere)."""
        tensor = torch.tensor(list(values), dtype=torch.float64)
        outputs = [[torch.empty_like(tensor) for _ in range(self.size)]] if self.index == 0 else []
        opts = dist.GatherOptions()
        opts.rootRank = 0
        self.group.gather(outputs, [tensor], opts).wait()
        return [t.tolist() for t in outputs[0]] if self.index == 0 else None

    def all_gather_floats(self, values: Sequence[float]) -> list[list[float]]:
        tensor = torch.tensor(list(values), dtype=torch.float64)
        outputs = [torch.empty_like(tensor) for _ in range(self.size)]
        self.group.allgather([outputs], [tensor]).wait()
        return [t.tolist() for t in outputs]

    def broadcast_ints(self, values: Sequence[int]) -> list[int]:
        """The first rank's `values` on every rank (others pass as many placeholders)."""
        tensor = torch.tensor(list(values), dtype=torch.int64)
        self.broadcast(tensor, 0)
        return [int(v) for v in tensor.tolist()]

    def all_gather_bytes(self, data: bytes) -> list[bytes]:
        lengths = self.all_gather_floats([len(data)])
        longest = int(max(length[0] for length in lengths))
        padded = torch.zeros(max(longest, 1), dtype=torch.uint8)
        if data:
            padded[:len(data)] = torch.frombuffer(bytearray(data), dtype=torch.uint8)
        outputs = [torch.empty_like(padded) for _ in range(self.size)]
        self.group.allgather([outputs], [padded]).wait()
        return [bytes(out[:int(length[0])].tolist()) for out, length in zip(outputs, lengths)]
