"""Report file names (docs/format.md §8): one stamp ties the files of a run together."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

STAMP_RE = re.compile(r"^\d{8}_\d{6}(_\d+)?$")


def check_stamp(stamp: str) -> str:
    # The stamp becomes part of file names: refuse anything that could leave the directory.
    if not STAMP_RE.match(stamp):
        raise ValueError(f"invalid report stamp {stamp!r}: expected YYYYmmdd_HHMMSS")
    return stamp


def markdown_name(stamp: str) -> str:
    return f"replay_report_{check_stamp(stamp)}.md"


def gap_csv_name(stamp: str) -> str:
    return f"duration_gap_{check_stamp(stamp)}.csv"


def run_json_name(stamp: str) -> str:
    return f"run_{check_stamp(stamp)}.json"


def html_name(stamp: str) -> str:
    return f"report_{check_stamp(stamp)}.html"


@dataclass(frozen=True)
class ReportPaths:
    markdown: Path
    gap_csv: Path
    run_json: Path
    html: Path | None = None  # report_<stamp>.html, the run on one page with its figures

    def all(self) -> tuple[Path, ...]:
        return tuple(p for p in (self.markdown, self.gap_csv, self.run_json, self.html) if p)


def report_paths(reports_dir: Path, stamp: str) -> ReportPaths:
    return ReportPaths(reports_dir / markdown_name(stamp), reports_dir / gap_csv_name(stamp),
                       reports_dir / run_json_name(stamp), reports_dir / html_name(stamp))


def comm_report_paths(reports_dir: Path, stamp: str) -> tuple[Path, Path]:
    """A collective run's reports: its markdown report and its run JSON."""
    stamp = check_stamp(stamp)
    return reports_dir / f"comm_report_{stamp}.md", reports_dir / f"comm_run_{stamp}.json"


def free_stamp(reports_dir: Path, stamp: str,
               paths: Callable[[Path, str], Iterable[Path]] = lambda d, s: report_paths(d, s).all()
               ) -> str:
    """`stamp`, or `stamp_2`, `stamp_3`...: two runs finishing in the same second must not
    overwrite each other's reports (`paths`: a run's report files, by stamp)."""
    check_stamp(stamp)
    candidate, n = stamp, 1
    while any(p.exists() for p in paths(reports_dir, candidate)):
        n += 1
        candidate = f"{stamp}_{n}"
    return candidate
