"""The job's process groups: the measured backend by device (hccl on NPU, nccl on CUDA, gloo on
CPU), a separate gloo group for control traffic, and one group per rank set measured.

Control (barriers, sample gathers, stop decisions, support and check agreement) never runs on
the measured group: a collective that fails there cannot leave the control group out of step,
and control traffic stays off the measured links. Every process group gets the session's
--npuperf-comm-timeout: gloo raises once it passes (at once when a peer's connection closes).
On CUDA, TORCH_NCCL_ASYNC_ERROR_HANDLING defaults to 2 (abort the communicator, keep the
process) so that a timeout surfaces as an error instead of NCCL's watchdog ending the process
before rank 0 has written its results; a value the user set is kept.

Groups are created in the order cases ask for them, by every rank (torch.distributed requires
all ranks to take part in creating every group, members or not), which the lockstep of the
cases guarantees.
"""

from __future__ import annotations

import datetime as _dt
import os
from collections.abc import Sequence
from typing import TYPE_CHECKING

import torch.distributed as dist

from .channel import Channel

if TYPE_CHECKING:
    from ..devices import Backend

PG_BACKENDS = {"cpu": "gloo", "cuda": "nccl", "npu": "hccl"}


class CommFault(RuntimeError):
    """A collective or control exchange failed: a rank died, hung, or was stopped. The groups
    are unusable from here on."""


class Fabric:
    """What the measurement loop needs from the job: this rank, the control channel, the
    channel of a rank set (None when this rank is not in it), the measured backend's name."""

    rank: int
    world: int
    backend_name: str
    control: Channel

    def group(self, ranks: Sequence[int]) -> Channel | None:
        raise NotImplementedError


class TorchFabric(Fabric):
    def __init__(self, backend: Backend, rank: int, world: int, timeout_s: float) -> None:
        self.device = backend
        self.rank, self.world = rank, world
        self.backend_name = PG_BACKENDS[backend.kind]
        self.timeout = _dt.timedelta(seconds=timeout_s)
        self._groups: dict[tuple[int, ...], Channel | None] = {}
        self.control: Channel

    def start(self) -> TorchFabric:
        """Join the job (env:// rendezvous: torchrun's MASTER_ADDR, MASTER_PORT, RANK...)."""
        if self.device.kind == "cuda":
            os.environ.setdefault("TORCH_NCCL_ASYNC_ERROR_HANDLING", "2")
        if not dist.is_initialized():
            dist.init_process_group(self.backend_name, timeout=self.timeout)
        world = tuple(range(self.world))
        self._groups[world] = Channel(dist.group.WORLD, world)
        self.control = Channel(dist.new_group(backend="gloo", timeout=self.timeout), world)
        return self

    def group(self, ranks: Sequence[int]) -> Channel | None:
        key = tuple(ranks)
        if key not in self._groups:
            group = dist.new_group(ranks=list(key), timeout=self.timeout)
            member = self.rank in key and group is not dist.GroupMember.NON_GROUP_MEMBER
            self._groups[key] = Channel(group, key) if member else None
        return self._groups[key]

    def close(self, healthy: bool) -> None:
        """Leave the job. After a fault, destroying NCCL / HCCL communicators can block on the
        dead peer: the process exits without it."""
        if healthy and dist.is_initialized():
            dist.destroy_process_group()
