"""The end of a pytest session with replay and collective cases: each role ends its part, the
collective cases join the kernel run's history when both ran, the terminal says what came of
it, and what the roles hold is released."""

from __future__ import annotations

import pytest

from . import parametrize
from .roles import existing_comm, existing_context, existing_measurer, existing_owner


def after_collection(session: pytest.Session) -> None:
    comm = existing_comm(session.config)
    if comm is not None:
        comm.check_selection(session.items)
    parametrize.check_and_lock(session)


def worker_lost(session: pytest.Session, exc: OSError) -> None:
    """xdist sends a worker its first cases as soon as it reports its collection; a worker
    killed just then (out of memory, a kill at start-up) makes that send fail, and xdist's
    loop ends with an OSError of execnet's. A replay run ends with one line saying so (the
    finish still writes what was measured); any other error is left as it is."""
    if existing_owner(session.config) is None or "cannot send" not in str(exc):
        return
    pytest.exit(f"npuperf: an xdist worker died as its first cases were sent to it ({exc}): "
                f"nothing ran on it; run again (with fewer workers if it ran out of memory)",
                returncode=pytest.ExitCode.INTERNAL_ERROR)


def finish_session(session: pytest.Session, exitstatus: int) -> None:
    config = session.config
    comm = existing_comm(config)
    run_owner = existing_owner(config)
    joint = run_owner is not None and run_owner.records_run
    if comm is not None:
        if joint:  # one run: its hcom rows name the run the history keeps
            comm.join_run(run_owner.context.run_id)
        if comm.finish(record=not joint, exit_status=int(session.exitstatus)):
            session.exitstatus = pytest.ExitCode.TESTS_FAILED
        if joint:  # collective cases join the kernel run's history
            run_owner.extra_results += comm.root_results()
    measurer = existing_measurer(config)
    if measurer is not None:
        measurer.close()
    if run_owner is None:
        return
    if not run_owner.finish(interrupted=exitstatus == pytest.ExitCode.INTERRUPTED,
                            exitstatus=int(exitstatus)):
        # Measured, but nothing was saved (or Ctrl-C during the write-back).
        session.exitstatus = (pytest.ExitCode.INTERRUPTED if run_owner.interrupted
                              else pytest.ExitCode.TESTS_FAILED)


def terminal_summary(terminalreporter, config: pytest.Config) -> None:
    comm = existing_comm(config)
    if comm is not None:
        _section(terminalreporter, "npuperf collectives", comm.summary_lines())
    run_owner = existing_owner(config)
    if run_owner is not None and run_owner.active:
        _section(terminalreporter, "npuperf results", run_owner.results_lines())
        _section(terminalreporter, "npuperf", run_owner.summary_lines())


def _section(terminalreporter, title: str, lines: list[str]) -> None:
    if lines:
        terminalreporter.section(title)
        for line in lines:
            terminalreporter.write_line(line)


def release(config: pytest.Config) -> None:
    comm = existing_comm(config)
    if comm is not None:
        comm.release()
    run_owner = existing_owner(config)
    if run_owner is not None:
        run_owner.release()
    context = existing_context(config)
    if context is not None:
        context.release()
