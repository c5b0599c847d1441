"""Opening database and profiler files: one-line errors, Git LFS pointers detected.

Light on purpose (no pandas, no numpy): the plugin checks a `--npuperf-db` given on the
command line with it while pytest configures, in every run.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from .errors import ContractError, LfsPointerError, NpuperfError, os_error
from .layout import PROFILES_DIR, REPORTS_DIR

LFS_MAGIC = b"version https://git-lfs.github.com/spec/v1"
MAX_LINE_BYTES = 4 << 20
"""Longest physical line of a table accepted (real kernel table lines are a few kilobytes);
what a writer would write longer than this is refused instead."""
MAX_HEADER_BYTES = 1 << 20
_BOM = b"\xef\xbb\xbf"
_NONBLOCK = getattr(os, "O_NONBLOCK", 0)


def open_binary(path: str | Path, what: str = "a CSV file"):
    """`open(path, 'rb')` with its failures as one-line NpuperfErrors.

    A FIFO or socket is refused: opening one waits for a writer, and reading it waits for data,
    forever if none comes. It is opened without blocking to find out; a device with data to
    read now (`/dev/zero`) is read as a file, its readers bound what they read, and one
    without (a terminal, `/dev/ptmx`) is refused the same way.
    """
    try:
        fd = os.open(path, os.O_RDONLY | _NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except FileNotFoundError:
        raise NpuperfError(f"{path}: no such file") from None
    except OSError as exc:
        raise os_error(path, exc) from None
    try:
        mode = os.fstat(fd).st_mode
        if stat.S_ISDIR(mode):
            raise NpuperfError(f"{path}: is a directory, not {what}")
        if stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode):
            raise NpuperfError(f"{path}: not a regular file (a FIFO or socket): refusing to "
                               f"read it, it could block forever; give {what}")
        if stat.S_ISCHR(mode) and not _readable_now(fd):
            raise NpuperfError(f"{path}: not a regular file (a device with nothing to read, "
                               f"a terminal?): refusing to read it, it could block forever; "
                               f"give {what}")
        if _NONBLOCK:
            os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def _readable_now(fd: int) -> bool:
    try:
        import select

        return bool(select.select([fd], [], [], 0)[0])
    except (ImportError, OSError, ValueError):
        return False


def read_bounded(path: str | Path, limit: int, what: str, hint: str = "") -> bytes:
    """A small file's bytes, at most `limit`: a larger file, or a device that never ends
    (`/dev/zero`), is refused without reading the rest."""
    with open_binary(path, what) as handle:
        try:
            data = handle.read(limit + 1)
        except OSError as exc:
            raise os_error(path, exc) from None
    if len(data) > limit:
        raise ContractError(f"{path}: larger than {limit >> 20} MiB; {hint or f'not {what}'}")
    return data


def is_lfs_pointer(path: str | Path) -> bool:
    with open_binary(path) as handle:
        try:
            head = handle.read(len(_BOM) + len(LFS_MAGIC))
        except OSError as exc:
            raise os_error(path, exc) from None
    return head.removeprefix(_BOM).startswith(LFS_MAGIC)


def check_not_lfs(path: str | Path) -> None:
    if is_lfs_pointer(path):
        raise LfsPointerError(
            f"{path}: this is a Git LFS pointer, not CSV data; fetch the real file "
            f"(git lfs pull) and try again")


def check_database_dir(path: Path, option: str, *, tables: bool = False) -> None:
    """An NpuperfError unless `path` is a directory (with `tables`: holding a kernel table),
    saying what it is instead; `option` names where the path came from (`--npuperf-db`,
    `--db`)."""
    if path.is_dir():
        if tables and not has_kernel_tables(path):
            raise NpuperfError(no_kernel_tables(path, option))
        return
    if not path.exists():
        problem = "no such directory"
    else:
        try:
            lfs = is_lfs_pointer(path)
        except NpuperfError:
            lfs = False
        problem = ("a Git LFS pointer file, not a database directory (git lfs pull)" if lfs
                   else "a file, not a database directory")
    raise NpuperfError(
        f"{option}: {path}: {problem} (expected <root>/<DEVICE>/vllm_ascend/<VERSION>/ with "
        f"<KernelType>.csv files)")


def is_kernel_table_name(name: str) -> bool:
    """Whether a file of a version directory is named like a kernel table (collective tables
    and hidden files are not)."""
    return name.endswith(".csv") and not name.startswith(("hcom_", "."))


def has_kernel_tables(directory: Path) -> bool:
    """Whether `directory` holds at least one file named like a kernel table (not read)."""
    try:
        with os.scandir(directory) as entries:
            return any(is_kernel_table_name(e.name) and not e.is_dir() for e in entries)
    except OSError:
        return False


# How far below a directory given as a database `databases_below` looks (<root>/<DEVICE>/
# vllm_ascend/<VERSION> is three levels), and how many directories it reads at most: a
# mistaken path may be a home directory, and the error naming what is there must come fast.
FIND_DEPTH = 4
FIND_MAX_DIRS = 2000


def databases_below(path: str | Path, *, limit: int = 5) -> list[Path]:
    """Directories below `path` (itself excluded) that hold kernel tables, nearest first: what
    a database path given one level too high (or into the wrong tree) probably meant. Reports
    and profile directories, hidden and symlinked ones are not entered; unreadable ones are
    passed over (this only suggests)."""
    found: list[Path] = []
    level, visited = [Path(path)], 0
    for _ in range(FIND_DEPTH):
        below: list[Path] = []
        for directory in level:
            try:
                with os.scandir(directory) as scan:
                    entries = sorted(scan, key=lambda e: e.name)
            except OSError:
                continue
            for entry in entries:
                if entry.name.startswith(".") or entry.name in (REPORTS_DIR, PROFILES_DIR):
                    continue
                try:
                    if entry.is_dir(follow_symlinks=False):
                        below.append(Path(entry.path))
                except OSError:
                    continue
        for directory in below:
            visited += 1
            if visited > FIND_MAX_DIRS or len(found) >= limit:
                return found
            if has_kernel_tables(directory):
                found.append(directory)
        level = below
    return found


def no_kernel_tables(path: str | Path, option: str) -> str:
    """The one-line error for a database directory without a kernel table: what was expected,
    and the databases found below it."""
    found = databases_below(path)
    where = (f"databases found below it: {', '.join(str(p) for p in found)}" if found
             else "no database found below it either")
    return (f"{option}: {path}: no kernel tables here (expected <KernelType>.csv files in a "
            f"<root>/<DEVICE>/vllm_ascend/<VERSION>/ directory); {where}")
