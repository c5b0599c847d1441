"""Where a pytest run keeps its replay session, created with the run's first replay case.

Light on purpose: the plugin loads this in every pytest run, and a run without replay cases
must cost nothing. The session module, and torch, pandas and the database behind it, are
imported only when a run has a replay case.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING, TypeVar

import pytest

if TYPE_CHECKING:
    from .comm import CommSession
    from .session import ReplaySession

RESULT_PROPERTY = "npuperf_result"
SESSION_KEY = pytest.StashKey["ReplaySession"]()
COMM_KEY = pytest.StashKey["CommSession"]()
_STARTED = pytest.StashKey[float]()
T = TypeVar("T")


def mark_start(config: pytest.Config) -> None:
    """Remember when the run started (pytest_configure): a session created later counts from it."""
    config.stash[_STARTED] = time.time()


def started_at(config: pytest.Config) -> float:
    return config.stash.get(_STARTED, time.time())


def existing_session(config: pytest.Config) -> ReplaySession | None:
    """The run's replay session if one was created (a replay case was collected or reported)."""
    return config.stash.get(SESSION_KEY, None)


def replay_session(config: pytest.Config) -> ReplaySession:
    """The run's replay session, created (with the heavy imports) on first use."""
    def create() -> ReplaySession:
        from .session import ReplaySession

        return ReplaySession(config)
    return _created(config, SESSION_KEY, create)


def existing_comm(config: pytest.Config) -> CommSession | None:
    """The run's collective session if a collective case was parametrized."""
    return config.stash.get(COMM_KEY, None)


def comm_session(config: pytest.Config) -> CommSession:
    """The run's collective session, created on first use (no torch until cases run)."""
    def create() -> CommSession:
        from .comm import CommSession

        return CommSession(config)
    return _created(config, COMM_KEY, create)


def _created(config: pytest.Config, key: pytest.StashKey, create: Callable[[], T]) -> T:
    value = config.stash.get(key, None)
    if value is None:
        value = config.stash[key] = create()
    return value
