"""Database rows (or grid points) as pytest cases: parametrization, which items are replay
cases, and the case id in a node id.

Light on purpose: the plugin's hooks ask these in every run; the database is read only once a
test asks for `npuperf_case`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from .roles import context, existing_context, owner
from .route import kept, pack

if TYPE_CHECKING:
    from ..replay.cases import CaseRef

PARAM = "npuperf_case"
def parametrize(metafunc: pytest.Metafunc) -> None:
    """One case per row of the run's database (a process that measures collects them)."""
    config = metafunc.config
    run = context(config)
    run_owner = owner(config)
    if run_owner is not None:
        run_owner.active = True
    try:
        refs = run.case_refs()
    except pytest.UsageError as exc:
        # Raised from pytest_collection_finish: pytest prints a UsageError as one line
        # there, while from here it would be a collection traceback.
        run.collection_error = str(exc)
        if run_owner is not None:
            run_owner.active = False
        metafunc.parametrize(PARAM, [])
        return
    from ..replay.cases import marker_name

    marks: dict[str, tuple] = {}
    params = []
    for ref in refs:
        if ref.kernel_type not in marks:
            name = marker_name(ref.kernel_type)
            config.addinivalue_line("markers", f"{name}: replay cases of {ref.kernel_type}")
            mark = getattr(pytest.mark, name)
            skip = pytest.mark.skip(reason=f"no replay for {ref.kernel_type} yet; the row is kept")
            marks[ref.kernel_type] = (mark,) if ref.replayable else (mark, skip)
        # A case standing for an unreadable file errors (not skips) with the file's problem.
        case_marks = marks[ref.kernel_type][:1] if ref.problem else marks[ref.kernel_type]
        params.append(pytest.param(ref, id=ref.case_id, marks=case_marks))
    metafunc.parametrize(PARAM, params)


def case_of(item: pytest.Item) -> CaseRef | None:
    """The database row an item replays; None for any other test."""
    callspec = getattr(item, "callspec", None)
    value = callspec.params.get(PARAM) if callspec else None
    if value is None or existing_context(item.config) is None:
        return None  # not a replay case (none was parametrized in this process)
    from ..replay.cases import CaseRef

    return value if isinstance(value, CaseRef) else None


def kernel_cases_left_out(config: pytest.Config, items: list[pytest.Item], world: int) -> None:
    """Under torchrun, kernel replays are left out: every rank would replay and write them."""
    if world < 2:
        return
    kernel = [item for item in items if case_of(item)]
    if kernel:
        config.hook.pytest_deselected(items=kernel)
        items[:] = [item for item in items if not case_of(item)]


def resumed_left_out(config: pytest.Config, items: list[pytest.Item]) -> None:
    """--npuperf-resume: the cases the resumed run's journal holds are not measured again."""
    if existing_context(config) is None or not context(config).settings.resume:
        return
    run_owner = owner(config)
    if run_owner is not None:
        done = run_owner.resume()
    else:  # an xdist worker: the controller keeps the results, the worker only skips them
        from ..db.errors import NpuperfError
        from .journal import load_resume

        run = context(config)
        try:
            _, _, results, _ = load_resume(
                run.settings.out, run.settings.resume, source=str(run.destination.source),
                device=run.backend.database_device(), history=run.settings.history)
        except NpuperfError as exc:
            raise pytest.UsageError(f"npuperf: {exc}") from None
        done = {r.case_id for r in results}
    measured = [item for item in items if (ref := case_of(item)) and ref.case_id in done]
    if measured:
        config.hook.pytest_deselected(items=measured)
        items[:] = [item for item in items if item not in set(measured)]


def check_and_lock(session: pytest.Session) -> None:
    """The run's collection is complete: a collection problem is one usage-error line; the
    owner checks and locks what it will write before the first case."""
    run = existing_context(session.config)
    if run is None:
        return
    if run.collection_error:
        raise pytest.UsageError(run.collection_error)
    run_owner = owner(session.config)
    if run_owner is None or not run_owner.active:
        return
    selected = sum(1 for item in session.items if case_of(item))
    if selected or run_owner.has_resumed:
        run_owner.selected = selected
        run_owner.prepare_writes()


def report_case(item: pytest.Item, report: pytest.TestReport) -> None:
    """A replay case's report carries its result (route.py): measured (call), or skipped
    before it ran."""
    ref = case_of(item)
    if ref is None:
        return
    result = kept(item) if report.when == "call" else None
    if report.when == "setup" and report.skipped:  # a skip mark, -m filters: it never ran
        from ..measure.result import STATUS_SKIPPED
        from ..replay.cases import result_for

        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else "skipped"
        result = result_for(ref, item.nodeid, STATUS_SKIPPED,
                            str(reason).removeprefix("Skipped: "))
    if result is not None:
        pack(item, report, result)
