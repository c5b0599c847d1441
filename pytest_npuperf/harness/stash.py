"""Where a pytest run keeps its roles and their objects (a case's result travels on its test
report: route.py).

The roles are chosen once, at configure time (`choose_roles`), the way pytest-xdist splits
its controller from its workers: the process that *owns* the run (the serial process, or the
xdist controller) receives every result and writes at the end; a process that *measures*
(the serial process, or an xdist worker) runs cases. Their objects (`Owner`, `Measurer`,
over one `RunContext`) are created with the run's first replay case (roles.py).

Light on purpose: the plugin loads this in every pytest run, and a run without replay cases
must cost nothing. The role modules, and torch, pandas and the database behind them, are
imported only when a run has a replay case.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import pytest

from ..comm.launch import xdist_in_use
from ..measure.clock import run_origin

# The role objects (roles.py creates them; their modules import this one, not the reverse).
CONTEXT_KEY = pytest.StashKey[object]()
OWNER_KEY = pytest.StashKey[object]()
MEASURER_KEY = pytest.StashKey[object]()
COMM_KEY = pytest.StashKey[object]()
_ROLES = pytest.StashKey["Roles"]()
_STARTED = pytest.StashKey[float]()
_ORIGIN = pytest.StashKey["tuple[float, str]"]()


@dataclass(frozen=True)
class Roles:
    owns: bool  # receives every result, writes the database, the history and the reports
    measures: bool  # runs cases

    @property
    def crosses(self) -> bool:
        """Whether results cross to another process (an xdist worker's go to the controller)."""
        return not self.owns


def choose_roles(config: pytest.Config) -> Roles:
    worker = hasattr(config, "workerinput")
    controller = not worker and xdist_in_use(config.option)
    roles = config.stash[_ROLES] = Roles(owns=not worker, measures=not controller)
    return roles


def roles(config: pytest.Config) -> Roles:
    roles = config.stash.get(_ROLES, None)
    return roles if roles is not None else choose_roles(config)


def mark_start(config: pytest.Config) -> None:
    """Remember when the run started (pytest_configure): a session created later counts from
    it; and where its wall time starts, taken here so that every run of a process, replay
    cases or not, claims the process's pytest start in the order the runs came."""
    config.stash[_STARTED] = time.time()
    config.stash[_ORIGIN] = run_origin()


def started_at(config: pytest.Config) -> float:
    return config.stash.get(_STARTED, time.time())


def wall_origin(config: pytest.Config) -> tuple[float, str]:
    """(epoch seconds, what they are) where the run's wall time and duty cycle start."""
    origin = config.stash.get(_ORIGIN, None)
    return origin if origin is not None else run_origin()
