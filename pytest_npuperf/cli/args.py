"""The option vocabulary every `npuperf` verb shares: `--db` for a database, `--profile` for
profiler output, `--threshold` for the minimum effect of a regression, `--history` for the run
history. The names verbs used before (`--database-path`, `--data-dir`, `--prof-path`, ...) are
still accepted; using one prints a note naming the new one, once, on stderr."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

DB_HELP = "the database version directory, <root>/<DEVICE>/vllm_ascend/<VERSION>"


def positive_int(text: str) -> int:
    """A whole number >= 1, in decimal digits (not `8.0`, `-1`, `1e3` or `８`)."""
    value = text.strip()
    if not (value.isascii() and value.isdigit() and int(value) >= 1):
        raise argparse.ArgumentTypeError(f"expected a whole number >= 1, got {text!r}")
    return int(value)


def fraction(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not 0 <= value < float("inf"):
        raise argparse.ArgumentTypeError(f"expected a fraction >= 0 (0.05 is 5 %), got {text!r}")
    return value


class _Renamed(argparse.Action):
    """Stores like argparse's default action; an old spelling of the option says it is old."""

    def __call__(self, parser, namespace, values, option_string=None) -> None:
        if option_string is not None and option_string != self.option_strings[0]:
            noted = getattr(namespace, "_renamed_noted", set())
            if option_string not in noted:
                print(f"{parser.prog}: note: {option_string} is now {self.option_strings[0]} "
                      f"(the old name still works)", file=sys.stderr)
                noted.add(option_string)
                namespace._renamed_noted = noted
        setattr(namespace, self.dest, values)


def add_renamed(parser, name: str, *old: str, **kwargs) -> argparse.Action:
    """`name` (the vocabulary's), with its `old` spellings as aliases that note the rename."""
    kwargs.setdefault("dest", name.lstrip("-").replace("-", "_"))
    return parser.add_argument(name, *old, action=_Renamed, **kwargs)


def add_db(parser, *old: str, required: bool = False, help: str = DB_HELP) -> None:
    add_renamed(parser, "--db", *old, type=Path, required=required, metavar="DIR", help=help)


def add_threshold(parser, *old: str, type, default: float) -> None:
    add_renamed(parser, "--threshold", *old, type=type, default=default, metavar="F",
                help=f"minimum effect for SLOWER/FASTER, a fraction of the baseline's median "
                     f"(default: {default:g}, {100 * default:g} %%)")


def add_module_kinds(parser) -> argparse.Action:
    """`--module-kinds FILE`: more module kinds for the parser (the package's table extended)."""
    return parser.add_argument(
        "--module-kinds", type=Path, action="append", default=[], metavar="FILE",
        help="a YAML file of more module kinds (classes, functions, operators whose call is "
             "one row of a kernel type), added to the package's table (docs/profiling.md); "
             "repeatable; also read from $NPUPERF_MODULE_KINDS")
