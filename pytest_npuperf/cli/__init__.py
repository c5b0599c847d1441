"""`npuperf <command>`: a thin shell over the functions the plugin uses.

Every failure the user can fix is one line on stderr and a non-zero exit: 2 for a usage
mistake (options, missing files, a locked database), 1 for bad data (a malformed CSV or cell);
the database is left as it was.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence

from ..db.errors import NpuperfError, printable
from .args import EXIT_ERROR, EXIT_INTERRUPTED, EXIT_PROBLEMS
from .parser import BENCH_SUITE, build_parser


def run_bench(pytest_args: Sequence[str]) -> int:
    """`npuperf bench ARGS`: pytest on the suite inside the package, from any directory. This
    process becomes that pytest where it can, so signals, the exit status and the msprof /
    torchrun re-runs (which repeat pytest's own command line) are pytest's."""
    import subprocess

    command = [sys.executable, "-m", "pytest", "--pyargs", BENCH_SUITE, *pytest_args]
    if os.name == "posix":
        os.execv(sys.executable, command)
    return subprocess.call(command)


# Commands that build a large run in memory (10^5 results): run as the `npuperf` command, they
# end without tearing it down object by object, seconds after their work is done.
_LEAVE_AT_ONCE = ("backfill",)
# What such a command's work built, kept here until the process ends: freed object by object
# on its way out of the functions that built it, a 200,000-case run took a second more.
HELD: list[object] = []


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
    finally:
        HELD.clear()  # called as a function (not left at once): freed here


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

