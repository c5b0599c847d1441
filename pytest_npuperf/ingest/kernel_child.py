"""Large kernel tables read in a child process, so that the caller's other reads (hand-off,
markers, database) run meanwhile on another core: pandas' parse of an op_summary holds the GIL
for most of its time, so a thread gives almost no overlap.

The child (`python -m pytest_npuperf.ingest.kernel_child SPEC OUT`, a fresh interpreter: no
fork of a process holding threads or a device runtime) appends each chunk's arrays to files
in a temporary directory as it reads (one file per array, one per counter column), so it never
holds the whole table; the rest (type names, identity cells, notes, its own peak memory) it
writes as JSON. The parent reads each file into the table's arrays and removes it at once.
The files are in the ordinary temporary directory, not in /dev/shm: on disk they are page
cache that the system can drop, in shared memory they would be memory neither process's
peak shows. A child that fails with an input error gives that one-line error; one that fails
otherwise (cannot start, crashes, is killed, runs past its time limit) is read again
in-process, with a note saying so. Small tables are read in-process: starting a child costs
about half a second.

Nothing outlives a parent that is killed (SIGKILL, a CI job's timeout): the child checks at
every chunk that its parent is still the process that started it, and else removes its
directory and ends; a directory left by a parent killed after its child finished carries the
parent's pid in its name and is removed by the next read on the machine once that pid is gone.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

from ..db.child import child_env, peak_mib
from ..db.columns import COUNTERS
from ..db.errors import EXIT_DATA, ContractError, NpuperfError
from ..db.lock import writer_alive
from .kernel_details import DEFAULT_CHUNK_ROWS
from .op_summary import CounterColumns, KernelTable, ProfileSource, _KernelReader, read_kernels

# Tables smaller than this are read in-process (a child costs ~0.3-0.5 s to start; a table of
# this size takes ~0.5 s to read).
CHILD_MIN_BYTES = 64 * 2**20
# A child still reading after this long is killed (and the table read in-process): a hang
# must not hold the command forever. Generous: 10^7 rows take about half a minute.
CHILD_TIMEOUT_S = 900.0
# The KernelTable's arrays and their types (as _KernelReader.table() makes them).
_ARRAYS = {"type_code": np.int32, "source": np.int32, "device": np.int32, "start": np.float64,
           "duration": np.float64, "counters": np.float64, "identity": np.int32}
_META = "meta.json"
_PREFIX = "npuperf_kernels_"


class _Orphaned(Exception):
    """The child's parent is gone: nobody will read what it writes."""


def table_bytes(sources: list[ProfileSource]) -> int:
    total = 0
    for source in sources:
        for path, _device in source.kernel_files:
            with contextlib.suppress(OSError):  # the read says what is wrong with it
                total += path.stat().st_size
    return total


class ChildRead:
    """The kernel tables of `sources` being read by a child process; `result()` waits for it
    (a future's interface, as `read_kernels_ahead` returns), `cancel()` ends it. Either
    removes the child's files."""

    def __init__(self, sources: list[ProfileSource], with_identity: bool, *,
                 chunk_rows: int = DEFAULT_CHUNK_ROWS, timeout_s: float = CHILD_TIMEOUT_S,
                 python: str = sys.executable) -> None:
        self.sources, self.with_identity, self.timeout_s = sources, with_identity, timeout_s
        self.chunk_rows = chunk_rows
        self.workdir: Path | None = None
        self.proc: subprocess.Popen | None = None
        self.start_error: str | None = None
        spec = {"with_identity": with_identity, "chunk_rows": chunk_rows,
                "sources": [[[str(p), d] for p, d in s.kernel_files] for s in sources]}
        try:
            remove_stale_workdirs()
            self.workdir = Path(tempfile.mkdtemp(prefix=f"{_PREFIX}{os.getpid()}_"))
            (self.workdir / "spec.json").write_text(json.dumps(spec), encoding="utf-8")
            self.proc = subprocess.Popen(
                [python, "-m", __name__, str(self.workdir / "spec.json"), str(self.workdir),
                 str(os.getpid())],
                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                env=child_env())
        except OSError as exc:
            self.start_error = f"cannot start: {exc.strerror or exc}"

    def result(self) -> KernelTable:
        try:
            failure = self.start_error or self._wait()
            if failure is None and self.workdir is not None:
                return _load(self.workdir)
            table = read_kernels(self.sources, with_identity=self.with_identity,
                                 chunk_rows=self.chunk_rows)
            files = ", ".join(str(p) for s in self.sources for p, _ in s.kernel_files)
            table.notes.append(f"{files}: the child process reading the kernel tables "
                               f"failed ({failure}); read in this process instead")
            return table
        finally:
            self.cancel()

    def _wait(self) -> str | None:
        """None when the child wrote its table; else why not. An input error in a table is
        raised as the one-line error the in-process read gives."""
        assert self.proc is not None and self.workdir is not None
        try:
            _out, err = self.proc.communicate(timeout=self.timeout_s)
        except subprocess.TimeoutExpired:
            return f"no result after {self.timeout_s:.0f} s"
        meta = _read_meta(self.workdir)
        if meta is not None and "error" in meta:
            kind = ContractError if meta["exit_code"] == EXIT_DATA else NpuperfError
            raise kind(meta["error"])
        if self.proc.returncode != 0 or meta is None:
            lines = err.decode(errors="replace").strip().splitlines()
            return f"exit status {self.proc.returncode}" + (f": {lines[-1]}" if lines else "")
        return None

    def cancel(self) -> bool:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.communicate()
        if self.workdir is not None:
            shutil.rmtree(self.workdir, ignore_errors=True)
        return True


def remove_stale_workdirs() -> list[Path]:
    """Remove the child directories in the temporary directory whose parent process is gone
    (killed before it could clean up), also when its pid went to a process that started
    after the directory was made."""
    removed = []
    with contextlib.suppress(OSError):
        for path in Path(tempfile.gettempdir()).glob(f"{_PREFIX}*_*"):
            owner = path.name[len(_PREFIX):].split("_", 1)[0]
            if owner.isdigit() and path.is_dir() and not writer_alive(int(owner),
                                                                      path.stat().st_ctime):
                shutil.rmtree(path, ignore_errors=True)
                removed.append(path)
    return removed


def _read_meta(workdir: Path) -> dict | None:
    try:
        return json.loads((workdir / _META).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def _column(path: Path, dtype) -> np.ndarray:
    """A spooled array, its file removed once read (absent: no rows)."""
    if not path.exists():
        return np.empty(0, dtype)
    array = np.fromfile(path, dtype)
    path.unlink()
    return array


def _load(workdir: Path) -> KernelTable:
    meta = _read_meta(workdir)
    assert meta is not None
    arrays = {name: _column(workdir / name, dtype) for name, dtype in _ARRAYS.items()
              if name not in ("counters", "identity")}
    # Mapped copy-on-write, not copied (10^6 rows: 200 MB); the mapping keeps the pages
    # after the file is removed.
    counters = np.asarray(np.load(workdir / "counters.npy", mmap_mode="c"))
    (workdir / "counters.npy").unlink()
    identity = (_column(workdir / "identity", np.int32) if meta["with_identity"] else None)
    table = KernelTable(types=meta["types"], identities=[tuple(c) for c in meta["identities"]],
                        files=[Path(p) for p in meta["files"]], notes=meta["notes"],
                        skipped=meta["skipped"], counters=counters, identity=identity, **arrays)
    table.notes.append(f"kernel tables read in a child process (its peak memory "
                       f"{meta['peak_mib']:.0f} MiB)")
    return table


class _Spool:
    """Stands for the reader's list of parts in the child: each part's arrays appended to
    their files as it is read, so the child never holds the whole table."""

    def __init__(self, out: Path, parent: int | None = None) -> None:
        self.out, self.parent = out, parent
        self.handles: dict[str, object] = {}

    def append(self, part: dict[str, np.ndarray]) -> None:
        if self.parent is not None and os.getppid() != self.parent:
            raise _Orphaned
        for name, array in part.items():
            if isinstance(array, CounterColumns):
                for index in range(len(array.columns)):
                    self._write(f"{name}.{index}", array.column(index))
            else:
                self._write(name, array.astype(_ARRAYS[name], copy=False))

    def _write(self, name: str, array: np.ndarray) -> None:
        handle = self.handles.get(name)
        if handle is None:
            handle = self.handles[name] = open(self.out / name, "wb")  # noqa: SIM115
        handle.write(memoryview(np.ascontiguousarray(array)).cast("B"))

    def close(self) -> None:
        for handle in self.handles.values():
            handle.close()

    def join_counters(self, rows: int) -> None:
        """The counter columns as one column-major .npy (as the in-process read keeps the
        matrix), joined by file copies: nothing of it enters this process's memory."""
        target = self.out / "counters.npy"
        with open(target, "wb") as handle:
            np.lib.format.write_array_header_1_0(handle, {
                "descr": np.lib.format.dtype_to_descr(np.dtype(np.float64)),
                "fortran_order": True, "shape": (rows, len(COUNTERS))})
            for index in range(len(COUNTERS)):
                column = self.out / f"counters.{index}"
                if column.exists():
                    with open(column, "rb") as part:
                        shutil.copyfileobj(part, handle, 2**24)
                    column.unlink()


def _child(spec_path: Path, out: Path, parent: int | None = None) -> int:
    spec = json.loads(spec_path.read_text(encoding="utf-8"))
    reader = _KernelReader(spec["with_identity"], spec["chunk_rows"])
    spool = reader.parts = _Spool(out, parent)
    meta: dict = {}
    try:
        for index, files in enumerate(spec["sources"]):
            for path, device in files:
                reader.add(Path(path), index, device)
    except _Orphaned:
        spool.close()
        shutil.rmtree(out, ignore_errors=True)
        return 3
    except NpuperfError as exc:
        meta = {"error": str(exc), "exit_code": exc.exit_code}
    else:
        meta = {"types": reader.types, "identities": reader.identities,
                "files": [str(p) for p in reader.files], "notes": reader.notes,
                "skipped": reader.skipped, "with_identity": reader.with_identity}
    finally:
        spool.close()
    if "error" not in meta:
        start = out / "start"
        spool.join_counters(start.stat().st_size // 8 if start.exists() else 0)
    meta["peak_mib"] = peak_mib()  # the parent reports it, to be added to its own peak
    partial = out / f"{_META}.part"  # written whole or not at all
    partial.write_text(json.dumps(meta), encoding="utf-8")
    partial.replace(out / _META)
    return 1 if "error" in meta else 0


if __name__ == "__main__":
    sys.exit(_child(Path(sys.argv[1]), Path(sys.argv[2]),
                    int(sys.argv[3]) if len(sys.argv) > 3 else None))
