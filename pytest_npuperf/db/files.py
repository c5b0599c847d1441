"""Opening database and profiler files: one-line errors, Git LFS pointers detected.

Light on purpose (no pandas, no numpy): the plugin checks a `--npuperf-db` given on the
command line with it while pytest configures, in every run.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from .errors import ContractError, LfsPointerError, NpuperfError, os_error

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


def check_database_dir(path: Path, option: str) -> None:
    """An NpuperfError unless `path` is a directory, saying what it is instead; `option` names
    where the path came from (`--npuperf-db`, `--db`)."""
    if path.is_dir():
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
