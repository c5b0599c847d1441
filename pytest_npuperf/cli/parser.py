"""The `npuperf` command line: the top-level parser, its verbs in the order --help lists
them (each verb's options sit beside its command, in the module of its group)."""

from __future__ import annotations

import argparse

from .. import __version__
from .args import EXIT_ERROR
from .collectives import add_collective_commands
from .coverage import add_coverage_commands
from .database import add_grid, add_kernels, add_merge, add_validate
from .history import add_history_commands
from .profiles import add_backfill, add_parse, add_predict, add_profile

BENCH_SUITE = "pytest_npuperf.suite"


class _Parser(argparse.ArgumentParser):
    """Usage mistakes as one line (`npuperf parse: error: ...`), exit status 2."""

    def error(self, message: str):  # type: ignore[override]
        self.exit(EXIT_ERROR, f"{self.prog}: error: {' '.join(message.split())} (see "
                              f"{self.prog} --help)\n")


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

    for add in (add_parse, add_profile, add_predict, add_backfill, add_validate, add_grid,
                add_kernels, add_history_commands, add_coverage_commands, add_merge,
                add_collective_commands):
        add(sub)
    return parser
