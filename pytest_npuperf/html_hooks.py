"""pytest-html hooks, registered only when pytest-html is active.

Each replay case's row shows its statistics and a small plot of its samples; a summary of
the session heads the report.
"""

from __future__ import annotations

import pytest

from .measure.result import CaseResult
from .report.html import html_extra, html_header_cells, html_row_cells, html_summary
from .session import RESULT_PROPERTY, replay_session


def _result(report) -> CaseResult | None:
    for name, value in getattr(report, "user_properties", ()):
        if name == RESULT_PROPERTY and isinstance(value, dict):
            return CaseResult.from_dict(value)
    return None


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    result = _result(report)
    if result is None or report.when not in ("call", "setup"):
        return
    import pytest_html

    extras = list(getattr(report, "extras", []) or [])
    extras.append(pytest_html.extras.html(html_extra(result)))
    report.extras = extras


@pytest.hookimpl(optionalhook=True)
def pytest_html_results_table_header(cells) -> None:
    cells.extend(html_header_cells())


@pytest.hookimpl(optionalhook=True)
def pytest_html_results_table_row(report, cells) -> None:
    cells.extend(html_row_cells(_result(report)))


@pytest.hookimpl(optionalhook=True)
def pytest_html_results_summary(prefix, summary, postfix, session) -> None:
    replay = replay_session(session.config)
    if replay.active and not replay.is_worker and replay.outcome is not None:
        prefix.append(html_summary(replay.outcome, replay.results, replay.session_info(),
                                   replay.paths))
