"""`npuperf <command>`: a thin shell over the functions the plugin uses.

Every failure the user can fix is one line on stderr and a non-zero exit: 2 for a usage
mistake (options, missing files, a locked database), 1 for bad data (a malformed CSV or cell);
the database is left as it was.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from pathlib import Path

from .. import __version__
from ..db.errors import NpuperfError, printable
from ..db.layout import DEFAULT_DEVICE, KNOWN_DEVICES, database_dir, resolve_database_dir
from .args import add_db, add_module_kinds, add_renamed, add_threshold, fraction, positive_int
from .coverage import add_coverage_commands, add_fill_options, cmd_fill
from .history import add_history_commands

EXIT_OK, EXIT_PROBLEMS, EXIT_ERROR, EXIT_INTERRUPTED = 0, 1, 2, 130


def _count_or_zero(text: str) -> int:
    value = text.strip()
    if not (value.isascii() and value.isdigit()):
        raise argparse.ArgumentTypeError(f"expected a whole number >= 0, got {text!r}")
    return int(value)


def _ep_size(text: str) -> str:
    return str(positive_int(text))


def _add_database_options(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group(
        "database", "where the database is: --db, or --device with the versions "
                    "(versions not given are detected from the installed torch, vllm-ascend "
                    "and CANN)")
    add_db(group, "--database-path",
           help="the version directory to write (created when missing), e.g. data/"
                "ATLAS_800_A3_752T_128G_DIE/vllm_ascend/vllm0.18.0_torch2.9.0_cann8.5")
    group.add_argument("--database-root", type=Path, default=Path("data"), metavar="ROOT",
                       help="root holding <DEVICE>/vllm_ascend/<VERSION>/ (default: ./data)")
    group.add_argument("--device", metavar="D",
                       help=f"device directory name (default {DEFAULT_DEVICE} when versions "
                            f"are given); known: {', '.join(KNOWN_DEVICES)}")
    group.add_argument("--vllm-version", metavar="V",
                       help="vllm-ascend version, e.g. 0.18.0 (or a full version directory name)")
    group.add_argument("--torch-version", metavar="T", help="torch version, e.g. 2.9.0")
    group.add_argument("--cann-version", metavar="C", help="CANN version, e.g. 8.5")


def database_from_args(args: argparse.Namespace) -> Path:
    device = args.device
    if args.db is None and device is None and (
            args.vllm_version or args.torch_version or args.cann_version):
        device = DEFAULT_DEVICE
    return resolve_database_dir(args.db, root=args.database_root, device=device,
                                vllm=args.vllm_version, torch=args.torch_version,
                                cann=args.cann_version)


def cmd_parse(args: argparse.Namespace) -> int:
    from ..ingest.parse import parse_profiling

    summary = parse_profiling(args.profile, _parse_target(args), ep_size=args.ep_size,
                              dry_run=args.dry_run, chunk_rows=args.chunk_rows,
                              show_progress=not args.quiet, strict=args.strict,
                              module_kinds=args.module_kinds)
    print(summary.render())
    return EXIT_OK


def _parse_target(args: argparse.Namespace):
    """The database to parse into: named on the command line, else (no --device and no
    versions) found from the device the traces were taken on."""
    if args.db is not None or args.device is not None:
        return database_from_args(args)

    def place(trace_device: str | None) -> Path:
        versions = args.vllm_version or args.torch_version or args.cann_version
        if trace_device is None and not versions:
            return database_from_args(args)  # says which options name a database
        args.device = trace_device or DEFAULT_DEVICE
        if trace_device and not versions and not trace_device.startswith(("ATLAS", "NPU")):
            # A CPU or GPU trace: the database of that device named after the serving stack
            # whose kernels its rows stand for, as a replay names this device's copy (the
            # embedded database's, unless the versions are given).
            from ..harness.options import DEFAULT_DB

            return database_dir(args.database_root, trace_device, DEFAULT_DB.name)
        return database_from_args(args)
    return place


def _workload_command(args: argparse.Namespace) -> list[str]:
    """The profiled process: `python` (any bare `python...` name) is the interpreter running
    npuperf, so an installed but not activated environment profiles with itself."""
    import sys

    command = args.workload[1:] if args.workload[:1] == ["--"] else list(args.workload)
    if args.call:
        if command:
            raise NpuperfError("give either --call MODULE:FUNCTION or -- python SCRIPT, not both")
        return [sys.executable]
    if not command or not Path(command[0]).name.startswith("python"):
        raise NpuperfError("give the workload after --, as python runs it: -- python SCRIPT "
                           "[ARGS] (or -- python -m MODULE [ARGS]), or a function: --call "
                           "MODULE:FUNCTION")
    if Path(command[0]).name == command[0]:
        command[0] = sys.executable
    return command


def cmd_profile(args: argparse.Namespace) -> int:
    import json
    import tempfile
    import time

    from ..profiling.child import run_to_end

    command = _workload_command(args)
    what = (args.call.rpartition(":")[2] if args.call else
            command[2] if command[1:2] == ["-m"] and len(command) > 2 else
            command[1] if len(command) > 1 else "workload")
    stem = Path(what).stem
    out = args.out or Path("npuperf-out") / "traces" / f"{stem}_{time.strftime('%Y%m%d_%H%M%S')}"
    with tempfile.TemporaryDirectory(prefix="npuperf_profile_") as scratch:
        result = Path(scratch) / "result.json"
        options = ["--out", str(out), "--result", str(result), "--device", args.device,
                   "--warmup", str(args.warmup), "--steps", str(args.steps),
                   *(["--call", args.call] if args.call else []),
                   *[a for path in args.module_kinds for a in ("--module-kinds", str(path))],
                   *(["--no-module-ranges"] if args.no_module_ranges else [])]
        # The workload's own output goes where npuperf's goes; the result comes in a file.
        # A stop signal (SIGTERM, SIGHUP) goes on to the workload, waited for.
        done = run_to_end([command[0], "-m", "pytest_npuperf.profiling.workload", *options,
                           "--", *command[1:]])
        if done.returncode != 0 or not result.is_file():
            raise NpuperfError(f"the profiled workload failed (exit status {done.returncode}); "
                               f"nothing was written")
        profiled = json.loads(result.read_text(encoding="utf-8"))
    trace = Path(profiled["trace"])
    steps = profiled.get("traced_steps", 0)
    marked = " marked" if profiled.get("marked_steps") else ""
    print(f"trace written: {trace} ({steps}{marked} step(s) traced)")
    for note in profiled.get("notes") or []:
        print(f"note: {note}")
    trust = profiled.get("trust") or ""
    if trust and trust != "ok":
        print(f"note: the in-model times are {trust}: the parse marks them so, and they are "
              f"kept out of the replay comparison; profile again on a quiet host")
    if args.db is not None:
        from ..ingest.parse import parse_profiling

        print(parse_profiling(trace, args.db, show_progress=not args.quiet,
                              module_kinds=args.module_kinds).render())
    return EXIT_OK


def cmd_predict(args: argparse.Namespace) -> int:
    from ..ingest.prediction import predict, prediction_json

    prediction = predict(args.trace, args.db, module_kinds=args.module_kinds)
    print(prediction_json(prediction) if args.json else "\n".join(prediction.lines()))
    return EXIT_OK


def cmd_backfill(args: argparse.Namespace) -> int:
    from ..history.where import find_history
    from ..run.finish import history_path
    from ..run.from_profile import FinishOptions, backfill_profile

    history = history_path(args.history or str(find_history().path))
    finish = FinishOptions(history=history, baseline=args.baseline, threshold=args.threshold,
                           figures=not args.no_figures)
    if args.baseline:
        _check_baseline(args.baseline, finish.history)
    lines, code = backfill_profile(args.profile, args.db,
                                   update_mode=args.update_mode,
                                   prune_empty=args.prune_empty_duration_rows,
                                   dry_run=args.dry_run, statistic=args.statistic, finish=finish)
    for line in lines:
        print(line)
    return code


def _check_baseline(ref: str, history: Path | None) -> None:
    """A baseline that names nothing readable is a usage error before the profile is read,
    as in a pytest session, not a note under a run that then exits 0."""
    from ..history.baseline import resolve_baseline

    try:
        resolve_baseline(ref, history=history).close()
    except NpuperfError as exc:
        raise NpuperfError(f"--baseline: {exc}") from None


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


def cmd_comm_validate(args: argparse.Namespace) -> int:
    from ..comm.model_check import render_markdown, validate_dir

    result = validate_dir(args.db, args.tolerance)
    text = render_markdown(result)
    print(text, end="")
    if args.report:
        from ..db.table import write_text

        write_text(args.report, text, purpose="npuperf comm-validate --report")
    return EXIT_OK if result.ok else EXIT_PROBLEMS


def cmd_import_nccl_tests(args: argparse.Namespace) -> int:
    from ..comm.log_import import import_logs

    print(import_logs(args.logs, args.db, op=args.op, num_devices=args.num_devices,
                      topology_tier=args.topology_tier, grid_shape=args.grid_shape,
                      dtype=args.dtype, dry_run=args.dry_run, version_dirs=args.version_dir))
    return EXIT_OK


class _Parser(argparse.ArgumentParser):
    """Usage mistakes as one line (`npuperf parse: error: ...`), exit status 2."""

    def error(self, message: str):  # type: ignore[override]
        self.exit(EXIT_ERROR, f"{self.prog}: error: {' '.join(message.split())} (see "
                              f"{self.prog} --help)\n")


BENCH_SUITE = "pytest_npuperf.suite"


def run_bench(pytest_args: Sequence[str]) -> int:
    """`npuperf bench ARGS`: pytest on the suite inside the package, from any directory. This
    process becomes that pytest where it can, so signals, the exit status and the msprof /
    torchrun re-runs (which repeat pytest's own command line) are pytest's."""
    import os
    import subprocess

    command = [sys.executable, "-m", "pytest", "--pyargs", BENCH_SUITE, *pytest_args]
    if os.name == "posix":
        os.execv(sys.executable, command)
    return subprocess.call(command)


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="npuperf",
        description="Build, measure and guard an operator performance database for Ascend NPUs "
                    "(and CUDA GPUs and CPUs). Replay measurements run under pytest: "
                    "`npuperf bench -k MatMul` (`pytest bench -k MatMul` in a clone).")
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)

    # Listed for --help only: main() hands everything after `bench` to pytest unparsed.
    sub.add_parser("bench", help="replay the database under pytest: pytest --pyargs "
                                 f"{BENCH_SUITE} [PYTEST ARGS] (the embedded database unless "
                                 "--npuperf-db)", add_help=False)

    parse = sub.add_parser(
        "parse", help="aggregate profiler output (kernel tables, traces) into the database",
        description="Aggregate torch_npu profiler kernel tables (kernel_details*.csv) and "
                    "profiler traces (torch.profiler / kineto Chrome traces of CPU and CUDA "
                    "runs, torch_npu's trace_view.json; profiled with record_shapes=True) per "
                    "kernel type and shape signature, and merge the statistics into the "
                    "database's Profiling columns: existing rows are updated, new signatures "
                    "appended, nothing else is touched. A trace's operator calls become rows "
                    "of the kernel types its database's op_mapping.yaml maps them to, each with "
                    "the device time of the kernels it launched; what maps to nothing is listed "
                    "with its share of the trace's device time. Without --db or "
                    "--device, a trace's rows go to the database of the device it was taken on.",
        epilog="example: npuperf parse --profile run1/ run2/kernel_details.csv --db DIR")
    add_renamed(parse, "--profile", "--profiling-path", type=Path, required=True, nargs="+",
                metavar="PATH", help="one or more kernel_details*.csv, traces (.json), or "
                                     "directories searched recursively for both (several "
                                     "ranks and runs)")
    _add_database_options(parse)
    parse.add_argument("--ep-size", metavar="N", type=_ep_size,
                       help="EP Size to record for DispatchFFNCombine rows (part of their "
                            "identity): a whole number >= 1")
    parse.add_argument("--dry-run", action="store_true",
                       help="aggregate and report what would change; write nothing")
    parse.add_argument("--strict", action="store_true",
                       help="a kernel-table row with fewer or more fields than the header is an "
                            "error (default: rows with fewer fields are skipped, extra trailing "
                            "fields ignored, both counted with their lines)")
    add_module_kinds(parse)
    parse.add_argument("--quiet", action="store_true", help="no progress lines")
    parse.add_argument("--chunk-rows", type=positive_int, default=200_000, metavar="N",
                       help=argparse.SUPPRESS)
    parse.set_defaults(func=cmd_parse)

    profile = sub.add_parser(
        "profile", help="run a workload under the device's profiler and write its trace",
        description="Run a workload (a Python script, a module with -m, or a function with "
                    "--call) under the device's profiler with input shapes recorded: "
                    "torch.profiler on a CPU or a CUDA GPU (a Chrome trace), torch_npu's "
                    "profiler on an NPU (its output directory). A step is what the script "
                    "marks (with pytest_npuperf.profiling.step()), a call of the --call "
                    "function, or else a whole run of the script (its model construction then "
                    "in the trace: the parse says how much). --warmup steps run untraced "
                    "first, then --steps are traced: a model's first calls pay for allocation "
                    "and kernel selection, its steady state is what the database is for. The "
                    "calls of known module kinds (RMS norm, rotary embedding, gated "
                    "activation, attention) are recorded as ranges, the host is watched (an "
                    "oversubscribed or preempting host makes the in-model times untrusted). "
                    "The trace is what `npuperf parse` reads; --db does both. The workload's "
                    "output is shown as it runs.",
        epilog="examples: npuperf profile --db DIR -- python my_model.py --batch 8; "
               "npuperf profile --call my_model:step --steps 5")
    profile.add_argument("--out", type=Path, metavar="PATH",
                         help="where the trace goes (default: npuperf-out/traces/"
                              "<script>_<time>.json; an NPU profile is a directory)")
    profile.add_argument("--device", choices=("auto", "cpu", "cuda", "npu"), default="auto",
                         help="the profiler to run: auto picks npu, then cuda, then cpu")
    profile.add_argument("--warmup", type=_count_or_zero, default=1, metavar="N",
                         help="untraced steps first (default 1)")
    profile.add_argument("--steps", type=positive_int, default=1, metavar="N",
                         help="traced steps (default 1)")
    add_db(profile, "--parse-into",
           help="then parse the trace into this database version directory (created when "
                "missing)")
    profile.add_argument("--call", metavar="MODULE:FUNCTION",
                         help="profile a function instead of a script: FUNCTION() is one step "
                              "(MODULE is imported first, untraced: build the model there); "
                              "MODULE may be a FILE.py")
    add_module_kinds(profile)
    profile.add_argument("--no-module-ranges", action="store_true",
                         help="record no ranges around the module kinds' calls (the parse "
                              "then finds them by their eager decomposition)")
    profile.add_argument("--quiet", action="store_true", help="no progress lines")
    profile.add_argument("workload", nargs=argparse.REMAINDER, metavar="-- python SCRIPT",
                         help="-- python SCRIPT [ARGS], or -- python -m MODULE [ARGS] "
                              "(python: the interpreter running npuperf)")
    profile.set_defaults(func=cmd_profile)

    predict = sub.add_parser(
        "predict", help="how well a database predicts a profiled model: predicted / measured",
        description="Cost every kernel call of a profiled model's steps (a trace, as `npuperf "
                    "parse` reads it: operator calls and composite calls) at the database's "
                    "value for its row (exact rows only: kernel type and signature; the "
                    "replay's Average Duration(us), else the in-model Profiling Average), add "
                    "them up and compare with the measured time of the steps: predicted / "
                    "measured for the whole step and over the calls the database has a row "
                    "for, each kernel type's part, the calls without a row and the time that "
                    "maps to no kernel type.",
        epilog="example: npuperf predict --trace npuperf-out/traces/llama.json --db DIR")
    predict.add_argument("--trace", type=Path, required=True, metavar="TRACE",
                         help="a trace of the model (torch.profiler / kineto Chrome trace, "
                              "e.g. from npuperf profile)")
    add_db(predict, required=True, help="the database version directory that predicts it")
    add_module_kinds(predict)
    predict.add_argument("--json", action="store_true", help="print JSON instead of text")
    predict.set_defaults(func=cmd_predict)

    fill = sub.add_parser(
        "backfill", help="fill a database from existing msprof / torch_npu profiler output",
        description="Attribute the kernels of existing profiler output (msprof PROF_* "
                    "directories, torch_npu *_ascend_pt runs, or an earlier wrapped run's "
                    "directory under <out>/msprof/) to database rows and write their "
                    "durations (Average Duration(us) and the MicroBench statistics) and the "
                    "25 MicroBench counters, then the reports. With the run's hand-off file "
                    "and mstx markers every case gets the kernels inside its marker (checked "
                    "against its calls and kernel types); markers alone name the cases; "
                    "without either, kernels are matched to rows by kernel type and "
                    "signature. Nothing is written on a failure.")
    add_renamed(fill, "--profile", "--prof-path", type=Path, required=True, metavar="DIR",
                help="profiler output: a run directory, a PROF_* or *_ascend_pt directory, "
                     "or a directory holding them")
    add_db(fill, "--database-path", required=True,
           help="the database version directory to write (it must hold the rows to fill)")
    fill.add_argument("--update-mode", choices=("all", "missing-only"), default="all",
                      help="all rows the profile measured, or only rows without a valid "
                           "Average Duration(us) (default: all)")
    fill.add_argument("--prune-empty-duration-rows", action="store_true",
                      help="after the backfill, delete measured rows that still have neither a "
                           "replay nor a profiling duration")
    fill.add_argument("--statistic", choices=("median", "mean"), default="median",
                      help="what Average Duration(us) holds for cases without a hand-off "
                           "(default: median; a hand-off keeps its session's choice)")
    fill.add_argument("--dry-run", action="store_true",
                      help="attribute and report what would change; write nothing")
    fill.add_argument("--history", metavar="PATH",
                      help="SQLite history the run is recorded in, as a pytest session's "
                           "(default: the one pytest bench records into, found from the "
                           "rootdir as pytest finds it; none: keep no history)")
    fill.add_argument("--baseline", metavar="REF",
                      help="judge each case against a baseline, as --npuperf-baseline: last, a "
                           "run id, a history file or a run_<stamp>.json; a case found SLOWER "
                           "makes the exit status 1")
    add_threshold(fill, "--regression-threshold", type=fraction, default=0.05)
    fill.add_argument("--no-figures", action="store_true",
                      help="draw no figures in the html report")
    fill.set_defaults(func=cmd_backfill)

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

    add_history_commands(sub)
    add_coverage_commands(sub)

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

    _add_comm_commands(sub)
    return parser


def _add_comm_commands(sub) -> None:
    check = sub.add_parser(
        "comm-validate", help="check hcom tables against the analytic collective model",
        description="Compare every row of the hcom_*.csv tables of a directory with the "
                    "analytic model of CONTRACT.md section 7 (A3 link constants): PASS when "
                    "measured/predicted lies in [1/T, T], WARN within [1/(2T), 2T], FAIL "
                    "beyond. Prints a markdown report; exit status 1 on any FAIL or unreadable "
                    "row.")
    add_db(check, "--csv-dir", required=True,
           help="the directory holding hcom_*.csv, e.g. data/<DEVICE>/hccl/v8.5")
    check.add_argument("--tolerance", type=float, default=2.0, metavar="T",
                       help="ratio band of a PASS (default: 2)")
    check.add_argument("--report", type=Path, metavar="FILE",
                       help="also write the markdown report to FILE")
    check.set_defaults(func=cmd_comm_validate)

    imp = sub.add_parser(
        "import-nccl-tests", help="nccl-tests / HCCL Test output into the hcom tables",
        description="Read nccl-tests logs (the modern table with root and #wrong, the older one "
                    "with error; out-of-place and in-place columns; MPI noise between lines) "
                    "or HCCL Test output, and write their rows into hcom_<op>_.csv of the "
                    "directory: a row already there for the same message_bytes, num_devices, "
                    "dtype and topology_tier is replaced, everything else is kept.")
    imp.add_argument("logs", nargs="+", type=Path, metavar="LOG", help="benchmark output files")
    add_db(imp, "--database-path", required=True,
           help="the hcom table directory to write (created when missing), <root>/<DEVICE>/"
                "hccl/<version>, e.g. data/CUDA_NVIDIA_H100_80GB_HBM3/hccl/vnccl2.21.5")
    imp.add_argument("--op", help="the collective, when neither the log's command line nor its "
                                  "file name says (all_reduce, all_gather, reduce_scatter, "
                                  "all_to_all, broadcast)")
    imp.add_argument("--num-devices", type=positive_int, metavar="N",
                     help="ranks that took part (nccl-tests: default the '# Rank' lines; HCCL "
                          "Test: required unless an 'mpirun -n N' line is in the file)")
    imp.add_argument("--topology-tier", type=int, choices=(0, 1, 2),
                     help="the tier of the rows (default: from --grid-shape, else from the "
                          "hosts in the log: one host 1, several 0)")
    imp.add_argument("--grid-shape", metavar="'D0 D1 ...'",
                     help="rank grid, outermost first (A3 '48 8 2', A2 '128 8') giving the tier "
                          "of ranks 0..N-1")
    imp.add_argument("--dtype", help="HCCL Test only: the data type of the run (default: a '-d' "
                                     "in the file, else fp32)")
    imp.add_argument("--version-dir", type=Path, action="append", default=[], metavar="DIR",
                     help="a kernel database (<root>/<DEVICE>/vllm_ascend/<VERSION>) whose "
                          "op_mapping.yaml is to name these tables (communication_data_ref; "
                          "generated where missing, a hand-edited one is kept); repeatable. "
                          "Those of the same CANN beside the tables are always updated")
    imp.add_argument("--dry-run", action="store_true",
                     help="parse and report what would change; write nothing")
    imp.set_defaults(func=cmd_import_nccl_tests)


# Commands that build a large run in memory (10^5 results): run as the `npuperf` command, they
# end without tearing it down object by object, seconds after their work is done.
_LEAVE_AT_ONCE = ("backfill",)


def main(argv: Sequence[str] | None = None) -> int:
    command_line = argv is None
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] == ["bench"]:
        return run_bench(argv[1:])
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return EXIT_ERROR
    try:
        code = args.func(args)
        if command_line and args.command in _LEAVE_AT_ONCE:
            _leave(code)
        return code
    except NpuperfError as exc:
        return _error(args.command, str(exc), exc.exit_code)
    except OSError as exc:  # an I/O error nothing below turned into a message
        where = f"{exc.filename}: " if exc.filename else ""
        return _error(args.command, f"{where}{exc.strerror or exc}", EXIT_ERROR)
    except (RecursionError, MemoryError) as exc:
        return _error(args.command, f"input too large or too deeply nested "
                                    f"({type(exc).__name__}); nothing was written", EXIT_PROBLEMS)
    except KeyboardInterrupt:
        print(f"npuperf {args.command}: interrupted; nothing was written", file=sys.stderr)
        return EXIT_INTERRUPTED


def _leave(code: int) -> None:
    """End the process now with `code`: its output flushed, every file it wrote already
    closed (transactions close and sync theirs), only the interpreter's teardown skipped."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def _error(command: str, message: str, code: int) -> int:
    """One line on stderr, whatever the message held (a hostile cell's text, newlines)."""
    line = printable(" ".join(message.split()))
    if len(line) > 2000:
        line = line[:2000] + " ..."
    print(f"npuperf {command}: error: {line}", file=sys.stderr)
    return code

