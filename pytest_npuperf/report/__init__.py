"""Reports of a run: markdown, gap CSV, run JSON, terminal summary, HTML extras, figures, the
trend page and the collective sessions' reports.

Everything here reads what a run produced (a WriteOutcome, the CaseResults, the SessionInfo,
the history's verdicts, the collective results); nothing here measures or decides. Layering:
imports replay (the outcome), history, comm, kernels, measure and db, never the run or the
harness above it.
"""

from .gaps import GAP_COLUMNS, gap_rows_csv
from .html import html_cells, html_extra, html_header_cells, html_row_cells, html_summary
from .markdown import render_markdown
from .names import ReportPaths
from .plots import samples_svg
from .runjson import dumps_run_json, run_json
from .terminal import terminal_lines
from .writer import write_reports

__all__ = [
    "GAP_COLUMNS", "ReportPaths", "dumps_run_json", "gap_rows_csv", "html_cells", "html_extra",
    "html_header_cells", "html_row_cells", "html_summary", "render_markdown", "run_json",
    "samples_svg", "terminal_lines", "write_reports",
]
