"""Hostile rows and crashed writers in replay sessions (issue 20): a row too large for the host
is skipped before anything is allocated, a row with tensors its kernel does not take fails, a
failing duplicate of a passing row is never written as `ok`, and a crashed writer's journal is
rolled back even when its pid went to another process.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import torch

from pytest_npuperf.db.errors import CellError
from pytest_npuperf.db.lock import process_start
from pytest_npuperf.db.table import read_table
from pytest_npuperf.db.transaction import JOURNAL_PREFIX, pending_journals, recover
from pytest_npuperf.devices import CpuBackend
from pytest_npuperf.kernels.spec import ReplaySkipped

from .conftest import tree_digest
from .kernel_rows import prepare, row
from .replay_project import BENCH, FAST, cells, write_db
from .test_db_transaction import _killed_child, files  # noqa: F401 (a fixture)

GIB = 1 << 30


class _SmallHost(CpuBackend):
    def available_memory(self) -> int | None:
        return 24 * GIB


def _three_10gb_tensors() -> dict[str, str]:
    shape = (GIB * 10 // 4,)  # float32: 10 GiB each
    return row([(shape, "FLOAT"), (shape, "FLOAT")], [(shape, "FLOAT")])


def test_a_row_beyond_the_hosts_memory_is_skipped_before_anything_is_allocated(monkeypatch):
    def allocation(*args, **kwargs):
        raise AssertionError("a tensor was allocated")

    for name in ("randn", "randint", "empty", "zeros"):
        monkeypatch.setattr(torch, name, allocation)
    with pytest.raises(ReplaySkipped, match=r"Add: its tensors need 40\.0 GiB and cpu has "
                                            r"24\.0 GiB available; nothing was allocated"):
        prepare("Add", _three_10gb_tensors(), backend=_SmallHost())


def test_a_replay_session_skips_a_row_larger_than_this_host(pytester):
    """The real host's memory: three 4 TB tensors fit on no test machine."""
    pytester.makepyfile(**{"bench/test_kernels": BENCH})
    huge = "1000000,1000000"
    db = write_db(pytester.path / "db", {"Add": [
        cells(f"{huge};{huge}", "FLOAT;FLOAT", "ND;ND", huge, "FLOAT"),
        cells("8,16;8,16", "FLOAT;FLOAT", "ND;ND", "8,16", "FLOAT")]})
    result = pytester.runpytest("bench", "--npuperf-db", str(db), "--npuperf-out",
                                str(pytester.path / "out"), *FAST, "-rs")
    result.assert_outcomes(passed=1, skipped=1)
    result.stdout.fnmatch_lines(["*Add: its tensors need 14,901.2 GiB and cpu has * GiB "
                                 "available; nothing was allocated*"])


def test_a_row_with_tensors_its_kernel_does_not_take_fails(monkeypatch):
    many = row([((8, 16), "FLOAT")] * 100_000, [((8, 16), "FLOAT")])
    with pytest.raises(CellError, match="Add: 100,000 input slots, 99,998 of them with a shape "
                                        "beyond the 2 this kernel takes"):
        prepare("Add", many)
    trailing_empty = row([((8, 16), "FLOAT"), ((8, 16), "FLOAT"), None], [((8, 16), "FLOAT")])
    prepare("Add", trailing_empty)  # an absent optional slot past the layout is no tensor


def test_a_failing_duplicate_of_a_passing_row_keeps_its_own_failure(pytester):
    """Same signature (the extra dtype entry is blanked): the second row's case fails, and
    it used to get the first row's duration with status ok, the failure recorded nowhere."""
    pytester.makepyfile(**{"bench/test_kernels": BENCH})
    db = write_db(pytester.path / "db", {"MatMulV2": [
        cells("16,64;32,64", "DT_BF16;DT_BF16", "ND;ND", "16,32", "DT_BF16"),
        cells("16,64;32,64", "DT_BF16;DT_BF16;DT_BF16", "ND;ND", "16,32", "DT_BF16")]})
    result = pytester.runpytest("bench", "--npuperf-db", str(db), "--npuperf-out",
                                str(pytester.path / "out"), *FAST)
    result.assert_outcomes(passed=1, failed=1)
    [target] = list((pytester.path / "out").glob("CPU_*/vllm_ascend/*"))
    table = read_table(target / "MatMulV2.csv")
    assert table["MicroBench Status"][0].startswith("ok")
    assert table["Average Duration(us)"][0] != ""
    assert table["MicroBench Status"][1].startswith("error: ") and \
        "3 entries for 2 shape slot(s)" in table["MicroBench Status"][1]
    assert table["Average Duration(us)"][1] == ""


@pytest.mark.skipif(not hasattr(os, "fork") or process_start(os.getpid()) is None,
                    reason="needs fork and /proc")
def test_a_crashed_writers_journal_is_rolled_back_when_its_pid_was_reused(files):  # noqa: F811
    """The journal names a pid that a live process has now: that process started at another
    time than the one the writer recorded, so it is not the writer."""
    before = tree_digest(files)
    _killed_child(files, 2)
    [journal] = pending_journals(files)
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        record = json.loads(journal.read_text())
        record["pid"] = other.pid  # the dead writer's pid, given to another process
        journal.write_text(json.dumps(record))
        notes = recover(files)
    finally:
        other.kill()
        other.wait()
    assert any("rolled back an interrupted write" in n for n in notes), notes
    assert not pending_journals(files)
    assert tree_digest(files) == before | {".npuperf.lock": tree_digest(files)[".npuperf.lock"]}


@pytest.mark.skipif(process_start(os.getpid()) is None, reason="needs /proc")
def test_a_journal_of_a_live_writer_that_recorded_its_start_is_left_alone(files):  # noqa: F811
    journal = files / f"{JOURNAL_PREFIX}{os.getppid()}-abcd1234"
    journal.write_text(json.dumps({"txid": f"{os.getppid()}-abcd1234", "pid": os.getppid(),
                                   "pid_started": process_start(os.getppid()),
                                   "host": os.uname().nodename, "entries": []}))
    assert recover(files) == []
    assert journal.exists()
