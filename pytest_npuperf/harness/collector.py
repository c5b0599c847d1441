"""The owner's ear: every test report of the run reaches the owning process (xdist sends the
workers' reports to the controller, user properties included); the replay results they carry
go to the run's owner."""

from __future__ import annotations

import pytest

from .roles import owner
from .stash import result_of, roles


class ResultCollector:
    def __init__(self, config: pytest.Config) -> None:
        self.config = config

    @pytest.hookimpl(tryfirst=True)  # a late SLOWER verdict must fail the report before
    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:  # it is counted
        if not roles(self.config).owns:
            return  # a worker: its reports go to the controller as they are
        result = result_of(report)
        if result is not None:
            run_owner = owner(self.config)
            run_owner.judge_late(report, result)
            run_owner.record(result)
