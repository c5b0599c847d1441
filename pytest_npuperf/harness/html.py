"""pytest-html hooks, registered only when pytest-html is installed.

Each replay case's row shows its statistics and a small plot of its samples; a summary of
the session heads the report. The report modules are imported only when pytest-html asks
for them (an html report is being written).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from .stash import RESULT_PROPERTY, existing_session

if TYPE_CHECKING:
    from ..measure.result import CaseResult


def _result(report) -> CaseResult | None:
    for name, value in getattr(report, "user_properties", ()):
        if name == RESULT_PROPERTY and isinstance(value, dict):
            from ..measure.result import CaseResult

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

    from ..report.html import html_extra

    extras = list(getattr(report, "extras", []) or [])
    extras.append(pytest_html.extras.html(html_extra(result)))
    report.extras = extras


@pytest.hookimpl(optionalhook=True)
def pytest_html_results_table_header(cells) -> None:
    from ..report.html import html_header_cells

    cells.extend(html_header_cells())


@pytest.hookimpl(optionalhook=True)
def pytest_html_results_table_row(report, cells) -> None:
    from ..report.html import html_row_cells

    cells.extend(html_row_cells(_result(report)))


@pytest.hookimpl(optionalhook=True)
def pytest_html_results_summary(prefix, summary, postfix, session) -> None:
    replay = existing_session(session.config)
    if replay is not None and replay.active and not replay.is_worker \
            and replay.outcome is not None:
        from ..report.html import html_summary

        prefix.append(html_summary(replay.outcome, replay.results, replay.session_info(),
                                   replay.paths, figures=replay.figures,
                                   baseline=replay.keeper.label))
