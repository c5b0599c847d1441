"""`npuperf runs`, `history`, `trend` and `compare`: the run history that every `pytest bench`
session records, read from wherever the command is run (found the way pytest finds its
rootdir unless --history names it)."""

from __future__ import annotations

import argparse
from pathlib import Path

from ..db.errors import NpuperfError
from .args import add_threshold, fraction, positive_int

EXIT_OK, EXIT_PROBLEMS = 0, 1
_WHERE = ("the history file (default: the one pytest bench records into: "
          "<rootdir>/npuperf-out/history.sqlite, or npuperf_history / npuperf_out of the "
          "rootdir's pytest configuration, the rootdir found from the current directory as "
          "pytest finds it)")


def history_file(args: argparse.Namespace) -> Path:
    """--history, else the discovered one; an error that says where it looked when absent."""
    if args.history is not None:
        return args.history
    from ..history.where import find_history

    found = find_history()
    if not found.path.is_file():
        raise NpuperfError(f"no run history at {found.describe()}: run pytest bench first, or "
                           f"pass --history FILE")
    return found.path


def _when(args: argparse.Namespace) -> tuple[float | None, float | None]:
    from ..history.views import parse_when

    return (parse_when(args.since) if args.since else None,
            parse_when(args.until) if args.until else None)


def cmd_runs(args: argparse.Namespace) -> int:
    from ..history.store import HistoryStore
    from ..history.views import NoMatch, render_runs, runs_csv

    since, until = _when(args)
    with HistoryStore(history_file(args), readonly=True) as store:
        found = store.find_runs(device=args.device, kernel=args.kernel, since=since,
                                until=until)
        path = store.path
    if not found:
        raise NoMatch(f"{path}: no run matches")
    found = found[-args.last:] if args.last else found
    print(runs_csv(found) if args.csv else render_runs(found, args.kernel), end="" if args.csv
          else "\n")
    return EXIT_OK


def _trend(args: argparse.Namespace, last: int | None):
    from ..history.store import HistoryStore
    from ..history.views import trend

    since, until = _when(args)
    with HistoryStore(history_file(args), readonly=True) as store:
        records, runs = trend(store, kernel=args.kernel, signature=args.signature, last=last,
                              device=args.device, since=since, until=until)
        return records, runs, store.path


def cmd_history(args: argparse.Namespace) -> int:
    from ..history.views import render_summary, render_trend, trend_csv

    records, runs, _ = _trend(args, args.last)
    if args.csv:
        print(trend_csv(records, runs), end="")
    elif args.kernel or args.signature or args.every_run:
        print(render_trend(records, runs))
    else:
        print(render_summary(records, runs))
    return EXIT_OK


def cmd_trend(args: argparse.Namespace) -> int:
    from ..db.table import write_text
    from ..report.trend_page import render_trend_page

    records, runs, path = _trend(args, args.last)
    filters = ", ".join(f"{k} {v}" for k, v in (
        ("kernel", args.kernel), ("signature", args.signature), ("device", args.device),
        ("since", args.since), ("until", args.until),
        ("newest runs per case", args.last if args.last != 60 else None)) if v)
    page = render_trend_page(records, runs, source=str(path), filters=filters,
                             max_cases=args.max_cases)
    out = args.out or Path(path).parent / "trend.html"
    _check_page_target(out, Path(path))
    out.parent.mkdir(parents=True, exist_ok=True)
    write_text(out, page, purpose="npuperf trend")
    cases = len({(r.kind, r.key) for r in records})
    print(f"trend page written: {out} ({cases} case(s) over "
          f"{len({r.run_id for r in records})} run(s))")
    return EXIT_OK


def _check_page_target(out: Path, history: Path) -> None:
    """--out never names the history it reads, nor any file that is not a page: it would be
    replaced by the page (the history lost)."""
    if not out.exists():
        return
    if out.is_dir():
        raise NpuperfError(f"--out {out}: a directory; name the page file (e.g. {out / 'trend.html'})")
    if out.resolve() == history.resolve():
        raise NpuperfError(f"--out {out}: the history this page is read from; name another file "
                           f"(e.g. {history.parent / 'trend.html'})")
    try:
        with open(out, "rb") as handle:
            head = handle.read(64).lstrip().lower()
    except OSError:
        return  # the write says what is wrong with it
    if head and not head.startswith((b"<!doctype html", b"<html")):
        raise NpuperfError(f"--out {out}: an existing file that is not an html page; refusing to "
                           f"replace it (remove it first, or name another file)")


def cmd_compare(args: argparse.Namespace) -> int:
    from ..history.views import compare_runs, comparison_csv, render_comparison

    history = args.history
    if history is None:
        from ..history.where import find_history

        history = find_history().path
    baseline, new_run, items = compare_runs(args.base, args.new, history=history,
                                            threshold=args.threshold)
    if args.csv:
        print(comparison_csv(items), end="")
    else:
        print(render_comparison(baseline, new_run, items, show_all=args.all))
    return EXIT_PROBLEMS if any(i.comparison.verdict == "SLOWER" for i in items) else EXIT_OK


def _filters(parser: argparse.ArgumentParser, *, signature: bool = True) -> None:
    parser.add_argument("--history", type=Path, metavar="FILE", help=_WHERE)
    parser.add_argument("--kernel", metavar="K", help="only this kernel type (exact), e.g. "
                                                      "MatMulV2")
    if signature:
        parser.add_argument("--signature", metavar="S",
                            help="only cases whose signature hash is S or whose case id "
                                 "contains S (e.g. 16x64x32, or the 8-hex hash of a case id)")
    parser.add_argument("--device", metavar="D", help="only runs on this database device")
    parser.add_argument("--since", metavar="WHEN",
                        help="only runs started at or after WHEN: a date or time "
                             "(2026-11-20, 2026-11-20T08:00, local time) or an age (7d, 12h)")
    parser.add_argument("--until", metavar="WHEN", help="only runs started before WHEN")


def add_history_commands(sub) -> None:
    runs = sub.add_parser(
        "runs", help="list the recorded runs: id, time, device, commit, cases, outcome",
        description="List the runs of the run history (oldest first): run id (what compare, "
                    "--npuperf-baseline and --npuperf-resume take), start time, database "
                    "device, git commit (+dirty), cases (of --kernel when given), whether the "
                    "run passed, failed or stopped early (partial), and its software stack. "
                    "Exit status 1 when no run matches.")
    _filters(runs, signature=False)
    runs.add_argument("--last", type=positive_int, metavar="N", help="only the newest N runs")
    runs.add_argument("--csv", action="store_true", help="print CSV instead of a table")
    runs.set_defaults(func=cmd_runs)

    history = sub.add_parser(
        "history", help="a case's measurements run after run, from the run history",
        description="Print the trend of the matching cases from the run history that every "
                    "pytest bench session records (--npuperf-history). Without --kernel or "
                    "--signature: one line per case (its newest value, the change from the run "
                    "before, its best and worst value over the runs shown, its status and "
                    "verdict); with them (or --every-run): per case one line per run, oldest "
                    "first, with its value, minimum, samples, change, status and verdict "
                    "against that run's baseline. Durations are printed in the unit that reads "
                    "best (ns, us, ms, s). Exit status 1 when no case matches.")
    _filters(history)
    history.add_argument("--last", type=positive_int, default=10, metavar="N",
                         help="the newest N runs of each case (default: 10)")
    history.add_argument("--every-run", action="store_true",
                         help="one line per case and run even without --kernel / --signature")
    history.add_argument("--csv", action="store_true",
                         help="print CSV (one row per case and run, values in us) instead of "
                              "a table")
    history.set_defaults(func=cmd_history)

    trend = sub.add_parser(
        "trend", help="write the trend page: every case's value over the runs, one html file",
        description="Write one self-contained html page (inline SVG, no script, nothing "
                    "fetched) that a nightly job can publish: per kernel type and case, the "
                    "value of every run on a line through its trusted measurements, noisy and "
                    "suspect ones as rings off the line, runs judged SLOWER than their "
                    "baseline in red (FASTER in green); hovering a point shows its run, time, "
                    "git commit, software stack, value and verdict. Regressions are listed "
                    "first.",
        epilog="example (nightly): pytest bench --npuperf-baseline last-good; npuperf trend "
               "--out public/trend.html")
    _filters(trend)
    trend.add_argument("--out", type=Path, metavar="FILE",
                       help="the page to write (default: trend.html beside the history; its "
                            "directory is created)")
    trend.add_argument("--last", type=positive_int, default=60, metavar="N",
                       help="the newest N runs of each case (default: 60)")
    trend.add_argument("--max-cases", type=positive_int, default=60, metavar="N",
                       help="charts per kernel type, regressions and the largest changes "
                            "first (default: 60)")
    trend.set_defaults(func=cmd_trend)

    compare = sub.add_parser(
        "compare", help="compare a run with a baseline: SLOWER / FASTER / SAME / UNCERTAIN",
        description="Compare every case of NEW with BASE. SLOWER / FASTER: the median moved "
                    "by at least --threshold and by more than 3x the case's session-to-session "
                    "spread over its recent good runs in the history (none known, e.g. two run "
                    "JSONs without a history: UNCERTAIN), a two-sided Mann-Whitney U test on "
                    "the two runs' samples finds them different (p < 0.01), and neither the "
                    "host's probes nor the median move of the run's other cases account for "
                    "it; SAME: within the threshold and both medians known to better than it; "
                    "UNCERTAIN: otherwise, with the reason; NEW: not in BASE. Regressions and "
                    "improvements are listed worst first. Exit status 1 when any case is "
                    "SLOWER.")
    compare.add_argument("base", metavar="BASE",
                         help="a run id (or unique prefix) in --history (npuperf runs lists "
                              "them), last (each case's newest measurement before NEW), "
                              "last-good (the same in passed runs), a history file (its newest "
                              "measurements), or a run_<stamp>.json")
    compare.add_argument("new", metavar="NEW",
                         help="a run id in --history, last (its newest run), last-good, a "
                              "history file (its newest run) or a run_<stamp>.json")
    compare.add_argument("--history", type=Path, metavar="FILE",
                         help="where run ids and last are looked up; " + _WHERE[4:])
    add_threshold(compare, type=fraction, default=0.05)
    compare.add_argument("--all", action="store_true",
                         help="list SAME and NEW cases too (default: SLOWER, FASTER, UNCERTAIN)")
    compare.add_argument("--csv", action="store_true", help="print CSV, one row per case")
    compare.set_defaults(func=cmd_compare)
