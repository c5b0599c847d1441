"""The roles of a pytest session, chosen once at configure time (issue 17): the process that
owns a run and the processes that measure; a case's result crosses processes once."""

from __future__ import annotations

import pytest
import torch  # noqa: F401  (imported before any in-process pytester run: never twice)

from pytest_npuperf.harness.roles import measurer, owner
from pytest_npuperf.harness.route import RESULT_PROPERTY, pack, unpack
from pytest_npuperf.harness.stash import choose_roles
from pytest_npuperf.measure.result import STATUS_OK, CaseResult
from tests.replay_project import BENCH, FAST, MATMUL_ROWS, write_db


def _config(pytester, *, worker=False, controller=False):
    config = pytester.parseconfigure("-p", "no:unraisableexception")
    if worker:
        config.workerinput = {"workerid": "gw0", "workercount": 2}
    if controller:
        config.option.numprocesses, config.option.dist = 2, "load"
    return config


@pytest.mark.parametrize(("where", "owns", "measures"), [
    ("serial", True, True), ("worker", False, True), ("controller", True, False)])
def test_each_process_gets_its_roles_once(pytester, where, owns, measures):
    config = _config(pytester, worker=where == "worker", controller=where == "controller")
    roles = choose_roles(config)
    assert (roles.owns, roles.measures) == (owns, measures)
    assert roles.crosses is (where == "worker")
    assert (owner(config) is not None) is owns
    if measures:  # one context, shared by the roles of a process
        assert measurer(config).context is (owner(config) or measurer(config)).context


def _result() -> CaseResult:
    return CaseResult(case_id="MatMulV2-1x2x3-BF16-00000000", nodeid="n", kernel_type="MatMulV2",
                      file="MatMulV2.csv", signature="s", row=1, status=STATUS_OK, method="events")


class _Item:
    def __init__(self, config):
        self.config = config
        self.stash = pytest.Stash()


@pytest.mark.parametrize("where", ["serial", "worker"])
def test_a_result_is_put_on_its_report_as_it_travels(pytester, where):
    config = _config(pytester, worker=where == "worker")
    choose_roles(config)
    report = pytest.TestReport("n", ("f", 1, "n"), {}, "passed", None, "call", [])
    result = _result()
    pack(_Item(config), report, result)
    [(name, value)] = report.user_properties
    assert name == RESULT_PROPERTY
    # Serially the object itself; from a worker a dictionary, the one crossing.
    assert (value is result) if where == "serial" else isinstance(value, dict)
    received = unpack(report)
    assert received == result and unpack(report) is received  # read once, then kept


def test_a_serial_run_never_converts_a_result(pytester, monkeypatch):
    """In one process the result reaches the owner, pytest-html and the reports as it is."""
    calls = []
    monkeypatch.setattr(CaseResult, "to_dict", lambda self: calls.append("to") or {})
    monkeypatch.setattr(CaseResult, "from_dict", classmethod(
        lambda cls, data: calls.append("from") or _result()))
    pytester.makepyfile(**{"bench/test_kernels": BENCH})
    db = write_db(pytester.path / "db", {"MatMulV2": MATMUL_ROWS})
    result = pytester.runpytest("bench", "--npuperf-db", str(db), "--npuperf-out",
                                str(pytester.path / "out"), *FAST, "--npuperf-dry-run")
    result.assert_outcomes(passed=2)
    assert calls == []
