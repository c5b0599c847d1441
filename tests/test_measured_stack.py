"""A device copy keeps the source's version directory name (the serving stack whose kernels
its rows are, the name the simulator looks the tables up by) and records the stack that
measured them in measured_stack.json beside its tables; a second stack is said."""

from __future__ import annotations

import json

from pytest_npuperf.db.layout import database_dir, parse_version_dir
from pytest_npuperf.db.measured_stack import MEASURED_STACK_FILE
from pytest_npuperf.replay.write import write_results
from pytest_npuperf.report.summary import non_native_note
from tests.replay_project import MATMUL_ROWS, VERSION, write_db
from tests.test_write_results import result_for


def _measure(source, target, run_id: str, stack: str):
    results = [result_for(source, "MatMulV2.csv", 0, stack=stack,
                          timestamp=f"2026-11-2{run_id[-1]}T08:00:00")]
    return write_results(source, target, results, native=False, run_id=run_id,
                    stamp="20261126_080000")


def test_a_cpu_copy_is_named_after_the_source_and_records_the_stack_that_measured_it(tmp_path):
    source = write_db(tmp_path / "data", {"MatMulV2": MATMUL_ROWS})
    target = database_dir(tmp_path / "out", "CPU_TEST", source.name)
    first = _measure(source, target, "r1", "torch 2.13.0+cpu, threads 2")
    assert target.name == VERSION and parse_version_dir(target.name).torch == "2.9.0"
    record = json.loads((target / MEASURED_STACK_FILE).read_text())
    assert record["device"] == "CPU_TEST" and record["version_dir"] == VERSION
    assert [(e["stack"], e["first_run"], e["last_run"], e["runs"]) for e in record["stacks"]] \
        == [("torch 2.13.0+cpu, threads 2", "r1", "r1", 1)]
    assert not any("measured with" in n for n in first.notes)
    assert MEASURED_STACK_FILE in non_native_note(first)
    _measure(source, target, "r2", "torch 2.13.0+cpu, threads 2")
    later = _measure(source, target, "r3", "torch 2.9.0+cpu, threads 2")
    record = json.loads((target / MEASURED_STACK_FILE).read_text())
    assert [(e["stack"], e["runs"], e["last_run"]) for e in record["stacks"]] == [
        ("torch 2.13.0+cpu, threads 2", 2, "r2"), ("torch 2.9.0+cpu, threads 2", 1, "r3")]
    assert any("was measured with torch 2.13.0+cpu, threads 2 before" in n for n in later.notes)


def test_a_native_database_gets_no_record(tmp_path):
    source = write_db(tmp_path / "data", {"MatMulV2": MATMUL_ROWS}, device="CPU_TEST")
    results = [result_for(source, "MatMulV2.csv", 0, stack="torch 2.13.0+cpu")]
    write_results(source, source, results, native=True, run_id="r1", stamp="20261126_080000")
    assert not (source / MEASURED_STACK_FILE).exists()
