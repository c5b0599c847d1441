"""All-or-nothing writes of several files of a database.

A `Transaction` stages files (complete, fsync'd, beside their targets), then commits them:

1. optional checks that the files read earlier did not change since (size, mtime, inode);
2. a journal `<root>/.npuperf-journal.<txid>` lists every target, its staged file and the
   backup the old version will have, and is fsync'd before anything is touched;
3. each existing target gets a backup (a hard link, else a copy), then every staged file is
   renamed over its target;
4. the journal is removed (the commit point), then the backups.

A failed rename (or Ctrl-C) restores what was already replaced and removes the files that were
created, in the same process. A process killed between 2 and 4 leaves the journal: the next
process that takes the directory's lock (or reads the database, when the lock is free) **rolls
the transaction back** before reading. Back, not forward: the killed process never reported
success, and a killed run must leave the database as it was before the run (docs/development.md,
principle 1); every old file is still there as a backup, while rolling forward would need
every staged file, which a crash during staging may not have finished.
Temporary files left by killed writers (staged files, backups without a journal, probes) are
removed at the same time.

Paths are checked before anything is written: every target lies under the transaction's root,
and no directory between the root and the target (nor the target itself) is a symlink, so a
write never leaves the database through one.
"""

from __future__ import annotations

import contextlib
import csv
import io
import json
import os
import re
import secrets
import shutil
import socket
import stat
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from .errors import ContractError, NpuperfError
from .files import MAX_HEADER_BYTES, MAX_LINE_BYTES
from .lock import DatabaseLock, process_start, writer_alive

JOURNAL_PREFIX = ".npuperf-journal."
_TAG = "npuperf-"
# .<name>.npuperf-<pid>-<hex>.new / .old: staged files and backups; a journal being written.
_TEMP_RE = re.compile(r"^\.(?:.+\.npuperf-(?P<pid>\d+)-[0-9a-f]+\.(?:new|old)"
                      r"|npuperf-journal\.(?P<jpid>\d+)-[0-9a-f]+\.tmp)$")
# Temporary files of earlier releases (mkstemp) and of the writable-directory probe.
_LEGACY_TEMP_RE = re.compile(r"^(?:\..+\.[A-Za-z0-9_]{8}\.tmp|\.npuperf-probe\..+)$")
_LEGACY_AGE_S = 60.0
_JOURNAL_MAX = 16 << 20
_SCAN_DEPTH = 1  # the root and its subdirectories (reports/, hccl/...)


@dataclass(frozen=True)
class FileStamp:
    """What a file looked like when it was read: a rewrite changes at least one of these."""

    size: int
    mtime_ns: int
    inode: int

    @classmethod
    def of(cls, path: str | Path) -> FileStamp | None:
        try:
            st = os.stat(path)
        except FileNotFoundError:
            return None
        return cls(st.st_size, st.st_mtime_ns, st.st_ino)

_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)  # a staged file is never created through a link


class _Unchecked:
    def __repr__(self) -> str:
        return "UNCHECKED"


UNCHECKED = _Unchecked()
"""`expect=UNCHECKED`: stage a file without checking what is on disk now."""


@dataclass
class _Entry:
    target: Path
    staged: Path
    backup: Path
    expect: object  # FileStamp, None (must not exist) or UNCHECKED
    existed: bool = False
    staged_id: tuple[int, int] = (0, 0)


def fsync_dir(directory: Path) -> None:
    with contextlib.suppress(OSError):
        fd = os.open(directory, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def check_inside(root: Path, path: Path) -> Path:
    """`path` as an absolute path under `root`, reached without following a symlink below
    the root. Raises NpuperfError otherwise."""
    root_abs = Path(os.path.abspath(root))
    target = Path(os.path.abspath(path))
    try:
        relative = target.relative_to(root_abs)
    except ValueError:
        raise NpuperfError(f"{path}: outside the database directory {root}; refusing to "
                           f"write there") from None
    if not relative.parts or ".." in relative.parts:
        raise NpuperfError(f"{path}: not a file inside {root}")
    probe = root_abs
    for part in relative.parts:
        probe = probe / part
        try:
            mode = os.lstat(probe).st_mode
        except FileNotFoundError:
            break
        except OSError as exc:
            raise NpuperfError(f"cannot write {path}: {exc.strerror or exc}") from None
        if stat.S_ISLNK(mode):
            raise NpuperfError(f"{probe} is a symbolic link; npuperf never writes through one "
                               f"(it could lead out of the database {root}): replace it with "
                               f"a real {'file' if probe == target else 'directory'}")
    return target


def _umask() -> int:
    current = os.umask(0)
    os.umask(current)
    return current


class Transaction:
    """Stage files under `root`, then put them all in place or none.

    `lock`: True takes `<root>`'s lock (and recovers an interrupted transaction there before
    anything is read or staged), a held `DatabaseLock` (a session's) is used as is. There is
    no lock-less transaction: two writers of one directory must not interleave their commits.
    Writers get theirs from the front door, `database.Database.transaction` (tables) or
    `table.directory_transaction` (reports, caches).
    """

    def __init__(self, root: str | Path, purpose: str = "write", *,
                 lock: Literal[True] | DatabaseLock = True) -> None:
        if lock is not True and not isinstance(lock, DatabaseLock):
            raise TypeError(f"lock={lock!r}: every write takes its directory's lock (True) or "
                            f"runs under one held by the caller (a DatabaseLock)")
        self.root = Path(root)
        self.purpose = purpose
        self.txid = f"{os.getpid()}-{secrets.token_hex(4)}"
        self.notes: list[str] = []
        self._entries: dict[Path, _Entry] = {}
        self._own_lock = lock is True
        self._lock = DatabaseLock(self.root, purpose) if lock is True else lock
        self._open = False

    # -- lifetime -----------------------------------------------------------------------------
    def begin(self) -> Transaction:
        if self._open:
            return self
        if self._own_lock:
            self.notes += self._lock.acquire()
            try:
                self.notes += recover(self.root)
            except BaseException:
                self._lock.release()
                raise
        self._open = True
        return self

    def __enter__(self) -> Transaction:
        return self.begin()

    def __exit__(self, exc_type, exc, tb) -> None:
        try:
            if exc_type is None:
                self.commit()
            else:
                self.abort()
        finally:
            self.close()

    def close(self) -> None:
        self.abort()
        if self._own_lock:
            self._lock.release()
        self._open = False

    # -- staging ------------------------------------------------------------------------------
    def stage_text(self, path: str | Path, text: str, *, expect: object = UNCHECKED) -> Path:
        """A text file (UTF-8, written as given: no newline translation)."""
        return self.stage_with(path, lambda handle: handle.write(text), expect=expect)

    def stage_bytes(self, path: str | Path, data: bytes, *, expect: object = UNCHECKED) -> Path:
        def fill(handle) -> None:
            handle.flush()
            handle.buffer.write(data)
        return self.stage_with(path, fill, expect=expect)

    def stage_table(self, path: str | Path, frame, *, expect: object = UNCHECKED) -> Path:
        """A table (`pandas.DataFrame` of cell texts), with its own line terminator."""
        return self.stage_with(path, lambda handle: write_frame(frame, handle), expect=expect)

    def stage_with(self, path: str | Path, fill: Callable, *, expect: object = UNCHECKED
                   ) -> Path:
        """Stage `path` with what `fill(handle)` writes to a UTF-8 text handle.

        `expect`: the `FileStamp` the target had when it was read (None: it did not exist);
        the commit fails, writing nothing, when the file is not so any more. The default
        UNCHECKED stages without such a check.
        """
        return self._stage(Path(path), fill, expect)

    def _stage(self, path: Path, fill: Callable, expect: object) -> Path:
        if not self._open:
            self.begin()
        target = check_inside(self.root, path)
        previous = self._entries.pop(target, None)
        if previous is not None:  # staged twice: the later content wins
            with contextlib.suppress(OSError):
                previous.staged.unlink()
        staged = target.parent / f".{target.name}.{_TAG}{self.txid}.new"
        entry = _Entry(target, staged, target.parent / f".{target.name}.{_TAG}{self.txid}.old",
                       expect if previous is None else previous.expect)
        try:
            target.parent.mkdir(parents=True, exist_ok=True)
            check_inside(self.root, path)  # the directories just made are ours, not links
            fd = os.open(staged, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _NOFOLLOW
                         | getattr(os, "O_CLOEXEC", 0), 0o600)
        except OSError as exc:
            self.abort()
            raise NpuperfError(f"cannot write to {target.parent}: {exc.strerror or exc}") from None
        self._entries[target] = entry
        try:
            with os.fdopen(fd, "w", encoding="utf-8", newline="") as handle:
                fill(handle)
                handle.flush()
                os.fsync(handle.fileno())
                st = os.fstat(handle.fileno())
            entry.staged_id = (st.st_dev, st.st_ino)
            try:
                mode = os.stat(target).st_mode & 0o7777
            except FileNotFoundError:
                mode = 0o666 & ~_umask()
            os.chmod(staged, mode)
        except OSError as exc:
            self.abort()
            raise NpuperfError(f"cannot write {target}: {exc.strerror or exc}") from None
        except ContractError as exc:  # what was staged could not be read back
            self.abort()
            raise ContractError(f"{target}: {exc}") from None
        except BaseException:
            self.abort()
            raise
        return target

    @property
    def staged(self) -> list[Path]:
        return list(self._entries)

    # -- commit ---------------------------------------------------------------------------------
    def _check_unchanged(self) -> None:
        for entry in self._entries.values():
            if entry.expect is UNCHECKED:
                continue
            now = FileStamp.of(entry.target)
            if now != entry.expect:
                what = "was created" if entry.expect is None else (
                    "was removed" if now is None else "changed")
                raise NpuperfError(f"{entry.target} {what} since it was read (another program "
                                   f"wrote it); nothing was written, run the command again")

    def commit(self) -> list[Path]:
        """Put every staged file in place; on any failure none is (see the module doc)."""
        entries = list(self._entries.values())
        if not entries:
            return []
        try:
            self._check_unchanged()
        except BaseException:
            self.abort()
            raise
        journal = Path(os.path.abspath(self.root)) / f"{JOURNAL_PREFIX}{self.txid}"
        try:
            for entry in entries:
                entry.existed = os.path.lexists(entry.target)
            _write_journal(journal, self, entries)
        except OSError as exc:
            self.abort()
            raise NpuperfError(f"cannot write to {self.root}: {exc.strerror or exc}") from None
        except BaseException:
            self.abort()
            raise
        failed: BaseException | None = None
        current: Path | None = None
        try:
            for entry in entries:
                if entry.existed:
                    current = entry.target
                    _backup(entry.target, entry.backup)
            for directory in {e.target.parent for e in entries}:
                fsync_dir(directory)
            for entry in entries:
                current = entry.target
                os.replace(entry.staged, entry.target)
        except BaseException as exc:  # an OSError, or Ctrl-C between two renames
            failed = exc
        if failed is None:
            for directory in {e.target.parent for e in entries}:
                fsync_dir(directory)
            with contextlib.suppress(OSError):
                journal.unlink()
            fsync_dir(journal.parent)
            for entry in entries:
                with contextlib.suppress(OSError):
                    os.unlink(entry.backup)
            self._entries = {}
            return [e.target for e in entries]
        self._entries = {}
        problem = _undo(entries)
        if problem is None:
            with contextlib.suppress(OSError):
                journal.unlink()
            fsync_dir(journal.parent)
        if not isinstance(failed, OSError):
            raise failed
        reason = failed.strerror or str(failed)
        if problem is not None:
            raise NpuperfError(f"cannot put {current} in place ({reason}), and the files already "
                               f"replaced could not be restored now ({problem}); the next npuperf "
                               f"writer of {self.root} restores them") from None
        raise NpuperfError(f"cannot put {current} in place ({reason}); every file was left as "
                           f"it was") from None

    def abort(self) -> None:
        for entry in self._entries.values():
            with contextlib.suppress(OSError):
                entry.staged.unlink()
        self._entries = {}


_WRITE_ROWS = 50_000


def write_frame(frame, handle) -> None:
    """A table of cell texts as CSV, with the line terminator it was read with.

    A frame of text columns (every table this project reads or builds) goes straight to the
    csv module, a block of rows at a time: the writer and quoting pandas' `to_csv` uses too
    (QUOTE_MINIMAL, missing cells empty, same bytes), without its per-block conversions, which
    make `to_csv` about 1.5x slower on 10^5-row tables. Other frames go through `to_csv`."""
    import pandas as pd  # here: the transaction machinery itself needs no pandas

    terminator = frame.attrs.get("lineterminator", "\n")
    texts = all(pd.api.types.is_object_dtype(dtype) or isinstance(dtype, pd.StringDtype)
                for dtype in frame.dtypes)
    if not texts or not len(frame.columns):
        frame.to_csv(handle, index=False, lineterminator=terminator)
        return
    writer = csv.writer(handle, lineterminator=terminator)
    header = [str(c) for c in frame.columns]
    _check_line_length(",".join(header), MAX_HEADER_BYTES, "the header")
    writer.writerow(header)
    if len(frame.columns) < 2:  # a row of one empty field is quoted: the csv module knows
        columns = [_cells(column) for _, column in frame.items()]
        for at in range(0, len(frame), _WRITE_ROWS):
            block = [[str(c) for c in cells[at:at + _WRITE_ROWS].tolist()] for cells in columns]
            _check_rows(block[0] if block else [], at)
            writer.writerows(zip(*block))
        return
    # Each column's cells quoted as the csv module would (QUOTE_MINIMAL), then every row
    # joined: about half the time of its writer, which inspects every cell.
    fields = [_column_fields(column, terminator) for _, column in frame.items()]
    for at in range(0, len(frame), _WRITE_ROWS):
        rows = list(map(",".join, zip(*(cells[at:at + _WRITE_ROWS] for cells in fields))))
        _check_rows(rows, at)
        handle.write(terminator.join(rows))
        handle.write(terminator)


def _check_rows(rows: list[str], first: int, what: str = "row") -> None:
    """A line the table's readers would refuse (`files.MAX_LINE_BYTES`) is refused before it
    is written: a table its own reader cannot read is lost to every later command."""
    if rows and max(map(len, rows)) * 4 > MAX_LINE_BYTES:  # 4: the most bytes per character
        for number, row in enumerate(rows, start=first + 1):
            _check_line_length(row, MAX_LINE_BYTES, f"{what} {number}")


def check_table_text(path: Path, text: str) -> None:
    """`write_frame`'s check for table text written as is (rows appended to a table's own
    bytes): no line longer than its readers accept."""
    try:
        _check_rows(text.split("\n"), 0, "new line")
    except ContractError as exc:
        raise ContractError(f"{path}: {exc}") from None


def _check_line_length(line: str, limit: int, what: str) -> None:
    if len(line) * 4 <= limit:
        return
    size = len(line.encode("utf-8", "surrogatepass"))
    if size > limit:
        raise ContractError(f"{what} would be a line of {size:,} bytes, longer than the "
                            f"{limit >> 20} MiB the table's readers accept; nothing was written")


def _cells(column):
    """A column's cells, missing ones (NaN, None) as ""."""
    return (column.fillna("") if column.hasnans else column).to_numpy(dtype=object)


def _column_fields(column, terminator: str) -> list[str]:
    """`_csv_fields` of a column's cells; a column of texts only (the usual one) is taken as
    it is, without first looking for missing cells (a pass over each of tens of columns)."""
    cells = column.to_numpy(dtype=object).tolist()
    try:
        joined = "".join(cells)
    except TypeError:  # a missing cell, or one that is no text
        return _csv_fields(_cells(column).tolist(), terminator)
    return _csv_fields(cells, terminator, joined)


def _csv_fields(cells: list, terminator: str, joined: str | None = None) -> list[str]:
    """A column's cells as pandas' to_csv writes them: non-texts through str (numpy's floats
    too, which the csv module alone would write as their repr), a cell with a delimiter,
    quote or newline quoted (quotes doubled), one with a lone carriage return as this
    Python's csv module decides (versions differ)."""
    try:
        joined = "".join(cells) if joined is None else joined
    except TypeError:  # a cell that is no text
        cells = [c if type(c) is str else str(c) for c in cells]
        joined = "".join(cells)
    if "," not in joined and '"' not in joined and "\n" not in joined and "\r" not in joined:
        return cells
    return [f'"{c.replace(chr(34), chr(34) * 2)}"' if "," in c or '"' in c or "\n" in c
            else _csv_cell(c, terminator) if "\r" in c else c for c in cells]


def _csv_cell(cell: str, terminator: str) -> str:
    out = io.StringIO()
    csv.writer(out, lineterminator=terminator).writerow([cell, ""])
    return out.getvalue()[:-len(terminator) - 1]


def _backup(target: Path, backup: Path) -> None:
    """A second name for the old file (a copy where hard links are not supported)."""
    try:
        os.link(target, backup, follow_symlinks=False)
    except OSError:
        shutil.copy2(target, backup, follow_symlinks=False)
        with open(backup, "rb") as handle:
            os.fsync(handle.fileno())


def _write_journal(journal: Path, tx: Transaction, entries: list[_Entry]) -> None:
    record = {
        "txid": tx.txid, "pid": os.getpid(), "pid_started": process_start(os.getpid()),
        "host": socket.gethostname(),
        "purpose": tx.purpose, "started": time.strftime("%Y-%m-%dT%H:%M:%S"),
        "entries": [{"target": e.target.name, "dir": os.path.relpath(e.target.parent,
                                                                     journal.parent),
                     "existed": e.existed, "staged_id": list(e.staged_id)} for e in entries],
    }
    tmp = journal.with_name(journal.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _NOFOLLOW, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        json.dump(record, handle)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(tmp, journal)
    fsync_dir(journal.parent)


def _undo(entries: Iterable[_Entry]) -> str | None:
    """Put every old file back and remove the created ones; None when all went well."""
    problem = None
    for entry in entries:
        try:
            _undo_entry(entry.target, entry.staged, entry.backup, entry.existed,
                        entry.staged_id)
        except OSError as exc:
            problem = problem or f"{entry.target}: {exc.strerror or exc}"
    for directory in {e.target.parent for e in entries}:
        fsync_dir(directory)
    return problem


def _undo_entry(target: Path, staged: Path, backup: Path, existed: bool,
                staged_id: tuple[int, int]) -> None:
    if os.path.lexists(backup):
        now, old = _identity(target), _identity(backup)
        if now == old:
            os.unlink(backup)  # never replaced: the old file is still in place
        elif now in (tuple(staged_id), None):
            os.replace(backup, target)
        else:
            return  # neither ours nor the old file: written by someone else since; keep both
    elif not existed and _identity(target) == tuple(staged_id):
        os.unlink(target)  # created by this transaction
    with contextlib.suppress(FileNotFoundError):
        os.unlink(staged)


def _identity(path: Path) -> tuple[int, int] | None:
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return None
    return (st.st_dev, st.st_ino)


# -- recovery -----------------------------------------------------------------------------------

def _directories(root: Path) -> list[Path]:
    out = [root]
    if _SCAN_DEPTH:
        with contextlib.suppress(OSError), os.scandir(root) as entries:
            out += [Path(e.path) for e in entries if e.is_dir(follow_symlinks=False)
                    and not e.name.startswith(".")]
    return out


def pending_journals(root: str | Path) -> list[Path]:
    """Journals of unfinished transactions in `root` and its subdirectories."""
    found = []
    for directory in _directories(Path(root)):
        with contextlib.suppress(OSError), os.scandir(directory) as entries:
            found += [Path(e.path) for e in entries
                      if e.name.startswith(JOURNAL_PREFIX) and not e.name.endswith(".tmp")]
    return sorted(found)


def recover(root: str | Path) -> list[str]:
    """Roll back the interrupted transactions under `root` and remove stale temporary files.

    Call with `root`'s lock held. A journal whose writer still runs on this host (one that
    holds the lock of a subdirectory, such as reports/) is left alone. Returns notes saying
    what was done.
    """
    root = Path(root)
    notes = []
    for journal in pending_journals(root):
        note = _recover_one(journal)
        if note:
            notes.append(note)
    removed = _clean_temps(root)
    if removed:
        notes.append(f"removed {removed} temporary file(s) left in {root} by an interrupted "
                     f"writer")
    return notes


def _recover_one(journal: Path) -> str | None:
    try:
        st = os.lstat(journal)
        if not stat.S_ISREG(st.st_mode) or st.st_size > _JOURNAL_MAX:
            return f"{journal}: not a journal npuperf wrote; left alone"
        if hasattr(os, "getuid") and st.st_uid != os.getuid():
            return f"{journal}: written by another user; left alone"
        record = json.loads(journal.read_text(encoding="utf-8"))
        txid, pid = str(record["txid"]), int(record["pid"])
        host = str(record.get("host", ""))
        started = record.get("pid_started")
        started = None if started is None else float(started)
        entries = record["entries"]
    except (OSError, ValueError, KeyError, TypeError):
        return f"{journal}: unreadable journal of an interrupted write; left alone (remove it)"
    if pid != os.getpid() and host == socket.gethostname() \
            and writer_alive(pid, st.st_ctime, started):
        return None  # a writer at work under a subdirectory's lock: not ours to touch
    base = journal.parent
    restored = 0
    try:
        for item in entries:
            directory = (base / str(item["dir"])).resolve()
            name = str(item["target"])
            if "/" in name or name in ("", ".", "..") or not _is_under(directory, base.resolve()):
                raise ValueError(f"a path outside {base}")
            target = directory / name
            _undo_entry(target, directory / f".{name}.{_TAG}{txid}.new",
                        directory / f".{name}.{_TAG}{txid}.old", bool(item["existed"]),
                        tuple(item["staged_id"]))  # type: ignore[arg-type]
            restored += 1
    except (OSError, ValueError, KeyError, TypeError) as exc:
        return f"{journal}: could not roll back an interrupted write ({exc}); left for the next try"
    journal.unlink()
    fsync_dir(base)
    return (f"rolled back an interrupted write of {restored} file(s) in {base} "
            f"({record.get('purpose', '?')}, pid {pid}, started {record.get('started', '?')}): "
            f"the files are as they were before it")


def _is_under(path: Path, root: Path) -> bool:
    return path == root or root in path.parents


def _clean_temps(root: Path) -> int:
    removed = 0
    now = time.time()
    for directory in _directories(root):
        with contextlib.suppress(OSError), os.scandir(directory) as entries:
            for entry in entries:
                name = entry.name
                if not name.startswith(".") or not entry.is_file(follow_symlinks=False):
                    continue
                if _stale_temp(entry, directory == root, now):
                    with contextlib.suppress(OSError):
                        os.unlink(entry.path)
                        removed += 1
    return removed


def _stale_temps(root: Path) -> bool:
    """Whether staged files, backups or half-written journals of dead writers lie in `root`
    (one killed before it wrote its journal leaves no journal to say so)."""
    now = time.time()
    for directory in _directories(root):
        with contextlib.suppress(OSError), os.scandir(directory) as entries:
            if any(_TEMP_RE.match(e.name) and _stale_temp(e, directory == root, now)
                   for e in entries):
                return True
    return False


def _stale_temp(entry: os.DirEntry, at_root: bool, now: float) -> bool:
    """A temporary file of a writer that is gone (its pid is in the name), or of an earlier
    release older than a minute. ctime, not mtime: a backup is a hard link to the old file,
    whose mtime is older than its writer."""
    match = _TEMP_RE.match(entry.name)
    try:
        st = entry.stat(follow_symlinks=False)
    except OSError:
        return False
    if match:
        return not writer_alive(int(match.group("pid") or match.group("jpid")), st.st_ctime)
    return bool(_LEGACY_TEMP_RE.match(entry.name)) and at_root and \
        now - st.st_mtime > _LEGACY_AGE_S


def recover_if_free(root: str | Path, wait_s: float = 10.0) -> list[str]:
    """Before reading without the lock: roll back an interrupted transaction and remove
    temporary files of dead writers (cheap when there are none: a directory listing). When
    another process holds the lock meanwhile (another reader recovering, e.g. a second xdist
    worker), wait up to `wait_s` for it, so that every reader sees the recovered files; a
    writer that keeps the lock longer recovered before writing, and is left alone."""
    root = Path(root)
    deadline = time.monotonic() + wait_s
    while root.is_dir() and (pending_journals(root) or _stale_temps(root)):
        lock = DatabaseLock(root, "recovery of an interrupted write")
        try:
            notes = lock.acquire()
        except NpuperfError:
            if time.monotonic() > deadline:
                return []
            time.sleep(0.05)
            continue
        try:
            return notes + recover(root)
        finally:
            lock.release()
    return []
