"""The verbs on collective tables: `npuperf comm-validate` (against the analytic model) and
`import-nccl-tests` (benchmark logs into the hcom tables)."""

from __future__ import annotations

import argparse
from pathlib import Path

from .args import EXIT_OK, EXIT_PROBLEMS, add_db, positive_int


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


def add_collective_commands(sub) -> None:
    check = sub.add_parser(
        "comm-validate", help="check hcom tables against the analytic collective model",
        description="Compare every row of the hcom_*.csv tables of a directory with the "
                    "analytic model of docs/format.md §7 (A3 link constants): PASS when "
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
