"""The option vocabulary every `npuperf` verb shares: `--db` for a database, `--profile` for
profiler output, `--threshold` for the minimum effect of a regression, `--history` for the run
history. The names verbs used before (`--database-path`, `--data-dir`, `--prof-path`, ...) are
still accepted; using one prints a note naming the new one, once, on stderr."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from ..db.layout import DEFAULT_DEVICE, KNOWN_DEVICES, resolve_database_dir

EXIT_OK, EXIT_PROBLEMS, EXIT_ERROR, EXIT_INTERRUPTED = 0, 1, 2, 130

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


def count_or_zero(text: str) -> int:
    value = text.strip()
    if not (value.isascii() and value.isdigit()):
        raise argparse.ArgumentTypeError(f"expected a whole number >= 0, got {text!r}")
    return int(value)


def add_database_options(parser: argparse.ArgumentParser) -> None:
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
