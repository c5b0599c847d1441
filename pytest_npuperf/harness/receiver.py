"""The owner's ear: every test report of the run reaches the owning process (xdist sends the
workers' reports to the controller, user properties included); the replay results they carry
are unpacked (route.py) and go to the run's owner. Once pytest has written a case's line,
the owner may add its progress line (never inside pytest's own)."""

from __future__ import annotations

import pytest

from .roles import existing_owner, owner
from .route import unpack
from .stash import roles


class ResultReceiver:
    def __init__(self, config: pytest.Config) -> None:
        self.config = config

    @pytest.hookimpl(tryfirst=True)  # a late SLOWER verdict must fail the report before
    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:  # it is counted
        if not roles(self.config).owns:
            return  # a worker: its reports go to the controller as they are
        result = unpack(report)
        if result is not None:
            run_owner = owner(self.config)
            run_owner.judge_late(report, result)
            run_owner.record(result)

    @pytest.hookimpl(trylast=True)
    def pytest_runtest_logfinish(self, nodeid: str, location) -> None:
        if roles(self.config).owns:
            run_owner = existing_owner(self.config)
            if run_owner is not None and run_owner.results:
                run_owner.progress_tick()
