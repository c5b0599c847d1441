"""The verbs on a database as a whole: `npuperf validate`, `grid` (new rows; `--fill` from
cli/coverage.py), `kernels` (the kernel types and their bindings) and `merge` (databases and
histories of several hosts into one)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from ..db.errors import NpuperfError
from .args import EXIT_OK, EXIT_PROBLEMS, add_db
from .coverage import add_fill_options, cmd_fill


def cmd_validate(args: argparse.Namespace) -> int:
    from ..db.validate import validate_path

    paths = [*args.paths, *([args.db] if args.db is not None else [])]
    if not paths:
        raise NpuperfError("give the database to check: --db DIR (or one or more paths)")
    reports = [report for path in paths for report in validate_path(path, consumer=args.consumer)]
    failed = [r for r in reports if not r.ok]
    for report in reports:
        if args.quiet and report.ok and not report.warnings:
            continue
        print(report.render())
    problems = sum(len(r.problems) for r in reports)
    warnings = sum(len(r.warnings) for r in reports)
    print(f"{len(reports)} file(s) checked: {len(reports) - len(failed)} ok, {len(failed)} with "
          f"problems ({problems} in all)" + (
              f"; {warnings} warning(s) about what the simulator cannot read (--consumer makes "
              f"them problems)" if warnings else ""))
    return EXIT_PROBLEMS if failed else EXIT_OK


def cmd_grid(args: argparse.Namespace) -> int:
    from ..grid import run_grid
    from ..kernels.extensions import load_entry_points

    load_entry_points()  # kernel types packages add have replays too
    if args.fill is not None:
        return cmd_fill(args)
    summary = run_grid(args.db, args.kernels, config_path=args.config,
                       target_models=args.target_models, model_file=args.model_file,
                       rows=args.rows, seed=args.seed, max_hbm_gb=args.max_hbm_gb,
                       dry_run=args.dry_run, show_progress=not args.quiet)
    print(summary.render())
    for warning in summary.warnings:
        print(f"npuperf grid: warning: {warning}", file=sys.stderr)
    return EXIT_OK


def cmd_kernels(args: argparse.Namespace) -> int:
    from ..devices import BackendError, select_backend
    from ..kernels.extensions import load_entry_points
    from ..kernels.overview import describe, render, to_json

    load_entry_points()
    if args.schemas is not None and not args.check:
        raise NpuperfError("--schemas goes with --check")
    if args.check:
        return _check_bindings(args)
    try:
        device = select_backend(args.device).kind
    except BackendError as exc:  # worded for pytest's option: say it for this one
        reason = str(exc).removeprefix(f"--npuperf-device {args.device}: ")
        raise NpuperfError(f"--device {args.device}: {reason}") from None
    infos = describe(device)
    print(to_json(infos, device) if args.json else render(infos, device))
    return EXIT_OK


def _check_database(given: Path | None) -> Path:
    """--db, else the embedded database inside the package."""
    from ..harness.options import DEFAULT_DB

    path = DEFAULT_DB if given is None else given
    if not path.is_dir():
        raise NpuperfError(f"--db {given}: not a directory" if given is not None else
                           f"the embedded database {DEFAULT_DB} is missing from this "
                           f"installation: pass --db DIR")
    return path


def _check_bindings(args: argparse.Namespace) -> int:
    from ..devices import BackendError, select_backend
    from ..replay.bindcheck import check_bindings

    database = _check_database(args.db)
    backend = None
    if args.schemas is None:
        try:
            backend = select_backend("npu")
        except BackendError as exc:
            raise NpuperfError(f"npuperf kernels --check: {str(exc).split(': ', 1)[-1]}; pass "
                               f"--schemas DIR to check against the upstream schema sources") \
                from None
    lines = check_bindings(database, args.schemas, backend)
    width = max(len(line.kernel_type) for line in lines)
    for line in lines:
        print(line.render(width))
    failed = [line for line in lines if not line.binds]
    against = f"the schema sources in {args.schemas}" if args.schemas else "the installed operators"
    print(f"{len(lines) - len(failed)} of {len(lines)} kernel types bind against {against} "
          f"(calls built from {database})")
    return EXIT_PROBLEMS if failed else EXIT_OK


def cmd_merge(args: argparse.Namespace) -> int:
    from ..history.combine import combine_sources

    if args.db is not None and not args.dry_run:
        args.db.mkdir(parents=True, exist_ok=True)
    print(combine_sources(args.sources, history=args.history, database=args.db,
                        dry_run=args.dry_run))
    return EXIT_OK


def add_validate(sub) -> None:
    validate = sub.add_parser(
        "validate", help="check database CSVs against the data contract",
        description="Check a database directory (recursively) or one CSV: Git LFS pointers, "
                    "header, dtype/format lists aligned with shape slots, unparsable cells, "
                    "duplicate signatures, invalid durations. Exit status 1 when anything "
                    "is wrong. What the simulator reading the database would miss "
                    "(op_mapping.yaml, cells it cannot parse, spellings it does not match) is "
                    "printed as warnings; --consumer makes them problems.")
    validate.add_argument("paths", nargs="*", type=Path, metavar="PATH",
                          help="database directories or CSV files (or --db)")
    add_db(validate, help="the database to check (a version directory or a root holding "
                          "several)")
    validate.add_argument("--quiet", action="store_true",
                          help="list only files with problems or warnings")
    validate.add_argument("--consumer", action="store_true",
                          help="what the simulator reading the database (msmodeling's "
                               "ProfilingDataSource) needs is a problem, not a warning: "
                               "op_mapping.yaml naming every kernel table, shape cells its "
                               "parser reads, dtype spellings it matches, the Runtime columns "
                               "of FusedInferAttentionScore rows")
    validate.set_defaults(func=cmd_validate)


def add_grid(sub) -> None:
    grid = sub.add_parser(
        "grid", help="add theory rows from the shape grid to a database directory",
        description="Generate the shapes a model family can run (every TP size, token count, "
                    "head layout) from a grid configuration, drop candidates over the memory "
                    "budget and those whose signature the database already has, sample up to "
                    "--rows per kernel type with a fixed seed, and append them as theory rows "
                    "(identity cells, no measurements). Running the same command twice adds "
                    "nothing the second time.")
    add_db(grid, "--data-dir", required=True,
           help="the database (version) directory to add rows to (created when missing)")
    grid.add_argument("--config", metavar="FILE",
                      help="grid configuration YAML, or a packaged one by name: default "
                           "(all kernel types), embedded_db (the embedded default database)")
    grid.add_argument("--target-models", metavar="A,B",
                      help="models whose dimensions feed the grid (built-in: deepseek-v3, "
                           "qwen3-32b, llama-3-70b, glm-5.1, also by Hugging Face id); default: "
                           "the config's models, else all known")
    grid.add_argument("--model-file", type=Path, metavar="FILE",
                      help="YAML describing more models (their dims and TP/EP sizes); without "
                           "--target-models these become the target models")
    grid.add_argument("--rows", type=int, metavar="N",
                      help="grid rows per kernel type file, rows already there included "
                           "(default: the config's, else 1000; 0 = no cap)")
    grid.add_argument("--seed", type=int, metavar="S",
                      help="sampling seed (default: the config's, else 0)")
    grid.add_argument("--max-hbm-gb", type=float, metavar="G",
                      help="drop rows whose inputs and outputs need more than G GiB "
                           "(default: the config's, else 32; 0 = no budget)")
    grid.add_argument("--kernels", metavar="K1,K2",
                      help="only these kernel types (default: every type the config assigns)")
    grid.add_argument("--dry-run", action="store_true",
                      help="print per kernel type the candidates, those over the memory budget, "
                           "duplicates and the rows that would be added; write nothing")
    grid.add_argument("--quiet", action="store_true", help="no progress lines")
    add_fill_options(grid)
    grid.set_defaults(func=cmd_grid)


def add_kernels(sub) -> None:
    kernels = sub.add_parser(
        "kernels", help="list every kernel type: NPU API, portable path, what replays here; "
                        "--check: does every NPU call bind",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description="List every kernel type of the kernel catalog (and of installed "
                    "pytest_npuperf.kernels entry points): the NPU API its replay calls, "
                    "whether that is a vllm-ascend custom operator, what runs on CPU and CUDA, "
                    "the FLOP and byte formulas of one call, and whether this machine can "
                    "replay it (its device, the custom-op environment). Kernels a conftest "
                    "registers through the pytest hook show in pytest runs only.\n\n"
                    "--check builds every kernel type's NPU call from the smallest row of a "
                    "database (--db, default the embedded one) and binds it: on an NPU host to "
                    "the installed torch_npu and vllm-ascend operators (no kernel runs), or "
                    "offline with --schemas DIR to the upstream source files in DIR, verbatim "
                    "(excerpts holding the needed definitions are enough), in this layout:\n"
                    "  DIR/op-plugin/op_plugin_functions.yaml   op-plugin op_plugin/config/\n"
                    "  DIR/op-plugin/atb/RingMlaAtb.cpp         op-plugin op_plugin/ops/atb/ (and\n"
                    "                                           ReshapeAndCachAtb.cpp beside it)\n"
                    "  DIR/vllm-ascend/torch_binding.cpp        vllm-ascend csrc/\n"
                    "  DIR/vllm-ascend/triton/split_qkv_rmsnorm_rope.py\n"
                    "                                           vllm-ascend vllm_ascend/ops/triton/"
                    "linearnorm/\n"
                    "Offline, the call runs once against operators that only bind and return "
                    "empty tensors of their schema's arity, and the outputs a verification "
                    "would compare must be as many as the portable path's. One line per "
                    "kernel type (binds, or what does not); exit status 1 if any does not: run "
                    "it after upgrading vllm-ascend or torch_npu, before a night of replays.")
    kernels.add_argument("--device", default="auto", choices=("auto", "cpu", "cuda", "npu"),
                         help="the device to judge for (default: auto, as pytest bench picks: "
                              "npu, then cuda, then cpu)")
    kernels.add_argument("--json", action="store_true", help="print JSON instead of a table")
    kernels.add_argument("--check", action="store_true",
                         help="bind every kernel type's NPU call (see above); exit 1 if any "
                              "does not")
    kernels.add_argument("--schemas", type=Path, metavar="DIR",
                         help="with --check: bind against the upstream schema sources in DIR "
                              "instead of the installed operators")
    kernels.add_argument("--db", type=Path, metavar="DIR",
                         help="with --check: the database whose rows build the calls (default: "
                              "the embedded database)")
    kernels.set_defaults(func=cmd_kernels)


def add_merge(sub) -> None:
    merge = sub.add_parser(
        "merge", help="merge several hosts' results (databases, run JSONs, histories) into one",
        description="Merge what several hosts wrote (a nightly run split with "
                    "--npuperf-shard I/N) into one place. Each SOURCE is a database version "
                    "directory (its replay measurements go into --database: per row the newest "
                    "measurement, rows and files it lacks added, through the database's "
                    "transaction), a history file, or a run_<stamp>.json (both go into "
                    "--history, as runs: a run already there is updated, never duplicated).")
    merge.add_argument("sources", nargs="+", type=Path, metavar="SOURCE",
                       help="database directories, history files (*.sqlite) and run JSONs")
    add_db(merge, "--database",
           help="the database version directory the database sources merge into (created "
                "when missing: then it holds the union of the sources)")
    merge.add_argument("--history", type=Path, metavar="FILE",
                       help="the history file the histories and run JSONs merge into (created "
                            "when missing)")
    merge.add_argument("--dry-run", action="store_true",
                       help="say what would change; write nothing")
    merge.set_defaults(func=cmd_merge)
