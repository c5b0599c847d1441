"""The role objects of a run, created on first use: the context a process's roles share, the
owner (in the process that owns the run), the measurer (in a process that runs cases), the
collective session. The heavy modules behind them are imported here, only when needed."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, TypeVar

import pytest

from .stash import COMM_KEY, CONTEXT_KEY, MEASURER_KEY, OWNER_KEY, roles

if TYPE_CHECKING:
    from .comm_session import CommSession
    from .context import RunContext
    from .measurer import Measurer
    from .owner import Owner

T = TypeVar("T")


def existing_context(config: pytest.Config) -> RunContext | None:
    """The run's replay context if one was created (a replay case was collected or reported)."""
    return config.stash.get(CONTEXT_KEY, None)


def existing_owner(config: pytest.Config) -> Owner | None:
    return config.stash.get(OWNER_KEY, None)


def existing_measurer(config: pytest.Config) -> Measurer | None:
    return config.stash.get(MEASURER_KEY, None)


def existing_comm(config: pytest.Config) -> CommSession | None:
    """The run's collective session if a collective case was parametrized."""
    return config.stash.get(COMM_KEY, None)


def context(config: pytest.Config) -> RunContext:
    """The run's replay context, created (with the heavy imports) on first use."""
    def create() -> RunContext:
        from .context import RunContext

        return RunContext(config)
    return _created(config, CONTEXT_KEY, create)


def owner(config: pytest.Config) -> Owner | None:
    """The owner of the run, in the process that owns it (None elsewhere)."""
    if not roles(config).owns:
        return None

    def create() -> Owner:
        from .owner import Owner

        return Owner(context(config))
    return _created(config, OWNER_KEY, create)


def measurer(config: pytest.Config) -> Measurer:
    """The measurer of a process that runs cases."""
    def create() -> Measurer:
        from .measurer import Measurer

        return Measurer(context(config))
    return _created(config, MEASURER_KEY, create)


def comm_session(config: pytest.Config) -> CommSession:
    """The run's collective session, created on first use (no torch until cases run)."""
    def create() -> CommSession:
        from .comm_session import CommSession

        return CommSession(config)
    return _created(config, COMM_KEY, create)


def _created(config: pytest.Config, key: pytest.StashKey, create: Callable[[], T]) -> T:
    value = config.stash.get(key, None)
    if value is None:
        value = config.stash[key] = create()
    return value
