"""Counters of many results as rows of one matrix (measure/counters.py): each result's
mapping behaves as the dict it replaces, copies and pickles are plain dicts, and the
backfill's counter columns from the matrix are the ones the dicts give."""

from __future__ import annotations

import copy
import dataclasses
import pickle

import numpy as np

from pytest_npuperf.db.columns import COUNTERS, microbench_counter
from pytest_npuperf.measure.counters import CounterMatrix, shared_rows
from pytest_npuperf.measure.result import STATUS_FAILED, CaseResult
from pytest_npuperf.replay import write as module

NAN = float("nan")


def _matrix() -> CounterMatrix:
    values = np.array([[1.0 / (i + 1) + k * 1e6 for k in range(len(COUNTERS))]
                       for i in range(7)])
    values[2, 4] = NAN  # result 2 lacks one counter
    values[4, :] = NAN  # result 4 has none
    values[:, 7] = NAN  # no result has this one
    return CounterMatrix(COUNTERS, values)


def _results(counters) -> list[CaseResult]:
    results = []
    for i, c in enumerate(counters):
        result = CaseResult(case_id=f"c{i}", nodeid="", kernel_type="MatMulV2", file="f",
                            signature="s")
        result.counters = c
        results.append(result)
    if len(results) > 5:
        results[5].status = STATUS_FAILED
    return results


def test_a_row_reads_as_the_dict_of_its_present_counters() -> None:
    rows = _matrix().rows()
    expected = {n: 1.0 / 3 + k * 1e6 for k, n in enumerate(COUNTERS) if k not in (4, 7)}
    assert rows[2] == expected and dict(rows[2]) == expected
    assert len(rows[2]) == len(COUNTERS) - 2 and COUNTERS[4] not in rows[2]
    assert rows[2].get(COUNTERS[4]) is None and list(rows[2]) == list(expected)
    assert not rows[4] and dict(rows[4]) == {}
    for made in (copy.copy(rows[2]), copy.deepcopy(rows[2]), pickle.loads(pickle.dumps(rows[2]))):
        assert type(made) is dict and made == expected
    result = _results(rows)[2]
    assert dataclasses.asdict(result)["counters"] == expected
    assert type(result.to_dict()["counters"]) is dict


def test_shared_rows_only_for_rows_of_one_matrix() -> None:
    rows = _matrix().rows()
    matrix, positions = shared_rows([rows[3], {}, rows[0]])
    assert matrix is rows[0].matrix and positions.tolist() == [3, -1, 0]
    assert shared_rows([rows[0], _matrix().rows()[1]]) is None  # two matrices
    assert shared_rows([rows[0], {COUNTERS[0]: 1.0}]) is None  # a dict among them
    assert shared_rows([{}, {}]) is None


def test_counter_columns_from_the_matrix_equal_those_from_dicts() -> None:
    rows = _matrix().rows()
    counters = [*rows[:6], {}]  # the last result has no counters
    from_matrix = module._counter_columns(_results(counters))
    from_dicts = module._counter_columns(_results([dict(c) for c in counters]))
    assert from_matrix == from_dicts
    assert microbench_counter(COUNTERS[7]) not in from_matrix  # nobody has it: untouched
    column = from_matrix[microbench_counter(COUNTERS[4])]
    assert column[2] == ""  # a counter a measured result lacks is cleared
    assert column[4] is None and column[5] is None and column[6] is None  # left alone
    assert from_matrix[microbench_counter(COUNTERS[0])][0] == "1"
    every = module._counter_columns(_results(rows[:4]))
    assert every == module._counter_columns(_results([dict(c) for c in rows[:4]]))
