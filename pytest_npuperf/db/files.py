"""Opening database and profiler files: one-line errors, Git LFS pointers detected.

Light on purpose (no pandas, no numpy): the plugin checks a `--npuperf-db` given on the
command line with it while pytest configures, in every run.
"""

from __future__ import annotations

from pathlib import Path

from .errors import LfsPointerError, NpuperfError, os_error

LFS_MAGIC = b"version https://git-lfs.github.com/spec/v1"
_BOM = b"\xef\xbb\xbf"


def open_binary(path: str | Path):
    """`open(path, 'rb')` with its failures as one-line NpuperfErrors."""
    try:
        return open(path, "rb")
    except IsADirectoryError:
        raise NpuperfError(f"{path}: is a directory, not a CSV file") from None
    except FileNotFoundError:
        raise NpuperfError(f"{path}: no such file") from None
    except OSError as exc:
        raise os_error(path, exc) from None


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
