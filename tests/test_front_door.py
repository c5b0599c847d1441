"""One front door: every writer holds the lock of the directory it writes in (reports, the CPU
peak cache, `--report` files and grid rows too), and only the db package builds a Transaction."""

from __future__ import annotations

import ast
import os
import textwrap
from pathlib import Path

import pytest

import pytest_npuperf
from pytest_npuperf.db.lock import LOCK_NAME, DatabaseLockedError, database_lock
from pytest_npuperf.db.table import write_text
from pytest_npuperf.db.transaction import Transaction
from pytest_npuperf.devices import cpu_peak as cpu_peak_module
from pytest_npuperf.devices.base import Peak
from pytest_npuperf.grid import run_grid
from pytest_npuperf.report import write_reports

from .conftest import tree_digest
from .report_data import outcome, session, session_results

PACKAGE = Path(pytest_npuperf.__file__).parent


def constructions(source: str, name: str = "Transaction") -> list[int]:
    """Lines that call `name(...)` or `module.name(...)`."""
    return sorted(node.lineno for node in ast.walk(ast.parse(source))
                  if isinstance(node, ast.Call)
                  and getattr(node.func, "id", getattr(node.func, "attr", None)) == name)


def test_the_check_sees_a_construction() -> None:
    assert constructions("tx = Transaction(root, 'p')\n") == [1]
    assert constructions("import x\nwith x.Transaction(root) as tx:\n    pass\n") == [2]
    assert constructions("def f(tx: Transaction) -> None:\n    tx.commit()\n") == []


def test_only_the_db_package_constructs_a_transaction() -> None:
    found = [f"{path.relative_to(PACKAGE)}:{line}" for path in sorted(PACKAGE.rglob("*.py"))
             if path.relative_to(PACKAGE).parts[0] != "db"
             for line in constructions(path.read_text(encoding="utf-8"))]
    assert found == []


def test_a_transaction_always_locks(tmp_path) -> None:
    with pytest.raises(TypeError, match="lock"):
        Transaction(tmp_path, "test", lock=False)  # type: ignore[arg-type]


def test_a_file_write_takes_its_directory_lock_and_leaves_no_lock_file(tmp_path) -> None:
    target = tmp_path / "check.md"
    with database_lock(tmp_path, "another writer"), pytest.raises(DatabaseLockedError,
                                                                   match="another writer"):
        write_text(target, "x\n")
    assert not target.exists()
    write_text(target, "x\n")
    assert os.listdir(tmp_path) == ["check.md"]


def test_reports_lock_their_own_directory_not_the_database(tmp_path) -> None:
    db = tmp_path / "db"
    reports = db / "reports"
    with database_lock(db, "pytest run"):  # the session holds its database's lock meanwhile
        paths = write_reports(outcome(tmp_path), session_results(), session(), reports)
    assert sorted(os.listdir(reports)) == sorted(p.name for p in paths.all())  # no lock file
    before = tree_digest(reports)
    with database_lock(reports, "another run"), pytest.raises(DatabaseLockedError,
                                                                match="another run"):
        write_reports(outcome(tmp_path), session_results(), session(), reports)
    assert tree_digest(reports) == before


def test_a_peak_cache_held_by_another_worker_is_left_to_it(tmp_path, monkeypatch) -> None:
    measured = Peak(90e9, 8e9, (), memory="DRAM", measured=True, source="now")
    monkeypatch.setattr(cpu_peak_module, "measure_cpu_peak", lambda: measured)
    cache = cpu_peak_module.cache_file(tmp_path)
    cache.parent.mkdir()
    with database_lock(cache.parent, "another xdist worker"):
        assert cpu_peak_module.cpu_peak("Test CPU", tmp_path) == measured  # no error
        assert os.listdir(cache.parent) == [LOCK_NAME]  # its lock, nothing written under it
    assert cpu_peak_module.cpu_peak("Test CPU", tmp_path) == measured
    assert os.listdir(cache.parent) == [cache.name]


def test_a_comm_validate_report_takes_its_directory_lock(tmp_path, capsys) -> None:
    from pytest_npuperf.cli import main

    (tmp_path / "hcom_broadcast_.csv").write_text(
        "message_bytes,num_devices,dtype,topology_tier,Duration(us),bandwidth_gbps\n"
        "1024,8,DT_BF16,1,20.0,\n")
    report = tmp_path / "out" / "check.md"
    report.parent.mkdir()
    with database_lock(report.parent, "another report"):
        assert main(["comm-validate", "--db", str(tmp_path), "--report", str(report)]) != 0
    assert "being written by" in capsys.readouterr().err and not report.exists()


def test_grid_rows_go_through_the_database_lock(tmp_path) -> None:
    config = tmp_path / "grid.yaml"
    config.write_text(textwrap.dedent("""\
        patterns:
          add: {iterators: {T: [1, 2]}, inputs: ["(T, 64)", "(T, 64)"], outputs: ["(T, 64)"]}
        assignments: {Add: add}
        """))
    db = tmp_path / "db"
    db.mkdir()
    with database_lock(db, "npuperf parse"), pytest.raises(DatabaseLockedError,
                                                           match="npuperf parse"):
        run_grid(db, config_path=config, rows=0, show_progress=False)
    assert os.listdir(db) == []
    run_grid(db, config_path=config, rows=0, show_progress=False)
    assert sorted(os.listdir(db)) == ["Add.csv", "collection_meta.yaml", "op_mapping.yaml"]
