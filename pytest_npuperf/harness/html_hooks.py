"""pytest-html hooks, registered only when pytest-html is installed.

Each replay case's row shows its statistics and a small plot of its samples; a summary of
the run heads the report. The report modules are imported only when pytest-html asks for
them (an html report is being written).
"""

from __future__ import annotations

import pytest

from .roles import existing_owner
from .route import carries, kept, unpack


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    # The case's plot is drawn only for a report being written (--html): a run without one
    # would pay for an SVG per case that nothing shows.
    if not getattr(item.config.option, "htmlpath", None):
        return
    if report.when not in ("call", "setup") or not carries(report):
        return
    result = kept(item)  # the object itself, in the measuring process
    if result is None:
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
    from ..report.html import html_row_cells, no_value_result_cell

    result = unpack(report)
    if cells and "col-result" in str(cells[0]) and report.skipped and result is not None \
            and result.without_value:
        cells[0] = no_value_result_cell()  # pytest-html knows no such outcome: it counts a skip
    cells.extend(html_row_cells(result))


@pytest.hookimpl(optionalhook=True)
def pytest_html_results_summary(prefix, summary, postfix, session) -> None:
    run_owner = existing_owner(session.config)
    summary_html = run_owner.html_summary() if run_owner is not None and run_owner.active \
        else None
    if summary_html is not None:
        prefix.append(summary_html)
