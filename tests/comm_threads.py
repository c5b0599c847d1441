"""A job of N ranks inside one test process: one thread per rank, each with its own gloo
process groups (`ProcessGroupGloo` objects over a shared in-memory store), so that the real
measurement loop, lockstep and fault handling run in-process in well under a second instead of
paying torch's import per rank."""

from __future__ import annotations

import datetime as _dt
import functools
import itertools
import threading
from collections.abc import Callable, Sequence

import torch
import torch.distributed as dist

from pytest_npuperf.comm.buffers import Buffers
from pytest_npuperf.comm.channel import Channel
from pytest_npuperf.comm.runtime import Fabric

_jobs = itertools.count()


class ThreadFabric(Fabric):
    def __init__(self, store, job: int, rank: int, world: int, timeout_s: float,
                 channel_type: type[Channel] = Channel) -> None:
        self.rank, self.world = rank, world
        self.backend_name = "gloo"
        self._store, self._job = store, job
        self._timeout = _dt.timedelta(seconds=timeout_s)
        self._channel_type = channel_type
        self._groups: dict[tuple[int, ...], Channel] = {}
        self.control = Channel(self._group("control", range(world)), range(world))

    def _group(self, name: str, ranks: Sequence[int]):
        ranks = tuple(ranks)
        prefix = dist.PrefixStore(f"job{self._job}/{name}", self._store)
        return dist.ProcessGroupGloo(prefix, ranks.index(self.rank), len(ranks), self._timeout)

    def group(self, ranks: Sequence[int]) -> Channel | None:
        key = tuple(ranks)
        if self.rank not in key:
            return None
        if key not in self._groups:
            name = "g" + "-".join(map(str, key))
            self._groups[key] = self._channel_type(self._group(name, key), key)
        return self._groups[key]

    def close(self) -> None:
        """Drop every group (a rank that dies: its peers' connections close)."""
        self._groups.clear()
        self.control = None  # type: ignore[assignment]


def run_job(world: int, body: Callable[[ThreadFabric], object], *, timeout_s: float = 10.0,
            channel_types: dict[int, type[Channel]] | None = None,
            join_s: float = 60.0) -> list[object]:
    """`body(fabric)` on every rank at once; each rank's return value, or the exception it
    raised."""
    store = dist.HashStore()
    job = next(_jobs)
    results: list[object] = [None] * world
    # Every rank's control group connected before any body runs: a rank whose body returns at
    # once drops its group, and a peer still inside gloo's connectFullMesh then fails there
    # ("Connection closed by peer"), not where the test looks.
    connected = threading.Barrier(world, timeout=join_s)

    def rank_main(rank: int) -> None:
        try:
            try:
                fabric = ThreadFabric(store, job, rank, world, timeout_s,
                                      (channel_types or {}).get(rank, Channel))
            except BaseException:
                connected.abort()
                raise
            connected.wait()
            results[rank] = body(fabric)
        except BaseException as exc:  # returned to the test, which asserts on it
            results[rank] = exc

    threads = [threading.Thread(target=rank_main, args=(r,), daemon=True) for r in range(world)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(join_s)
        assert not thread.is_alive(), "a rank thread did not finish: the job hangs"
    return results


@functools.cache
def gloo_refuses(op: str, dtype: str = "DT_FLOAT") -> str:
    """What gloo in this torch says when asked to run `op` on `dtype`, "" where it runs it:
    torch 2.11's gloo has no all_to_all (the list form, the one measured), 2.13's has. Asked
    of a group of one rank, with the product's own buffers and call."""
    group = dist.ProcessGroupGloo(dist.HashStore(), 0, 1, _dt.timedelta(seconds=10))
    try:
        Buffers(op, 8, dtype, Channel(group, (0,)), torch.device("cpu")).call()
    except RuntimeError as exc:
        return f"gloo in torch {torch.__version__} does not run {op} on {dtype}: {exc}"
    return ""
