"""`npuperf coverage`, `npuperf grid --fill` and `npuperf provenance`: how good a database is
for the simulator, what to measure next, and how it was collected (docs/coverage.md)."""

from __future__ import annotations

import argparse
from pathlib import Path

from ..db.errors import NpuperfError
from .args import add_db, positive_int

EXIT_OK, EXIT_PROBLEMS = 0, 1


def _percent(text: str) -> float:
    try:
        value = float(text.rstrip("%").strip())
    except ValueError:
        value = -1.0
    if not 0 < value < float("inf"):
        raise argparse.ArgumentTypeError(f"expected a percentage > 0, e.g. 15.6, got {text!r}")
    return value / 100


def cmd_coverage(args: argparse.Namespace) -> int:
    from ..coverage.report import build_report, write_outputs

    database = args.database or args.db
    if database is None:
        raise NpuperfError("give the database: npuperf coverage DIR (or --db DIR)")
    kernels = [k.strip() for k in args.kernels.split(",") if k.strip()] if args.kernels else None
    report = build_report(database, standard=args.standard, profiles=args.trace or None,
                          loo=not args.no_loo, kernel_types=kernels,
                          workload_only=args.workload_only, theory=args.include_theory,
                          show_progress=not args.quiet)
    print(report.render())
    for path in write_outputs(report, json_path=args.json, markdown=args.markdown,
                              html_path=args.html):
        print(f"written: {path}")
    failures = report.failures(args.max_p90)
    for failure in failures:
        print(f"FAIL {failure}")
    return EXIT_PROBLEMS if failures else EXIT_OK


def cmd_fill(args: argparse.Namespace) -> int:
    from ..coverage.fill import run_fill

    print(run_fill(args.db, args.fill, rows=args.rows, max_hbm_gb=args.max_hbm_gb,
                   dry_run=args.dry_run).render())
    return EXIT_OK


def cmd_provenance(args: argparse.Namespace) -> int:
    from ..coverage.report import provenance_lines
    from ..db.provenance import record_reuse

    database = args.database or args.db
    if database is None:
        raise NpuperfError("give the database: npuperf provenance DIR (or --db DIR)")
    if args.reused:
        if not args.why:
            raise NpuperfError("--reused needs --why (what the rows stand in for, and why)")
        print(record_reuse(database, args.reused, from_device=args.from_device,
                           from_version=args.from_version, rows=args.rows, why=args.why))
    for line in provenance_lines(Path(database)):
        print(line)
    return EXIT_OK


def add_coverage_commands(sub) -> None:
    coverage = sub.add_parser(
        "coverage", help="how good a database is for the simulator: density against the "
                         "standard, leave-one-out interpolation error, coverage of a model",
        description="Read a database as the simulator does (msmodeling's interpolating data "
                    "source: exact rows, then 1-D linear, then 2-D/3-D Delaunay-linear "
                    "interpolation inside a bucket, never beyond the measured points). Print "
                    "one line per kernel type: the values of each axis against msmodeling's "
                    "density standard (--standard, its axis_collection_density.yaml), the "
                    "leave-one-out error of its interpolation (median, p90, rows above 50 %%); "
                    "with --trace, each kernel call of a model's profile classed exact / "
                    "interpolable / outside / no table with its share of the model's time; "
                    "and the rows to measure next (npuperf grid --fill reads them from "
                    "--json). Exit status 1 when the density is below the standard (or the "
                    "p90 above --max-p90).")
    coverage.add_argument("database", nargs="?", type=Path, metavar="DB",
                          help="the database (version) directory")
    add_db(coverage, help="the database (version) directory (or give it as DB)")
    coverage.add_argument("--standard", type=Path, metavar="FILE",
                          help="msmodeling's density standard (axis_collection_density.yaml, "
                               "as it ships)")
    coverage.add_argument("--trace", type=Path, action="append", metavar="T",
                          help="a model's profile (what npuperf parse reads: kernel_details.csv, "
                               "a torch.profiler or torch_npu trace, a directory of them); "
                               "repeatable")
    coverage.add_argument("--kernels", metavar="K1,K2", help="only these kernel types")
    coverage.add_argument("--json", type=Path, metavar="FILE",
                          help="write the report as JSON (what npuperf grid --fill reads)")
    coverage.add_argument("--markdown", type=Path, metavar="FILE", help="write it as markdown")
    coverage.add_argument("--html", type=Path, metavar="FILE", help="write it as html")
    coverage.add_argument("--max-p90", type=_percent, metavar="PCT",
                          help="also fail when a kernel type's leave-one-out p90 is above PCT "
                               "percent (AIConfigurator reports 15.6 for its GEMMs)")
    coverage.add_argument("--workload-only", action="store_true",
                          help="judge only the workload axes (M, tokens, sequence, batch); the "
                               "structural ones (N, K, heads, head dim: model widths) are "
                               "listed, not judged")
    coverage.add_argument("--include-theory", action="store_true",
                          help="count rows without a latency in the density too: the plan of "
                               "a grid before it is measured (the standard itself counts only "
                               "measured rows)")
    coverage.add_argument("--no-loo", action="store_true",
                          help="skip the leave-one-out error (and its proposals)")
    coverage.add_argument("--quiet", action="store_true", help="no progress lines")
    coverage.set_defaults(func=cmd_coverage)

    provenance = sub.add_parser(
        "provenance", help="how a database was collected; --reused records rows from "
                           "another device or version",
        description="Show what collection_meta.yaml records (grid, fill rounds, parses, with "
                    "device, stack and standard) and measured_stack.json; with --reused, "
                    "record that a table's rows came from another device or version, and why.")
    provenance.add_argument("database", nargs="?", type=Path, metavar="DB",
                            help="the database (version) directory")
    add_db(provenance, help="the database (version) directory (or give it as DB)")
    provenance.add_argument("--reused", metavar="KERNEL_TYPE",
                            help="the kernel table whose rows came from elsewhere")
    provenance.add_argument("--from-device", metavar="D", default="",
                            help="the device they were measured on")
    provenance.add_argument("--from-version", metavar="V", default="",
                            help="the version directory they come from")
    provenance.add_argument("--rows", type=positive_int, metavar="N",
                            help="how many rows (default: all of the table)")
    provenance.add_argument("--why", metavar="TEXT", help="why they stand in for this one")
    provenance.set_defaults(func=cmd_provenance)


def add_fill_options(grid: argparse.ArgumentParser) -> None:
    grid.add_argument("--fill", type=Path, metavar="REPORT",
                      help="instead of the shape grid: add the rows a coverage report "
                           "(npuperf coverage --json) proposes, density violations first, "
                           "then the intervals with the largest leave-one-out error, within "
                           "--max-hbm-gb and --rows (default: a fifth of the measured rows of "
                           "the tables it adds to); recorded in collection_meta.yaml")
