"""The hand-off between a wrapped run's child and its parent: what the child wrote is what
the parent reads (repeated texts are shared on reading, never changed), and a line written
by another version with fields this one does not know still reads."""

import json

from pytest_npuperf.measure.msprof import HANDOFF_NAME, read_handoff, write_handoff
from pytest_npuperf.measure.profiled import profile_record
from pytest_npuperf.measure.result import CaseResult


def _results() -> list[CaseResult]:
    out = []
    for i, kind in enumerate(("MatMulV2", "RmsNorm", "MatMulV2")):
        result = CaseResult(case_id=f"{kind}-{i}x128-BF16-0000000{i}", nodeid=f"t.py::k[{i}]",
                            kernel_type=kind, file=f"{kind}.csv", signature=f"0000000{i}",
                            row=i + 1, device="ATLAS_800_A3_752T_128G_DIE", stack="cann 8.5",
                            bound_us=1.5 if i else None, counters={"aic_mac_ratio": 0.25 * i})
        result.set_samples([20.0 + 0.1 * k + i for k in range(8)])
        result.warmup = 2
        result.profile = profile_record(result.case_id, kind, pid=4242, device=i, calls=10,
                                        warmup=2, range_us=(1.0e15 + i, 1.0e15 + i + 900))
        out.append(result)
    return out


def _comparable(result: CaseResult) -> dict:
    data = result.to_dict()
    data.pop("samples")  # not handed off: the profile gives them
    return data


def test_round_trip_keeps_every_field(tmp_path):
    results = _results()
    path = tmp_path / HANDOFF_NAME
    write_handoff(path, {"native": True}, results)
    back = read_handoff(path)
    assert back.session == {"native": True}
    assert [_comparable(r) for r in back.results] == [_comparable(r) for r in results]
    first, _, third = back.results
    assert first.kernel_type is third.kernel_type  # one string object for a repeated text
    assert first.profile["marker"] is first.case_id
    assert first.profile["launches"] == ["MatMulV2", "MatMulV3", "MatMulCommon"]


def test_unknown_fields_of_another_version_are_dropped(tmp_path):
    path = tmp_path / HANDOFF_NAME
    write_handoff(path, {}, _results()[:1])
    header, line = path.read_text().splitlines()
    data = json.loads(line)
    data["result"]["from_the_future"] = 1
    data["result"]["stats"]["future_stat"] = 2.0
    path.write_text(header + "\n" + json.dumps(data) + "\n")
    (result,) = read_handoff(path).results
    assert result.case_id == "MatMulV2-0x128-BF16-00000000"
    assert result.stats is not None and result.stats.samples == 8
