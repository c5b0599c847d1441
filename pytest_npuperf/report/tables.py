"""The reports' tables: padded markdown, readable as plain text and as rendered markdown, and
HTML with every cell escaped."""

from __future__ import annotations

from collections.abc import Sequence
from html import escape

EMPTY = "_None_"
MAX_CELL = 160  # long error messages would otherwise make every row of a table unreadable


def md_cell(value: object, limit: int = MAX_CELL) -> str:
    """One cell's text: on one line, pipes escaped, cut to `limit` characters."""
    text = " ".join(str(value).split())
    if len(text) > limit:
        text = text[:limit - 3] + "..."
    return text.replace("|", "\\|")


def md_table(header: Sequence[str], rows: Sequence[Sequence[object]],
             right: Sequence[int] = (), whole: Sequence[int] = ()) -> str:
    """A markdown table; columns whose index is in `right` are right-aligned (numbers), those
    in `whole` never cut (a status or an error says all it says; renderers wrap it)."""
    if not rows:
        return EMPTY
    cells = [[md_cell(h) for h in header]] + [
        [md_cell(v, limit=1 << 30 if i in whole else MAX_CELL) for i, v in enumerate(row)]
        for row in rows]
    widths = [max(3, *(len(row[i]) for row in cells)) for i in range(len(header))]

    def line(row: list[str]) -> str:
        padded = (c.rjust(w) if i in right else c.ljust(w)
                  for i, (c, w) in enumerate(zip(row, widths)))
        return "| " + " | ".join(padded) + " |"

    rule = "| " + " | ".join(("-" * (w - 1) + ":") if i in right else "-" * w
                             for i, w in enumerate(widths)) + " |"
    return "\n".join([line(cells[0]), rule, *(line(row) for row in cells[1:])])


def html_cell(value: object, numeric: bool = False) -> str:
    text = escape("-" if value is None or value == "" else str(value))
    return f'<td class="num">{text}</td>' if numeric else f"<td>{text}</td>"


def html_table(header: list[str], rows: list[list[object]], numeric: tuple[int, ...] = ()) -> str:
    """An HTML table; columns whose index is in `numeric` are right-aligned (class `num`)."""
    head = "".join(f"<th>{escape(h)}</th>" for h in header)
    body = "".join("<tr>" + "".join(html_cell(v, i in numeric) for i, v in enumerate(row))
                   + "</tr>" for row in rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"
