"""run_<stamp>.json: strict JSON, every case, totals whose arithmetic holds."""

from __future__ import annotations

import dataclasses
import io
import json
import math
import tempfile

import pytest

from pytest_npuperf.measure.result import CaseResult
from pytest_npuperf.report import dumps_run_json, run_json
from pytest_npuperf.report.runjson import (
    case_pieces,
    jsonable,
    run_json_pieces,
    spool_cases,
    spooled_run_json,
)
from pytest_npuperf.report.terminal import terminal_lines

from .report_data import RUN_ID, STAMP, outcome, session, session_results


def _loaded(**kw: object) -> dict:
    results = session_results()
    return json.loads(dumps_run_json(run_json(outcome(**kw), results, session())))


def test_round_trip_is_strict_json() -> None:
    data = run_json(outcome(), session_results(), session())
    text = dumps_run_json(data)
    assert "NaN" not in text and "Infinity" not in text
    assert json.loads(text) == json.loads(json.dumps(data, allow_nan=False))
    assert json.loads(text)["session"]["options"]["nan_option"] is None
    assert json.loads(text)["session"]["options"]["out"] == "reports-out"


def test_every_case_with_its_fields() -> None:
    data = _loaded()
    results = session_results()
    assert [c["nodeid"] for c in data["cases"]] == [r.nodeid for r in results]
    first = data["cases"][0]
    assert first["kernel_type"] == "MatMulV2" and first["file"] == "MatMulV2.csv"
    assert first["signature"] == results[0].signature and first["row"] == 1
    assert first["status"] == "ok" and first["method"] == "profiler"
    assert first["implementation"] == "MatMulV2 implementation"
    assert first["stats"] == {"samples": 5, "mean": pytest.approx(50.7), "median": 41.0,
                              "std": pytest.approx(results[0].stats.std), "min": 40.0,
                              "max": 90.0, "p90": pytest.approx(70.8), "q1": 40.5, "q3": 42.0,
                              "outliers": 1}
    assert first["statistic"] == "median" and first["value"] == 41.0
    assert first["precision"] == 0.025 and first["stop_reason"] == "precision reached"
    # achieved throughput at the median: 2*128*7168*3584 flops in 41 us
    assert first["achieved_tflops"] == pytest.approx(2 * 128 * 7168 * 3584 / 41e-6 / 1e12)
    assert first["achieved_gbps"] == pytest.approx(results[0].bytes / 41e-6 / 1e9)
    failed = next(c for c in data["cases"] if c["status"] == "failed")
    assert failed["stats"] is None and failed["achieved_tflops"] is None
    assert "out of memory" in failed["error"] and failed["detail"] == ""
    suspect = next(c for c in data["cases"] if c["status"] == "suspect")
    assert suspect["bound_us"] == 4.2 and suspect["achieved_gbps"] is not None
    add = next(c for c in data["cases"] if c["kernel_type"] == "Add")
    assert add["achieved_tflops"] is None and add["achieved_gbps"] is None  # no work known


def test_totals_and_duty_cycle() -> None:
    data = _loaded()
    totals = data["totals"]
    assert totals["cases"] == 10
    assert totals["session_wall_s"] == 40.0
    assert totals["time_in_calls_s"] == pytest.approx(1.5 + 0.2 + 0.1 + 0.01 + 0.05)
    assert totals["duty_cycle"] == pytest.approx(totals["time_in_calls_s"] / 40.0)
    assert totals["per_case_overhead_s"] == pytest.approx((40.0 - 1.86) / 10)
    assert totals["cases_wall_s"] == pytest.approx(sum(c["wall_s"] for c in data["cases"]))
    assert totals["by_status"] == {"ok": 4, "failed": 1, "error": 1, "timeout": 1,
                                   "skipped": 2, "suspect": 1, "noisy": 0, "crashed": 0,
                                   "unattributed": 0}
    assert totals["by_kernel_type"]["MatMulV2"] == {"cases": 2, "ok": 2}
    assert totals["by_kernel_type"]["GroupedMatmul"] == {"cases": 2, "skipped": 2}
    assert sum(v["cases"] for v in totals["by_kernel_type"].values()) == 10


def test_session_database_and_outcome() -> None:
    data = _loaded()
    assert data["run_id"] == RUN_ID and data["stamp"] == STAMP
    assert data["session"]["device"]["database_device"] == "CPU_x86_64"
    assert data["session"]["options"]["devices"] == ["cpu"]
    assert data["session"]["workers"] == 1
    assert data["database"]["native"] is False and data["database"]["dry_run"] is False
    assert data["database"]["target"].endswith("vllm0.18.0_torch2.9.0_cann8.5")
    assert [f["file"] for f in data["outcome"]["files"]] == ["MatMulV2.csv", "MatMulV3.csv",
                                                            "RmsNorm.csv"]
    assert data["outcome"]["totals"]["updated"] == 3
    assert data["outcome"]["hotspots"] == 4 and data["outcome"]["gap_rows"] == 5


def test_dry_run_target_is_null() -> None:
    data = _loaded(dry_run=True)
    assert data["database"]["target"] is None and data["database"]["dry_run"] is True


def test_zero_wall_time_gives_null_duty_cycle_and_no_cases_still_dumps() -> None:
    data = json.loads(dumps_run_json(run_json(outcome(), [], session(wall_s=0.0))))
    assert data["totals"]["duty_cycle"] is None
    assert data["cases"] == [] and data["totals"]["cases"] == 0


def test_non_finite_case_numbers_become_null() -> None:
    result = session_results()[0]
    result.bound_us = math.inf
    result.wall_s = math.nan
    data = json.loads(dumps_run_json(run_json(outcome(), [result], session())))
    assert data["cases"][0]["bound_us"] is None and data["cases"][0]["wall_s"] is None
    assert data["totals"]["cases_wall_s"] == 0.0


def test_result_round_trips_through_its_dict_form() -> None:
    # Results reach the controller as dicts from xdist workers: the report must not care.
    results = [CaseResult.from_dict(json.loads(json.dumps(r.to_dict())))
               for r in session_results()]
    assert run_json(outcome(), results, session())["totals"] == \
        run_json(outcome(), session_results(), session())["totals"]


def test_jsonable_handles_odd_values() -> None:
    import numpy as np
    assert jsonable({"a": (1, 2), 3: {2, 1}, "n": np.int64(4), "f": np.float32(0.5),
                     "arr": np.array([1.0, np.nan]), "x": object}) == {
        "a": [1, 2], "3": [1, 2], "n": 4, "f": 0.5, "arr": [1.0, None], "x": str(object)}


def test_unknown_status_is_counted_not_lost() -> None:
    results = session_results()
    results[0].status = "stale"
    counts = run_json(outcome(), results, session())["totals"]["by_status"]
    assert counts["stale"] == 1 and counts["ok"] == 3
    assert sum(counts.values()) == len(results)


def test_overhead_is_every_second_outside_the_timed_calls_and_its_parts_add_up() -> None:
    results = session_results()
    results[0].overhead_s = {"inputs": 0.3, "warm-up calls": 0.2, "references": 0.01}
    results[1].overhead_s = {"inputs": 0.1, "verification": 0.05}
    parts = {"start-up": 6.0, "between cases": 1.0, "database write": 0.5, "history": 0.25,
             "figures": 0.1, "reports": 0.2}
    info = dataclasses.replace(session(), workers=2, parts=parts)
    totals = json.loads(dumps_run_json(run_json(outcome(), results, info)))["totals"]
    in_calls = totals["time_in_calls_s"]
    assert totals["overhead_s"] == pytest.approx(2 * 40.0 - in_calls)
    assert totals["per_case_overhead_s"] == pytest.approx(totals["overhead_s"] / 10)
    got = totals["overhead_parts_s"]
    assert sum(got.values()) == pytest.approx(totals["overhead_s"])
    assert got["inputs"] == pytest.approx(0.4) and got["verification"] == pytest.approx(0.05)
    # Beyond the parts a case measured, the rest of its time outside its calls.
    beyond = sum(r.wall_s - r.time_in_calls_s for r in results)
    assert got["rest of the cases"] == pytest.approx(beyond - 0.66)
    # The session's own parts count once per measuring process.
    assert got["start-up"] == 12.0 and got["reports"] == 0.4
    assert list(got)[:2] == ["start-up", "inputs"] and list(got)[-1] == "other"
    assert "warm-up calls" in totals["overhead_definition"]


def test_a_backfill_of_calls_made_elsewhere_is_all_overhead_and_has_no_duty_cycle() -> None:
    info = dataclasses.replace(session(), timed_here=False, parts={"profile read": 30.0})
    results = session_results()
    totals = json.loads(dumps_run_json(run_json(outcome(), results, info)))["totals"]
    assert totals["overhead_s"] == 40.0 and totals["duty_cycle"] is None
    assert totals["time_in_calls_s"] > 0  # the cases' own calls, made in their run
    assert totals["overhead_parts_s"] == {"profile read": 30.0, "other": 10.0}
    lines = terminal_lines(outcome(), results, info, None)
    assert not any(line.startswith("duty cycle") for line in lines)
    assert "overhead 40.00 s (4000.0 ms per case): profile read 30.00 s, other 10.00 s" in lines


def test_the_run_json_written_in_pieces_is_the_same_text(monkeypatch) -> None:
    from pytest_npuperf.report import runjson

    monkeypatch.setattr(runjson, "CASES_PER_PIECE", 4)
    results = session_results() * 3
    data = run_json(outcome(), results, session())
    whole = dumps_run_json(data)
    lines = case_pieces(results)
    assert len(lines) == 8
    pieces = run_json_pieces(run_json(outcome(), results, session(), cases=False), lines)
    assert "".join(pieces) == whole
    assert run_json_pieces(run_json(outcome(), [], session(), cases=False), []) == \
        [dumps_run_json(run_json(outcome(), [], session()))]
    # Spooled to a file first (the reports' way), then copied after the head: the same bytes,
    # into memory (through a buffer) and into a file (inside the kernel: os.sendfile).
    for chosen in (results, []):
        for target in (io.BytesIO, tempfile.TemporaryFile):
            with tempfile.TemporaryFile() as spool, target() as raw:
                count = spool_cases(chosen, spool)
                handle = io.TextIOWrapper(raw, encoding="utf-8", newline="")
                spooled_run_json(run_json(outcome(), chosen, session(), cases=False), spool,
                                 count)(handle)
                handle.flush()
                raw.seek(0)
                assert raw.read().decode() == dumps_run_json(run_json(outcome(), chosen,
                                                                      session())), target


def test_a_case_line_is_the_same_json_from_orjson_and_from_the_stdlib(monkeypatch) -> None:
    """orjson writes the case lines when it is installed, the stdlib when it is not (or for
    a value orjson refuses): the same JSON either way, read back equal, and the run JSON
    written in pieces is still its one text under each."""
    import numpy as np

    from pytest_npuperf.report import runjson
    from pytest_npuperf.report.runjson import case_json, case_line

    results = session_results()
    odd = dataclasses.replace(results[0], case_id="MatMulV2-\u00e9t\u00e9-\u2211", wall_s=1e-05,
                              precision=1e16)
    odd.extra_kernels = {"Cast": np.float64(0.25), "7": 2**40}
    odd.regression = {"verdict": "SAME", "ratio": np.float64(1.5), "big": 2**70}
    cases = [case_json(r) for r in [*results, odd]]
    have_orjson = runjson.orjson is not None
    fast = [case_line(c) for c in cases]
    monkeypatch.setattr(runjson, "orjson", None)
    plain = [case_line(c) for c in cases]
    assert [json.loads(line) for line in fast] == [json.loads(line) for line in plain]
    assert json.loads(plain[-1])["regression"]["big"] == 2**70  # beyond orjson's 64 bits
    assert json.loads(plain[-1])["extra_kernels"]["Cast"] == 0.25
    assert b"\\u" not in plain[-1] and "\u2211".encode() in plain[-1]  # UTF-8, not escapes
    if have_orjson:
        assert fast[0] == plain[0]  # compact, the same separators: these values, byte for byte
    for chosen in (results, []):
        with tempfile.TemporaryFile() as spool, io.BytesIO() as raw:
            count = spool_cases(chosen, spool)
            handle = io.TextIOWrapper(raw, encoding="utf-8", newline="")
            spooled_run_json(run_json(outcome(), chosen, session(), cases=False), spool,
                             count)(handle)
            handle.flush()
            assert raw.getvalue().decode() == dumps_run_json(run_json(outcome(), chosen,
                                                                      session()))
