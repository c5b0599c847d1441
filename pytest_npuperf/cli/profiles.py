"""The verbs that take profiler output: `npuperf parse` (kernel tables and traces into a
database), `profile` (trace a workload), `predict` (a model's step from a trace and a
database) and `backfill` (the end of an msprof-wrapped run)."""

from __future__ import annotations

import argparse
from pathlib import Path

from ..db.errors import NpuperfError
from ..db.layout import DEFAULT_DEVICE, database_dir
from .args import (
    EXIT_OK,
    add_database_options,
    add_db,
    add_module_kinds,
    add_renamed,
    add_threshold,
    count_or_zero,
    database_from_args,
    fraction,
    positive_int,
)


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
    from ..measure.clock import mint_run
    from ..run.finish import RunFacts, history_path
    from ..run.from_profile import backfill_profile

    run = RunFacts.of(mint_run(), source=str(args.db),
                      history=history_path(args.history or str(find_history().path)),
                      baseline=args.baseline, threshold=args.threshold,
                      figures=not args.no_figures)
    if args.baseline:
        _check_baseline(args.baseline, run.history)
    from . import HELD

    lines, code = backfill_profile(args.profile, args.db,
                                   update_mode=args.update_mode,
                                   prune_empty=args.prune_empty_duration_rows,
                                   dry_run=args.dry_run, statistic=args.statistic, run=run,
                                   hold=HELD.append)
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


def _ep_size(text: str) -> str:
    return str(positive_int(text))


def add_parse(sub) -> None:
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
    add_database_options(parse)
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


def add_profile(sub) -> None:
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
    profile.add_argument("--warmup", type=count_or_zero, default=1, metavar="N",
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


def add_predict(sub) -> None:
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


def add_backfill(sub) -> None:
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
