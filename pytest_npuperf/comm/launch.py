"""Ranks: what torchrun says about this process, and `--npuperf-nproc N`, which re-launches
the same pytest invocation under torchrun on this node.

Light (no torch): the parent of `--npuperf-nproc` only starts torchrun and waits for it.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

NPROC_FLAG = "--npuperf-nproc"
# torchrun exports these to every worker (torch.distributed.run, "environment variables").
_RANK_VARS = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE")


@dataclass(frozen=True)
class RankEnv:
    rank: int = 0
    world: int = 1
    local_rank: int = 0
    local_world: int = 1
    launched: bool = False  # started by torchrun (or another launcher exporting its variables)

    @property
    def is_root(self) -> bool:
        return self.rank == 0


def rank_env(env: Mapping[str, str] | None = None) -> RankEnv:
    """This process's place in the job; a plain pytest process is rank 0 of 1."""
    env = os.environ if env is None else env
    if not ("RANK" in env and "WORLD_SIZE" in env):
        return RankEnv()
    try:
        values = {name: int(env.get(name, default)) for name, default in
                  zip(_RANK_VARS, ("0", "1", env.get("RANK", "0"), env.get("WORLD_SIZE", "1")))}
    except ValueError:
        bad = {k: env.get(k) for k in _RANK_VARS}
        raise ValueError(f"torchrun variables are not numbers: {bad}") from None
    rank, world = values["RANK"], values["WORLD_SIZE"]
    if world < 1 or not 0 <= rank < world:
        raise ValueError(f"RANK={rank} WORLD_SIZE={world}: not a rank of the world")
    return RankEnv(rank, world, values["LOCAL_RANK"], values["LOCAL_WORLD_SIZE"], True)


def strip_nproc(args: Sequence[str]) -> list[str]:
    """The invocation without `--npuperf-nproc N` / `--npuperf-nproc=N`."""
    out: list[str] = []
    skip = False
    for arg in args:
        if skip:
            skip = False
            continue
        if arg == NPROC_FLAG:
            skip = True
            continue
        if arg.startswith(NPROC_FLAG + "="):
            continue
        out.append(arg)
    return out


def torchrun_command(nproc: int, pytest_args: Sequence[str],
                     python: str | None = None) -> list[str]:
    """`torchrun --standalone --nproc-per-node N -m pytest ARGS` through this interpreter.

    --standalone: a rendezvous on a free local port, so that two jobs on one machine never
    meet on torchrun's fixed default port."""
    return [python or sys.executable, "-m", "torch.distributed.run", "--standalone",
            "--nproc-per-node", str(nproc), "-m", "pytest", *strip_nproc(pytest_args)]


def relaunch(nproc: int, pytest_args: Sequence[str], cwd: str | os.PathLike) -> int:
    """Run the invocation under torchrun and return its exit status (the parent only waits)."""
    command = torchrun_command(nproc, pytest_args)
    print(f"npuperf: {' '.join(command[1:])}", flush=True)
    try:
        return subprocess.call(command, cwd=cwd)
    except KeyboardInterrupt:
        return 130  # torchrun got the Ctrl-C too and stops its workers


def xdist_in_use(option) -> bool:
    return bool(getattr(option, "numprocesses", None)) or getattr(option, "dist", "no") != "no"
