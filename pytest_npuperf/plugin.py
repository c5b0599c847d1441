"""pytest hooks of pytest_npuperf: each connects pytest to the harness in a line or two.

The plugin is inert in a session that collects no replay case (a test function asking for the
`npuperf_case` fixture): loading it imports neither torch nor pandas, and until a replay case
is parametrized (or, under xdist, reported) no role object exists and no hook does work.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from .harness import lifecycle, parametrize
from .harness.configure import configure, rank_env
from .harness.nodeids import may_be_cases
from .harness.options import add_options
from .harness.progress import teststatus
from .harness.roles import comm_session, measurer, owner
from .harness.wrap import run_elsewhere

if TYPE_CHECKING:
    from collections.abc import Callable

    from .measure.result import CaseResult
    from .replay.cases import CaseRef


def pytest_addoption(parser: pytest.Parser) -> None:
    add_options(parser)


def pytest_addhooks(pluginmanager: pytest.PytestPluginManager) -> None:
    from . import hookspecs

    pluginmanager.add_hookspecs(hookspecs)


@pytest.hookimpl(tryfirst=True)
def pytest_cmdline_main(config: pytest.Config) -> int | None:
    """Under torchrun (--npuperf-nproc) or msprof, this invocation runs in another process."""
    return run_elsewhere(config)


def pytest_configure(config: pytest.Config) -> None:
    configure(config)


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if parametrize.PARAM in metafunc.fixturenames:
        parametrize.parametrize(metafunc)
    if "npuperf_comm_case" in metafunc.fixturenames:
        comm_session(metafunc.config).parametrize(metafunc)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    parametrize.kernel_cases_left_out(config, items, rank_env().world)
    parametrize.resumed_left_out(config, items)


def pytest_collection_finish(session: pytest.Session) -> None:
    lifecycle.after_collection(session)


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_node_collection_finished(node, ids) -> None:
    """The xdist controller collects nothing itself: it checks and locks the database once
    workers report replay cases, before any of them is scheduled."""
    if may_be_cases(ids):
        owner(node.config).on_worker_cases(ids)


@pytest.hookimpl(optionalhook=True)
def pytest_handlecrashitem(crashitem: str, report, sched) -> None:
    """xdist: the worker running `crashitem` died; its case is recorded as `crashed`."""
    config = getattr(getattr(report, "node", None), "config", None) or sched.config
    owner(config).record_crash(crashitem, str(report.longrepr))


@pytest.hookimpl(wrapper=True)
def pytest_runtestloop(session: pytest.Session):
    """xdist: a worker that died at start-up ends the run in one line, not a traceback."""
    try:
        return (yield)
    except OSError as exc:
        lifecycle.worker_lost(session, exc)
        raise


@pytest.fixture
def npuperf_case(request: pytest.FixtureRequest) -> CaseRef:
    """The database row this case replays (parametrized by the plugin)."""
    return request.param


@pytest.fixture
def npuperf_comm_case(request: pytest.FixtureRequest):
    """The collective sweep point this case measures (parametrized by the plugin)."""
    return request.param


@pytest.fixture
def npuperf_collective(request: pytest.FixtureRequest):
    """Measure a collective sweep point on every rank; rank 0 keeps the result."""
    return comm_session(request.config).runner(request)


@pytest.fixture
def npuperf_replay(request: pytest.FixtureRequest) -> Callable[[CaseRef], CaseResult]:
    """Measure a case on the run's device; fails the test when the kernel cannot run."""
    return measurer(request.config).replayer(request)


@pytest.fixture
def npuperf_trace(request: pytest.FixtureRequest):
    """`npuperf_trace(step, name, warmup=1, steps=1, parse_into=None)`: profile `step` on the
    run's device (shapes recorded, after warm-up steps) into <out>/traces/; returns the trace."""
    from .harness.tracing import tracer

    return tracer(request)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo):
    outcome = yield
    parametrize.report_case(item, outcome.get_result())


def pytest_report_teststatus(report: pytest.TestReport, config: pytest.Config):
    return teststatus(report, config)


@pytest.hookimpl(tryfirst=True)
def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    lifecycle.finish_session(session, exitstatus)


def pytest_terminal_summary(terminalreporter, exitstatus: int, config: pytest.Config) -> None:
    lifecycle.terminal_summary(terminalreporter, config)


def pytest_unconfigure(config: pytest.Config) -> None:
    lifecycle.release(config)
