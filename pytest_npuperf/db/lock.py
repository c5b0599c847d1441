"""One writer per database directory.

Two processes that read, update and rewrite the same CSVs would lose one of the updates. A
writer takes an exclusive advisory lock on `<dir>/.npuperf.lock` and refuses (rather than
waits) when another process holds it, naming that process. A writer that created the lock
file removes it when done, so that a run leaves the database directory as it found it.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import os
from collections.abc import Iterator
from pathlib import Path

from .errors import NpuperfError

LOCK_NAME = ".npuperf.lock"

try:
    import fcntl
except ImportError:  # pragma: no cover - Windows
    fcntl = None  # type: ignore[assignment]


class DatabaseLockedError(NpuperfError):
    pass


@contextlib.contextmanager
def database_lock(directory: str | Path, purpose: str = "write") -> Iterator[Path]:
    directory = Path(directory)
    path = directory / LOCK_NAME
    try:
        made_dir = not directory.exists()
        directory.mkdir(parents=True, exist_ok=True)
        created = not path.exists()
        handle = open(path, "a+", encoding="utf-8")  # noqa: SIM115 (held for the lock's lifetime)
    except OSError as exc:
        raise NpuperfError(f"cannot write to {directory}: {exc.strerror or exc}") from None
    with handle:
        if fcntl is not None:
            try:
                fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                handle.seek(0)
                holder = handle.read().strip() or "another process"
                raise DatabaseLockedError(
                    f"{directory} is being written by {holder}; wait for it to finish or "
                    f"write to another directory") from None
            if not _same_file(path, handle.fileno()):
                # The previous holder removed the file between our open and our lock: a
                # third process may hold a lock on the new file, so this one means nothing.
                raise DatabaseLockedError(f"{directory} is being written by another process; "
                                          f"wait for it to finish or write to another directory")
        handle.seek(0)
        handle.truncate()
        stamp = _dt.datetime.now().isoformat(timespec="seconds")
        handle.write(f"pid {os.getpid()} ({purpose}, since {stamp})\n")
        handle.flush()
        try:
            yield directory
        finally:
            handle.seek(0)
            handle.truncate()
            handle.flush()
            if created:
                # Removed while still locked, so nobody can take the lock on it unnoticed.
                with contextlib.suppress(OSError):
                    path.unlink()
            if fcntl is not None:
                fcntl.flock(handle.fileno(), fcntl.LOCK_UN)
            if made_dir:
                # A database that was never written leaves no empty directory behind.
                with contextlib.suppress(OSError):
                    directory.rmdir()


def _same_file(path: Path, fd: int) -> bool:
    try:
        on_disk, held = os.stat(path), os.fstat(fd)
    except OSError:
        return False
    return (on_disk.st_dev, on_disk.st_ino) == (held.st_dev, held.st_ino)
