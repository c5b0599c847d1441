"""The hand-off between a wrapped run's child and its parent (profiling/handoff.py): what the
child wrote is what the parent reads, whatever mix of results and however many blocks;
repeated texts are shared on reading; columns of another version are dropped; a damaged
file, or one of the first format, is a one-line error."""

import json

import pytest

from pytest_npuperf.db.errors import NpuperfError
from pytest_npuperf.measure.result import STATUS_FAILED, CaseResult
from pytest_npuperf.profiling import handoff as handoff_module
from pytest_npuperf.profiling.handoff import HANDOFF_NAME, read_handoff, write_handoff
from pytest_npuperf.profiling.profiled import profile_record


def _results(count: int = 3) -> list[CaseResult]:
    out = []
    for i in range(count):
        kind = ("MatMulV2", "RmsNorm", "MatMulV2")[i % 3]
        result = CaseResult(case_id=f"{kind}-{i}x128-BF16-{i:08d}", nodeid=f"t.py::k[{i}]",
                            kernel_type=kind, file=f"{kind}.csv", signature=f"{i:08d}",
                            row=i + 1, device="ATLAS_800_A3_752T_128G_DIE", stack="cann 8.5",
                            bound_us=1.5 if i else None, counters={"aic_mac_ratio": 0.25 * i})
        result.set_samples([20.0 + 0.1 * k + i for k in range(8)])
        result.warmup = 2
        result.profile = profile_record(result.case_id, kind, pid=4242, device=i % 2, calls=10,
                                        warmup=2, range_us=(1.0e15 + i, 1.0e15 + i + 900))
        out.append(result)
    return out


def _comparable(result: CaseResult) -> dict:
    data = result.to_dict()
    data.pop("samples")  # not handed off: the profile gives them
    data.pop("detail")  # nor the traceback
    return data


def _round_trip(tmp_path, results, session=None) -> list[CaseResult]:
    path = tmp_path / HANDOFF_NAME
    write_handoff(path, session or {}, results)
    back = read_handoff(path)
    assert [_comparable(r) for r in back.results] == [_comparable(r) for r in results]
    return back.results


def test_round_trip_keeps_every_field(tmp_path):
    path = tmp_path / HANDOFF_NAME
    write_handoff(path, {"native": True}, _results())
    assert read_handoff(path).session == {"native": True}
    _round_trip(tmp_path, _results())


def test_a_mix_of_results_over_several_blocks(tmp_path, monkeypatch):
    """Results without statistics or profile, a marker msprof cut, a range not known, a
    failed case with its traceback, in blocks of 4: each column's encoding, mixed."""
    monkeypatch.setattr(handoff_module, "BLOCK", 4)
    results = _results(11)
    results[1].stats, results[1].status, results[1].error = None, STATUS_FAILED, "boom"
    results[1].detail = "Traceback ..."
    results[2].profile = {}
    results[3].profile["marker"] = results[3].case_id[:10]
    results[4].profile["range_us"] = None
    results[5].profile["extra_key"] = [1, 2]
    del results[6].profile["calls"]
    results[7].regression = {"verdict": "slower", "ratio": 1.5}
    back = _round_trip(tmp_path, results)
    assert back[1].detail == ""
    assert back[0].profile["launches"] is not back[3].profile["launches"]  # each its own list
    assert "calls" not in back[6].profile


def test_repeated_texts_are_shared(tmp_path):
    back = _round_trip(tmp_path, _results(12))
    assert back[0].kernel_type is back[3].kernel_type  # one string object for a repeated text
    assert back[0].profile["marker"] is back[0].case_id
    assert back[0].profile["launches"] == ["MatMulV2", "MatMulV3", "MatMulCommon"]


def test_columns_of_another_version_are_dropped(tmp_path):
    path = tmp_path / HANDOFF_NAME
    write_handoff(path, {}, _results(1))
    header, line = path.read_text().splitlines()
    data = json.loads(line)
    data["columns"]["from_the_future"] = [1]
    data["columns"]["stats.future_stat"] = [2.0]
    path.write_text(header + "\n" + json.dumps(data) + "\n")
    (result,) = read_handoff(path).results
    assert result.case_id == "MatMulV2-0x128-BF16-00000000"
    assert result.stats is not None and result.stats.samples == 8


def test_a_file_cut_short_is_a_one_line_error(tmp_path):
    path = tmp_path / HANDOFF_NAME
    write_handoff(path, {}, _results(5))
    text = path.read_text()
    path.write_text(text[:len(text) - 40])  # a crash in the middle of the last line
    with pytest.raises(NpuperfError, match=r"line 2 is not JSON .*the hand-off is damaged"):
        read_handoff(path)


def test_a_block_missing_a_column_is_a_one_line_error(tmp_path):
    path = tmp_path / HANDOFF_NAME
    write_handoff(path, {}, _results(2))
    header, line = path.read_text().splitlines()
    data = json.loads(line)
    del data["columns"]["case_id"]
    data["columns"]["row"] = [1]  # and one column shorter than the block
    path.write_text(header + "\n" + json.dumps(data) + "\n")
    with pytest.raises(NpuperfError, match=r"line 2: .*the hand-off is damaged") as caught:
        read_handoff(path)
    assert "\n" not in str(caught.value)


def _damaged(tmp_path, change) -> str:
    """The one-line error of a hand-off whose first block `change` edited."""
    path = tmp_path / HANDOFF_NAME
    write_handoff(path, {}, _results(3))
    header, line = path.read_text().splitlines()
    data = json.loads(line)
    change(data["columns"])
    path.write_text(header + "\n" + json.dumps(data) + "\n")
    with pytest.raises(NpuperfError, match=r"line 2: .*the hand-off is damaged") as caught:
        read_handoff(path)
    assert "\n" not in str(caught.value)
    return str(caught.value)


@pytest.mark.parametrize("column, values, shown", [
    ("row", [1, True, 3], "true"),  # a JSON boolean is no number
    ("wall_s", [0.5, 2, False], "false"),  # a whole number is a float, a boolean is not
    ("counters", [{}, {"aic_mac_ratio": 0.5}, {"aic_mac_ratio": "x"}], '{"aic_mac_ratio": "x"}'),
    ("extra_kernels", [{"Cast": 2}, {"Cast": 1.5}, {}], '{"Cast": 1.5}'),
    ("status", ["ok", "ok", None], "null"),
])
def test_a_value_not_of_its_fields_type_is_named(tmp_path, column, values, shown):
    error = _damaged(tmp_path, lambda columns: columns.update({column: values}))
    assert f"column {column!r} holds {shown[:40]}, not a value of its type" in error


@pytest.mark.parametrize("keys", [
    {"codes": [0, 0, 0], "values": ["marker"]}, [["marker"], 5, ["marker"]],
    [["marker"], [1], ["marker"]],
    [["marker"], [{"a": 1}], ["marker"]],
])
def test_profile_keys_that_are_no_lists_of_names_are_named(tmp_path, keys):
    error = _damaged(tmp_path, lambda columns: columns.update({"profile.": keys}))
    assert "column 'profile.' holds something else than lists of key names" in error


def test_the_first_format_says_which_version_reads_it(tmp_path):
    path = tmp_path / HANDOFF_NAME
    path.write_text(json.dumps({"schema": "npuperf-handoff/1", "session": {}}) + "\n"
                    + json.dumps({"result": {"case_id": "x"}}) + "\n")
    with pytest.raises(NpuperfError, match=r"another npuperf version \(schema "
                                           r"npuperf-handoff/1\).*reads npuperf-handoff/2"):
        read_handoff(path)
