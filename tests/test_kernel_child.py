"""Large kernel tables read by a child process (issue 10, ingest): the same table as the
in-process read on real-format data, input errors as the same one-line error, a child that
cannot start, crashes, is killed or hangs read again in-process with a note, and nothing left
behind in the temporary directory."""

from __future__ import annotations

import csv
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest

from pytest_npuperf.db.columns import COUNTERS
from pytest_npuperf.db.errors import ContractError
from pytest_npuperf.ingest.kernel_child import ChildRead
from pytest_npuperf.ingest.op_summary import KernelTable, find_sources, read_kernels
from pytest_npuperf.profiling.profiled import read_kernels_ahead
from tests.profile_data import prof_dir

CHUNK = 64  # rows per chunk: the 600-row table below is spooled in ten parts


@pytest.fixture(autouse=True)
def own_tempdir(tmp_path, monkeypatch) -> Path:
    """The child's files go to a directory of this test's, checked empty afterwards."""
    spool = tmp_path / "spool"
    spool.mkdir()
    monkeypatch.setattr("tempfile.tempdir", str(spool))
    yield spool
    assert list(spool.iterdir()) == []


def real_run(realdata: Path, root: Path, *, rows: int = 600, bad: str | None = None) -> Path:
    """A PROF directory whose op_summary replicates the real CANN 8.3 sample's rows (its
    counters, task types, block dims) under several kernel types, shapes and times, with a
    record without a time (skipped) and one launch exported twice (dropped)."""
    sample = next((realdata / "op_summary").glob("*_op_summary_*.csv"))
    with open(sample, encoding="utf-8-sig", newline="") as handle:
        reader = csv.reader(handle)
        header = next(reader)
        template = [r for r in reader if r]
    col = {name: header.index(name) for name in header}
    output = prof_dir(root) / "mindstudio_profiler_output"
    output.mkdir(parents=True)
    path = output / "op_summary_20260605161737.csv"
    with open(path, "w", encoding="utf-8", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(header)
        for i in range(rows):
            row = list(template[i % len(template)])
            row[col["OP Type"]] = ("MatMulV2", "RmsNorm", "FlashAttentionScore")[i % 3]
            row[col["Input Shapes"]] = f"{1 + i % 7},128;64,128"
            row[col["Task ID"]] = str(i)
            row[col["Task Start Time(us)"]] = f"{1_780_676_244_000_000.0 + 10 * i:.3f}\t"
            row[col["Task Duration(us)"]] = f"{5 + i % 13 + 0.125 * i:.3f}"
            if i == 17:
                row[col["Task Start Time(us)"]] = "N/A"
            writer.writerow(row)
            if i == 40:
                writer.writerow(row)  # the same launch exported twice
        if bad is not None:
            row[col["Task Duration(us)"]] = bad
            writer.writerow(row)
    (output / "msprof_tx_20260605161737.csv").write_text("")
    return root


def assert_same(child: KernelTable, direct: KernelTable) -> None:
    for name in ("type_code", "source", "device", "start", "duration", "counters",
                 "identity"):
        a, b = getattr(child, name), getattr(direct, name)
        if b is None:
            assert a is None, name
            continue
        assert a.dtype == b.dtype and a.shape == b.shape, name
        assert a.flags.f_contiguous == b.flags.f_contiguous, name
        np.testing.assert_array_equal(a, b, err_msg=name)
    assert child.types == direct.types
    assert child.identities == direct.identities
    assert child.files == direct.files and child.skipped == direct.skipped
    assert child.notes[:-1] == direct.notes
    assert child.notes[-1].startswith("kernel tables read in a child process (its peak memory")


@pytest.mark.parametrize("with_identity", [True, False])
def test_child_read_equals_the_in_process_read_on_real_format_data(realdata, tmp_path,
                                                                   monkeypatch, with_identity):
    # Started from another directory, without PYTHONPATH: the child runs this checkout's code.
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("PYTHONPATH", raising=False)
    sources = find_sources(real_run(realdata, tmp_path / "run"))
    direct = read_kernels(sources, with_identity=with_identity, chunk_rows=CHUNK)
    assert len(direct) == 599 and direct.skipped == 2 and len(direct.types) == 3
    assert np.isfinite(direct.counters).any()
    child = ChildRead(sources, with_identity, chunk_rows=CHUNK).result()
    assert_same(child, direct)


def test_counters_a_table_lacks_are_nan_in_both_reads(realdata, tmp_path):
    """An older export without some counters (CANN 7.x): those columns of the matrix are
    NaN, the others hold the file's values, in the child's read as in the in-process one."""
    run = real_run(realdata, tmp_path / "run")
    table = next(run.rglob("op_summary_*.csv"))
    with open(table, encoding="utf-8", newline="") as handle:
        rows = list(csv.reader(handle))
    dropped = {"aic_mac_ratio", "aiv_vec_time(us)", "cube_utilization(%)"}
    keep = [i for i, name in enumerate(rows[0]) if name not in dropped]
    with open(table, "w", encoding="utf-8", newline="") as handle:
        csv.writer(handle).writerows([[row[i] for i in keep] for row in rows])
    sources = find_sources(run)
    direct = read_kernels(sources, chunk_rows=CHUNK)
    assert_same(ChildRead(sources, False, chunk_rows=CHUNK).result(), direct)
    missing = [i for i, name in enumerate(COUNTERS) if name in dropped]
    assert np.isnan(direct.counters[:, missing]).all()
    assert np.isfinite(np.delete(direct.counters, missing, axis=1)).any(axis=0).all()


def test_a_table_of_no_launches_is_the_same_empty_table(realdata, tmp_path):
    sources = find_sources(real_run(realdata, tmp_path / "run", rows=0))
    child = ChildRead(sources, True, chunk_rows=CHUNK).result()
    assert len(child) == 0 and child.counters.shape == (0, 25)
    assert_same(child, read_kernels(sources, with_identity=True, chunk_rows=CHUNK))


def test_large_tables_go_to_a_child_small_ones_stay_in_process(realdata, tmp_path,
                                                               monkeypatch):
    sources = find_sources(real_run(realdata, tmp_path / "run"))
    with ThreadPoolExecutor(1) as pool:
        small = read_kernels_ahead(pool, sources)
        assert isinstance(small, Future)
        monkeypatch.setattr("pytest_npuperf.profiling.profiled.CHILD_MIN_BYTES", 1)
        large = read_kernels_ahead(pool, sources)
        assert isinstance(large, ChildRead) and not large.with_identity  # marker files
        large.cancel()
        assert small.result().identity is None


def test_a_bad_number_is_the_in_process_reads_one_line_error(realdata, tmp_path):
    sources = find_sources(real_run(realdata, tmp_path / "run", bad="12x5"))
    with pytest.raises(ContractError) as direct:
        read_kernels(sources)
    with pytest.raises(ContractError) as child:
        ChildRead(sources, False, chunk_rows=CHUNK).result()
    assert str(child.value) == str(direct.value)
    assert "op_summary_20260605161737.csv" in str(child.value) and "12x5" in str(child.value)
    assert "\n" not in str(child.value)


def fake_python(tmp_path: Path, body: str) -> str:
    script = tmp_path / "python"
    script.write_text(f"#!/bin/sh\n{body}\n")
    script.chmod(0o755)
    return str(script)


@pytest.mark.parametrize(("body", "why"), [
    ("echo 'Traceback: boom' >&2; exit 3", "exit status 3: Traceback: boom"),
    ("kill -9 $$", "exit status -9"),
    ("exec sleep 30", "no result after 1 s"),
    (None, "cannot start"),
])
def test_a_failed_child_is_read_again_in_process_with_a_note(realdata, tmp_path, body, why):
    sources = find_sources(real_run(realdata, tmp_path / "run"))
    python = fake_python(tmp_path, body) if body else str(tmp_path / "no-such-python")
    read = ChildRead(sources, True, chunk_rows=CHUNK, python=python, timeout_s=1)
    table = read.result()
    direct = read_kernels(sources, with_identity=True)
    np.testing.assert_array_equal(table.duration, direct.duration)
    assert table.identities == direct.identities
    note = table.notes[-1]
    assert "op_summary_20260605161737.csv: the child process reading the kernel tables " \
           f"failed ({why}" in note and note.endswith("read in this process instead")
    assert read.proc is None or read.proc.poll() is not None  # nothing left running
    assert not read.workdir.exists()


def test_a_read_not_waited_for_is_ended_and_its_files_removed(realdata, tmp_path):
    sources = find_sources(real_run(realdata, tmp_path / "run"))
    read = ChildRead(sources, False, python=fake_python(tmp_path, "exec sleep 30"))
    assert read.workdir.exists()
    read.cancel()
    assert read.proc.poll() is not None and not read.workdir.exists()


def test_a_child_whose_parent_is_killed_removes_its_files_and_ends(realdata, tmp_path,
                                                                  own_tempdir):
    """A parent killed mid-read (SIGKILL: no cleanup runs): the child sees at its next chunk
    that its parent is gone, removes its directory and ends."""
    import subprocess
    import sys
    import time

    run = real_run(realdata, tmp_path / "run", rows=6000)
    parent = (f"import os, sys, tempfile; tempfile.tempdir = {str(own_tempdir)!r}\n"
              "from pytest_npuperf.ingest.kernel_child import ChildRead\n"
              "from pytest_npuperf.ingest.op_summary import find_sources\n"
              f"read = ChildRead(find_sources({str(run)!r}), False, chunk_rows={CHUNK})\n"
              "print(read.workdir, read.proc.pid, flush=True)\n"
              "os.kill(os.getpid(), 9)\n")
    done = subprocess.run([sys.executable, "-c", parent], capture_output=True, text=True,
                          cwd=Path(__file__).resolve().parents[1], timeout=60)
    assert done.returncode == -9, done.stderr
    workdir = Path(done.stdout.split()[0])
    assert workdir.parent == own_tempdir and workdir.name.startswith("npuperf_kernels_")
    deadline = time.monotonic() + 60
    while workdir.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not workdir.exists()


def test_directories_of_dead_parents_are_removed_by_the_next_read(realdata, tmp_path,
                                                                  own_tempdir):
    import os
    import subprocess
    import sys

    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True)
    dead_pid = int(gone.stdout)  # exited and reaped: no such process now
    stale = own_tempdir / f"npuperf_kernels_{dead_pid}_abc123"
    live = own_tempdir / f"npuperf_kernels_{os.getpid()}_def456"
    other = own_tempdir / "npuperf_kernels_notapid"
    for path in (stale, live, other):
        path.mkdir()
        (path / "start").write_bytes(b"\0" * 64)
    sources = find_sources(real_run(realdata, tmp_path / "run"))
    table = ChildRead(sources, False, chunk_rows=CHUNK).result()
    assert len(table) == 599
    assert not stale.exists() and live.exists() and other.exists()
    for path in (live, other):  # the fixture checks the directory is left empty
        (path / "start").unlink()
        path.rmdir()
