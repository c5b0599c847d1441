"""pytest hooks of pytest_npuperf: options, case collection, session wrap, finish.

The logic lives in `session.ReplaySession`; these hooks only connect it to pytest. The plugin
is inert in a session that collects no replay case (a test function asking for the
`npuperf_case` fixture): loading it imports neither torch nor pandas, and until a replay case
is parametrized (or, under xdist, reported) no session object exists and no hook does work.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

import pytest

from .comm.launch import rank_env, relaunch, xdist_in_use
from .comm.ops import OP_NAMES
from .harness.comm_options import read_comm_settings
from .harness.options import add_options, check_usage, option_value
from .harness.stash import (
    RESULT_PROPERTY,
    comm_session,
    existing_comm,
    existing_session,
    mark_start,
    replay_session,
)

if TYPE_CHECKING:
    from .measure.result import CaseResult
    from .replay.cases import CaseRef

_RESULT = pytest.StashKey["CaseResult"]()
# A replay case's node id ends in its case id, `<type>-<shape>-<dtype>-<8 hex>[-dupN]`
# (measure.cases.case_id), or `<type>-unreadable` for a file that could not be read: only
# such ids make the xdist controller read the database.
_CASE_NODEID = re.compile(r"\[[^\[\]]+-(?:[0-9a-f]{8}(?:-dup\d+)?|unreadable)\]$")


def pytest_addoption(parser: pytest.Parser) -> None:
    add_options(parser)


def pytest_addhooks(pluginmanager: pytest.PytestPluginManager) -> None:
    from . import hookspecs

    pluginmanager.add_hookspecs(hookspecs)


class _ResultCollector:
    """Receives every test report in the owning process (xdist sends workers' reports to the
    controller, user_properties included) and hands replay results to the session."""

    def __init__(self, config: pytest.Config) -> None:
        self.config = config

    @pytest.hookimpl(tryfirst=True)  # a late SLOWER verdict must fail the report before
    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:  # it is counted
        for name, value in report.user_properties:
            if name == RESULT_PROPERTY and isinstance(value, dict):
                replay = replay_session(self.config)
                replay.judge_late(report, value)
                replay.record(value)


@pytest.hookimpl(tryfirst=True)
def pytest_cmdline_main(config: pytest.Config) -> int | None:
    """This process may run the session elsewhere and return its exit status:
    `--npuperf-nproc N` re-runs this invocation under torchrun (collectives); the msprof wrap
    (--npuperf-profiler) re-runs it under msprof and writes what the child measured."""
    nproc = option_value(config, "nproc")
    if nproc and not _rank_env().launched:
        if xdist_in_use(config.option):
            raise pytest.UsageError("--npuperf-nproc runs every rank as one pytest process: "
                                    "drop -n / --dist (xdist)")
        params = config.invocation_params
        return relaunch(int(nproc), params.args, params.dir)
    from .profiling.msprof_parent import run_wrapped, should_wrap

    return run_wrapped(config) if should_wrap(config) else None


def _rank_env():
    """This process's place in a torchrun job (rank 0 of 1 outside one)."""
    try:
        return rank_env()
    except ValueError as exc:
        raise pytest.UsageError(f"npuperf: {exc}") from None


def pytest_configure(config: pytest.Config) -> None:
    mark_start(config)
    config.pluginmanager.register(_ResultCollector(config), "npuperf-results")
    config.addinivalue_line("markers", "npuperf: a replay case of pytest_npuperf")
    for op in OP_NAMES:
        config.addinivalue_line("markers", f"{op}: collective cases of {op}")
    env = _rank_env()
    read_comm_settings(config, env)  # a bad collective option: one usage-error line
    if env.launched:
        if xdist_in_use(config.option):
            raise pytest.UsageError("npuperf: under torchrun every rank is one pytest process; "
                                    "xdist (-n / --dist) cannot be used: drop it")
        if env.rank > 0:
            config.option.verbose = min(config.option.verbose, -1)  # rank 0 reports
    if config.pluginmanager.hasplugin("html"):
        from .harness import html as html_hooks

        config.pluginmanager.register(html_hooks, "npuperf-html")
    check_usage(config)  # a UsageError from here is one line


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "npuperf_case" in metafunc.fixturenames:
        replay_session(metafunc.config).parametrize(metafunc)
    if "npuperf_comm_case" in metafunc.fixturenames:
        comm_session(metafunc.config).parametrize(metafunc)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Under torchrun, kernel replays are left out: every rank would replay and write them."""
    if _rank_env().world < 2:
        return
    kernel = [item for item in items if _case_of(item)]
    if kernel:
        config.hook.pytest_deselected(items=kernel)
        items[:] = [item for item in items if not _case_of(item)]


def pytest_collection_finish(session: pytest.Session) -> None:
    comm = existing_comm(session.config)
    if comm is not None:
        comm.after_collection(session.items)
    replay = existing_session(session.config)
    if replay is None:
        return
    if replay.collection_error:
        raise pytest.UsageError(replay.collection_error)
    if replay.active and any(_case_of(item) for item in session.items):
        replay.prepare_writes()


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_node_collection_finished(node, ids) -> None:
    """Under xdist the controller collects nothing itself: it checks and locks the database
    once workers report replay cases, before any of them is scheduled."""
    replay = existing_session(node.config)
    if (replay is not None and replay.active) or not any(map(_CASE_NODEID.search, ids)):
        return
    replay = replay_session(node.config)
    case_ids = {ref.case_id for ref in replay.case_refs()}
    if any(nodeid.rsplit("[", 1)[-1].rstrip("]") in case_ids for nodeid in ids):
        replay.active = True
        replay.prepare_writes()


@pytest.hookimpl(optionalhook=True)
def pytest_handlecrashitem(crashitem: str, report, sched) -> None:
    """xdist: the worker running `crashitem` died. Its case gets status `crashed` (its row and
    the reports say so); the crash report itself fails the session."""
    config = getattr(getattr(report, "node", None), "config", None) or sched.config
    replay_session(config).record_crash(crashitem, str(report.longrepr))


def _case_of(item: pytest.Item) -> CaseRef | None:
    callspec = getattr(item, "callspec", None)
    value = callspec.params.get("npuperf_case") if callspec else None
    if value is None or existing_session(item.config) is None:
        return None  # not a replay case (none was parametrized in this process)
    from .replay.cases import CaseRef

    return value if isinstance(value, CaseRef) else None


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
    comm = comm_session(request.config)

    def run(point):
        result = comm.run_case(point, request.node.nodeid)
        comm.outcome(result, request.session)
        return result
    return run


@pytest.fixture
def npuperf_replay(request: pytest.FixtureRequest):
    """Measure a case on the session's device; fails the test when the kernel cannot run."""
    replay = replay_session(request.config)
    benchmark = _benchmark_fixture(request)

    def run(ref: CaseRef) -> CaseResult:
        from .measure.result import FAILING_STATUSES, STATUS_SKIPPED

        if ref.problem:  # the row's file could not be read: this case stands for the file
            request.node.stash[_RESULT] = replay.problem_result(ref, request.node.nodeid)
            pytest.fail(f"{ref.file}: {ref.problem}", pytrace=False)
        result = replay.run_case(ref, request.node.nodeid)
        request.node.stash[_RESULT] = result
        if benchmark is not None and replay.runner.last_samples:
            _feed_benchmark(benchmark, result, replay.runner.last_samples)
        if result.status == STATUS_SKIPPED:  # a ReplaySkipped/NpuOnly row, or no replay yet
            pytest.skip(result.error)
        if result.status in FAILING_STATUSES:
            message = f"{result.status}: {result.error}"
            if result.detail:
                message += "\n" + result.detail
            pytest.fail(message, pytrace=False)
        # Against --npuperf-baseline, here where it ran (a SLOWER case is measured again first).
        result, comparison = replay.judge_case(ref, request.node.nodeid, result)
        request.node.stash[_RESULT] = result
        if comparison is not None and comparison.verdict == "SLOWER":
            pytest.fail(comparison.describe(), pytrace=False)
        return result
    return run


def _benchmark_fixture(request: pytest.FixtureRequest):
    """pytest-benchmark's fixture when its JSON/compare output is wanted (no xdist)."""
    config = request.config
    if not config.pluginmanager.hasplugin("benchmark") or hasattr(config, "workerinput"):
        return None
    wanted = any(config.getoption(name, None) for name in
                 ("benchmark_json", "benchmark_autosave", "benchmark_save", "benchmark_compare"))
    if not wanted or getattr(config.option, "numprocesses", None):
        return None
    return request.getfixturevalue("benchmark")


def _feed_benchmark(benchmark, result: CaseResult, samples: list[float]) -> None:
    """Give pytest-benchmark this case's device-time samples (seconds), not its own timing.

    pytest-benchmark has no public way to hand it measured samples; `_make_stats` is the call
    its own fixture uses. Without it (another version), the case is left out of its JSON.
    """
    make_stats = getattr(benchmark, "_make_stats", None)
    if make_stats is None:
        return
    stats = make_stats(1)
    for sample in samples:
        stats.update(sample / 1e6)
    benchmark.extra_info.update({"npuperf_method": result.method, "npuperf_device": result.device,
                                 "npuperf_status": result.status, "unit": "device time"})


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo):
    outcome = yield
    report = outcome.get_result()
    ref = _case_of(item)
    if ref is None:
        return
    replay = replay_session(item.config)
    result = item.stash.get(_RESULT, None)
    if report.when == "call" and result is not None:
        report.user_properties.append((RESULT_PROPERTY, result.to_dict()))
    elif report.when == "setup" and report.skipped:
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else "skipped"
        skipped = replay.skipped_result(ref, item.nodeid, str(reason).removeprefix("Skipped: "))
        report.user_properties.append((RESULT_PROPERTY, skipped.to_dict()))


@pytest.hookimpl(tryfirst=True)
def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    comm = existing_comm(session.config)
    replay = existing_session(session.config)
    joint = replay is not None and replay.records_run
    if comm is not None and joint:
        comm.run_id = replay.run_id  # one run: its hcom rows name the run the history keeps
    if comm is not None and comm.finish():
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
    if comm is not None:  # collective cases join the kernel run's history, or make their own
        if joint:
            replay.extra_history_cases += comm.history_cases()
        elif comm.record_history(int(session.exitstatus)):
            session.exitstatus = pytest.ExitCode.TESTS_FAILED
    if replay is None:
        return
    replay.close_runner()
    if not replay.finish(interrupted=exitstatus == pytest.ExitCode.INTERRUPTED,
                         exitstatus=int(exitstatus)):
        # Measured, but nothing was saved (or Ctrl-C during the backfill).
        session.exitstatus = (pytest.ExitCode.INTERRUPTED if replay.interrupted
                              else pytest.ExitCode.TESTS_FAILED)


def pytest_terminal_summary(terminalreporter, exitstatus: int, config: pytest.Config) -> None:
    comm = existing_comm(config)
    if comm is not None and comm.env.launched and comm.env.is_root and (comm.results or comm.notes):
        terminalreporter.section("npuperf collectives")
        for line in comm.terminal_lines():
            terminalreporter.write_line(line)
    replay = existing_session(config)
    if replay is None or not replay.active or replay.is_worker:
        return
    if replay.outcome is None and not replay.notes:
        return  # no kernel case ran (e.g. only collectives were selected)
    from .report.terminal import terminal_lines

    terminalreporter.section("npuperf")
    for note in replay.notes:
        terminalreporter.write_line(note)
    if replay.outcome is not None:
        for line in terminal_lines(replay.outcome, replay.results, replay.session_info(),
                                   replay.paths, baseline=replay.keeper.label,
                                   history=replay.history_line()):
            terminalreporter.write_line(line)


def pytest_unconfigure(config: pytest.Config) -> None:
    comm = existing_comm(config)
    if comm is not None:
        comm.release()
    replay = existing_session(config)
    if replay is not None:
        replay.release()
