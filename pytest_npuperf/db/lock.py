"""One writer per database directory.

Two processes that read, update and rewrite the same CSVs would lose one of the updates. A
writer takes an exclusive advisory lock (`flock`) on `<dir>/.npuperf.lock` and refuses (rather
than waits) when another process holds it, naming that process: the file records the owner's
pid, host, command and purpose.

- The lock file is opened with O_NOFOLLOW and must be a regular file: a symlink (or a FIFO)
  planted under that name is refused, never followed or truncated.
- A process killed while holding the lock leaves the file behind with its record, but the
  kernel has released its `flock`: the next writer takes the lock over and says whose it was.
  A live holder keeps its `flock`, so a second writer is refused.
- A writer that created the lock file (or took over a stale one) removes it when done, so that
  a run leaves the database directory as it found it; an empty lock file that was there stays.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import errno
import os
import socket
import stat
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from .errors import NpuperfError

LOCK_NAME = ".npuperf.lock"
_RECORD_MAX = 4096

try:
    import fcntl
except ImportError:  # pragma: no cover - Windows: only the pid record protects there
    fcntl = None  # type: ignore[assignment]

_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)  # POSIX flags; absent (0) on Windows
_NONBLOCK = getattr(os, "O_NONBLOCK", 0)  # a FIFO planted as the lock must not block open()


class DatabaseLockedError(NpuperfError):
    pass


def _command() -> str:
    text = " ".join(os.path.basename(a) if i == 0 else a for i, a in enumerate(sys.argv))
    text = " ".join(text.split())  # one line
    return text[:200] + ("..." if len(text) > 200 else "")


def pid_alive(pid: int) -> bool:
    """Whether a process with this pid runs on this host (a zombie counts as dead)."""
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # someone else's process
    except OSError:
        return False
    # Linux: a zombie holds no lock and writes nothing.
    with contextlib.suppress(OSError), open(f"/proc/{pid}/stat", "rb") as handle:
        return handle.read().rsplit(b")", 1)[-1].split()[:1] != [b"Z"]
    return True


_START_SLACK_S = 2.0  # /proc's boot time is whole seconds: a start time is that coarse


def process_start(pid: int) -> float | None:
    """When process `pid` started, in seconds since the epoch; None where /proc does not say.
    The same process always gives the same value (one boot time, its start in clock ticks)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            ticks = int(handle.read().rsplit(b")", 1)[1].split()[19])  # field 22, starttime
        with open("/proc/stat", "rb") as handle:
            boot = next(int(line.split()[1]) for line in handle if line.startswith(b"btime"))
        return boot + ticks / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError, StopIteration):
        return None


def writer_alive(pid: int, written: float, started: float | None = None) -> bool:
    """Whether the process `pid` that wrote a file at `written` (its ctime) still runs; with
    `started`, the writer's own start time as it recorded it. A live process with that pid
    that started at another time (or after the file was written) is another process that was
    given the pid again: the writer is dead."""
    if not pid_alive(pid):
        return False
    now = process_start(pid)
    if now is None:
        return True
    if started is not None:
        return abs(now - started) < 1e-3
    return now <= written + _START_SLACK_S


@dataclass(frozen=True)
class LockOwner:
    pid: int
    host: str
    purpose: str
    command: str
    since: str

    @classmethod
    def me(cls, purpose: str) -> LockOwner:
        return cls(os.getpid(), socket.gethostname(), " ".join(purpose.split()), _command(),
                   _dt.datetime.now().isoformat(timespec="seconds"))

    def record(self) -> str:
        return (f"pid {self.pid}\nhost {self.host}\npurpose {self.purpose}\n"
                f"command {self.command}\nsince {self.since}\n")

    @classmethod
    def parse(cls, text: str) -> LockOwner | None:
        fields: dict[str, str] = {}
        for line in text.splitlines():
            key, _, value = line.partition(" ")
            fields[key] = value.strip()
        try:
            pid = int(fields.get("pid", "").split()[0])
        except (ValueError, IndexError):
            return None
        return cls(pid, fields.get("host", "?"), fields.get("purpose", "?"),
                   fields.get("command", "?"), fields.get("since", "?"))

    @property
    def here(self) -> bool:
        return self.host == socket.gethostname()

    def describe(self) -> str:
        return (f"pid {self.pid} on {self.host} ({self.purpose}: `{self.command}`, since "
                f"{self.since})")


class DatabaseLock:
    """The lock of one directory; `acquire` returns notes (a stale lock taken over)."""

    def __init__(self, directory: str | Path, purpose: str = "write") -> None:
        self.directory = Path(directory)
        self.path = self.directory / LOCK_NAME
        self.purpose = purpose
        self._fd: int | None = None
        self._remove = False
        self._made_dir = False

    @property
    def held(self) -> bool:
        return self._fd is not None

    def acquire(self) -> list[str]:
        directory = self.directory
        try:
            self._made_dir = not directory.exists()
            directory.mkdir(parents=True, exist_ok=True)
            existed = os.path.lexists(self.path)
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT | _NOFOLLOW | _NONBLOCK
                         | getattr(os, "O_CLOEXEC", 0), 0o644)
        except OSError as exc:
            self._drop_dir()
            if exc.errno == errno.ELOOP:
                raise NpuperfError(f"{self.path} is a symbolic link; a lock file is never "
                                   f"followed: remove the link and try again") from None
            raise NpuperfError(f"cannot write to {directory}: {exc.strerror or exc}") from None
        try:
            notes = self._take(fd, existed)
        except BaseException:
            os.close(fd)
            self._drop_dir()
            raise
        self._fd = fd
        return notes

    def _take(self, fd: int, existed: bool) -> list[str]:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise NpuperfError(f"{self.path} is not a regular file; remove it and try again")
        previous = LockOwner.parse(os.pread(fd, _RECORD_MAX, 0).decode("utf-8", "replace"))
        if fcntl is not None:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                holder = previous.describe() if previous else "another process"
                raise DatabaseLockedError(
                    f"{self.directory} is being written by {holder}; wait for it to finish or "
                    f"write to another directory") from None
            if not _same_file(self.path, fd):
                # The previous holder removed the file between our open and our lock: a
                # third process may hold a lock on the new file, so this one means nothing.
                raise DatabaseLockedError(f"{self.directory} is being written by another "
                                          f"process; wait for it to finish or write to another "
                                          f"directory")
        elif previous is not None and (not previous.here or pid_alive(previous.pid)):
            raise DatabaseLockedError(f"{self.directory} is being written by "
                                      f"{previous.describe()}; wait for it to finish")
        notes = []
        # Ours from here on. A record left in the file is a holder that died with the lock.
        self._remove = not existed or previous is not None
        if previous is not None and previous.pid != os.getpid():
            state = "no longer running" if previous.here else "its lock was released"
            notes.append(f"took over the lock of {self.directory} left by {previous.describe()} "
                         f"({state})")
        record = LockOwner.me(self.purpose).record().encode()
        os.ftruncate(fd, 0)
        os.pwrite(fd, record, 0)
        return notes

    def release(self) -> None:
        fd, self._fd = self._fd, None
        if fd is None:
            return
        try:
            with contextlib.suppress(OSError):
                os.ftruncate(fd, 0)
            if self._remove and _same_file(self.path, fd):
                # Removed while still locked, so nobody can take the lock on it unnoticed.
                with contextlib.suppress(OSError):
                    self.path.unlink()
            if fcntl is not None:
                with contextlib.suppress(OSError):
                    fcntl.flock(fd, fcntl.LOCK_UN)
        finally:
            os.close(fd)
            self._drop_dir()

    def _drop_dir(self) -> None:
        if self._made_dir:
            # A database that was never written leaves no empty directory behind.
            with contextlib.suppress(OSError):
                self.directory.rmdir()
            self._made_dir = False

    def __enter__(self) -> DatabaseLock:
        self.acquire()
        return self

    def __exit__(self, *exc) -> None:
        self.release()


@contextlib.contextmanager
def database_lock(directory: str | Path, purpose: str = "write") -> Iterator[Path]:
    lock = DatabaseLock(directory, purpose)
    lock.acquire()
    try:
        yield lock.directory
    finally:
        lock.release()


def _same_file(path: Path, fd: int) -> bool:
    try:
        on_disk, held = os.stat(path, follow_symlinks=False), os.fstat(fd)
    except OSError:
        return False
    return (on_disk.st_dev, on_disk.st_ino) == (held.st_dev, held.st_ino)
