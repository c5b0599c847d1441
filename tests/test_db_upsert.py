"""Merging values into a table by signature, never overwriting what is not ours."""

from __future__ import annotations

import pandas as pd

from pytest_npuperf.db.signature import signature
from pytest_npuperf.db.table import read_table
from pytest_npuperf.db.upsert import RowUpdate, apply_updates, format_number, set_columns

from .conftest import write_csv

HEADER = ["OP State", "Accelerator Core", "Input Shapes", "Input Data Types", "Input Formats",
          "Output Shapes", "Output Data Types", "Output Formats", "Owner",
          "Average Duration(us)", "Profiling Average Duration(us)", "MicroBench aicore_time(us)"]


def _row(shapes: str, avg: str = "", prof: str = "", owner: str = "", mb: str = "",
         dtypes: str = "DT_BF16;DT_BF16") -> list[str]:
    out = shapes.split("->")[1]
    return ["dynamic", "AI_CORE", shapes.split("->")[0], dtypes, "ND;ND", out, "DT_BF16", "ND",
            owner, avg, prof, mb]


def _table(tmp_path, rows) -> pd.DataFrame:
    return read_table(write_csv(tmp_path / "MatMulV2.csv", HEADER, rows))


def _sig(shapes: str, dtypes: str = "DT_BF16;DT_BF16"):
    ins, out = shapes.split("->")
    return signature("MatMulV2", ins, dtypes, "ND;ND", out, "DT_BF16")


def _update(shapes: str, **values: str) -> RowUpdate:
    ins, out = shapes.split("->")
    identity = {"OP State": "dynamic", "Accelerator Core": "AI_CORE", "Input Shapes": ins,
                "Input Data Types": "DT_BF16;DT_BF16", "Input Formats": "ND;ND",
                "Output Shapes": out, "Output Data Types": "DT_BF16", "Output Formats": "ND"}
    return RowUpdate(identity=identity, values=values)


def test_matching_row_gets_only_the_given_columns(tmp_path) -> None:
    frame = _table(tmp_path, [
        _row("128,7168;7168,3584->128,3584", avg="41.5", prof="40", owner="alice", mb="39.9"),
        _row("64,7168;7168,3584->64,3584", avg="30", owner="theory"),
    ])
    before = frame.copy()
    # the update is keyed by the other orientation of the weight: the same GEMM
    result = apply_updates(frame, "MatMulV2", {
        _sig("128,7168;3584,7168->128,3584"): _update("128,7168;3584,7168->128,3584",
                                                      **{"Profiling Average Duration(us)": "42"})})
    out = result.frame
    assert (result.added, result.updated, result.unmatched) == (0, 1, [])
    assert out.loc[0, "Profiling Average Duration(us)"] == "42"
    untouched = [c for c in HEADER if c != "Profiling Average Duration(us)"]
    assert out[untouched].values.tolist() == before[untouched].values.tolist()
    assert out.loc[1].tolist() == before.loc[1].tolist()
    assert list(out.columns) == HEADER


def test_unmatched_updates_are_appended_with_their_identity(tmp_path) -> None:
    frame = _table(tmp_path, [_row("128,7168;7168,3584->128,3584", avg="41.5")])
    result = apply_updates(frame, "MatMulV2", {
        _sig("256,7168;7168,3584->256,3584"): _update(
            "256,7168;7168,3584->256,3584", **{"Profiling Average Duration(us)": "80",
                                                "Profiling Count": "3"})})
    out = result.frame
    assert (result.added, result.updated) == (1, 0)
    assert len(out) == 2
    new = out.iloc[1]
    assert new["Input Shapes"] == "256,7168;7168,3584"
    assert new["Profiling Average Duration(us)"] == "80"
    assert new["Average Duration(us)"] == "" and new["Owner"] == ""
    # a project column is added after the existing ones, nothing is moved
    assert list(out.columns)[:len(HEADER)] == HEADER
    assert "Profiling Count" in out.columns
    assert out.loc[0, "Profiling Count"] == ""


def test_add_new_false_never_adds_rows(tmp_path) -> None:
    frame = _table(tmp_path, [_row("128,7168;7168,3584->128,3584")])
    sig = _sig("8,8;8,8->8,8")
    result = apply_updates(frame, "MatMulV2",
                           {sig: _update("8,8;8,8->8,8", **{"Average Duration(us)": "1"})},
                           add_new=False)
    assert len(result.frame) == 1 and result.added == 0
    assert result.unmatched == [sig]


def test_every_row_with_the_signature_is_updated(tmp_path) -> None:
    frame = _table(tmp_path, [_row("128,7168;7168,3584->128,3584", owner="a"),
                              _row('"(128, 7168);(7168, 3584)"->128,3584', owner="b")])
    result = apply_updates(frame, "MatMulV2", {_sig("128,7168;7168,3584->128,3584"): _update(
        "128,7168;7168,3584->128,3584", **{"Profiling Average Duration(us)": "5"})})
    assert result.updated == 2
    assert result.frame["Profiling Average Duration(us)"].tolist() == ["5", "5"]
    assert result.frame["Input Shapes"].tolist()[1] == '"(128, 7168);(7168, 3584)"'


def test_fill_empty_only_fills_empty_cells(tmp_path) -> None:
    header = HEADER + ["Runtime num_heads"]
    path = write_csv(tmp_path / "FusedInferAttentionScore.csv", header, [
        _row("1,2;3,4->1,4") + ["8"], _row("2,2;3,4->2,4") + [""]])
    frame = read_table(path)
    updates = {}
    for shapes in ("1,2;3,4->1,4", "2,2;3,4->2,4"):
        ins, out = shapes.split("->")
        sig = signature("FusedInferAttentionScore", ins, "DT_BF16;DT_BF16", "ND;ND", out,
                        "DT_BF16")
        base = _update(shapes, **{"Profiling Average Duration(us)": "1"})
        updates[sig] = RowUpdate(base.identity, base.values, {"Runtime num_heads": "4"})
    out = apply_updates(frame, "FusedInferAttentionScore", updates).frame
    assert out["Runtime num_heads"].tolist() == ["8", "4"]


def test_rows_with_unparsable_identity_are_kept_and_counted(tmp_path) -> None:
    frame = _table(tmp_path, [_row("1,x;2,2->1,2", owner="broken"),
                              _row("2,2;2,2->2,2")])
    result = apply_updates(frame, "MatMulV2", {_sig("2,2;2,2->2,2"): _update(
        "2,2;2,2->2,2", **{"Profiling Average Duration(us)": "3"})})
    assert result.bad_rows == 1
    assert result.frame.loc[0].tolist() == frame.loc[0].tolist()
    assert result.frame.loc[1, "Profiling Average Duration(us)"] == "3"


def test_legacy_columns_are_migrated_on_merge(tmp_path) -> None:
    header = [h if h != "Average Duration(us)" else "MicroBench Duration(us)" for h in HEADER]
    frame = read_table(write_csv(tmp_path / "MatMulV2.csv", header,
                                 [_row("2,2;2,2->2,2", avg="7.25")]))
    result = apply_updates(frame, "MatMulV2", {})
    assert result.renamed == {"MicroBench Duration(us)": "Average Duration(us)"}
    assert result.frame.loc[0, "Average Duration(us)"] == "7.25"
    assert list(result.frame.columns) == HEADER


def test_format_number() -> None:
    assert format_number(None) == ""
    assert format_number(float("nan")) == ""
    assert format_number(3) == "3"
    assert format_number(0.1 + 0.2) == "0.3"
    assert format_number(1 / 3) == "0.3333333333"


def test_set_columns_equals_apply_updates_row_by_row(tmp_path) -> None:
    """Column-wise updates (a backfill's) give the frame apply_updates gives: duplicate rows
    both set, None leaves a cell alone, a column nobody sets is not added, others untouched."""
    shapes = ["1,8;8,8->1,8", "2,8;8,8->2,8", "3,8;8,8->3,8", "4,8;8,8->4,8"]
    rows = [_row(shapes[0], avg="1", owner="a"), _row(shapes[1], avg="2"),
            _row(shapes[0], avg="3", mb="7"), _row(shapes[2], prof="5"), _row(shapes[3])]
    frame = _table(tmp_path, rows)
    sigs = [_sig(s) for s in shapes[:3]]
    columns = {"Average Duration(us)": ["10", None, "30"],
               "MicroBench Status": ["ok", "failed: x", "ok"],
               "MicroBench aicore_time(us)": [None, "", "9"],
               "MicroBench Samples": [None, None, None]}
    positions = {sigs[0]: [0, 2], sigs[1]: [1], sigs[2]: [3]}
    out = set_columns(frame.copy(), "MatMulV2", columns, [positions[s] for s in sigs])
    updates = {sig: RowUpdate(identity={}, values={c: texts[i] for c, texts in columns.items()
                                                   if texts[i] is not None})
               for i, sig in enumerate(sigs)}
    expected = apply_updates(frame.copy(), "MatMulV2", updates, add_new=False).frame
    assert list(out.columns) == list(expected.columns)
    assert "MicroBench Samples" not in out.columns
    assert out.astype(object).values.tolist() == expected.astype(object).values.tolist()
    assert out["Average Duration(us)"].tolist() == ["10", "2", "10", "30", ""]
    assert out["MicroBench aicore_time(us)"].tolist() == ["", "", "7", "9", ""]
    whole = set_columns(frame.copy(), "MatMulV2", {"Owner": ["w", "x", "y", "z", "v"]},
                        [[i] for i in range(5)])
    assert whole["Owner"].tolist() == ["w", "x", "y", "z", "v"]
    assert whole.drop(columns="Owner").values.tolist() == frame.drop(columns="Owner").values.tolist()


def test_row_signatures_once_per_distinct_row_outside_the_process_cache() -> None:
    """A table's signatures: each distinct identity computed once per read (repeats share
    the object), the process-wide cache left as it was, a bad cell an error on each of its
    rows."""
    from pytest_npuperf.db.upsert import row_signatures

    rows = [("4,128;64,128", "DT_BF16;DT_BF16", "ND;ND", "4,64", "DT_BF16"),
            ("8,128;64,128", "DT_BF16;DT_BF16", "ND;ND", "8,64", "DT_BF16"),
            ("4,128;64,128", "DT_BF16;DT_BF16", "ND;ND", "4,64", "DT_BF16"),
            ("4,x;64,128", "DT_BF16;DT_BF16", "ND;ND", "4,64", "DT_BF16"),
            ("4,x;64,128", "DT_BF16;DT_BF16", "ND;ND", "4,64", "DT_BF16")]
    frame = pd.DataFrame(rows, columns=["Input Shapes", "Input Data Types", "Input Formats",
                                        "Output Shapes", "Output Data Types"])
    signature.cache_clear()
    sigs, errors = row_signatures(frame, "MatMulV2")
    assert signature.cache_info().currsize == 0
    assert sigs[0] == signature("MatMulV2", *rows[0]) and sigs[0].mkn == (4, 128, 64)
    assert sigs[2] is sigs[0] and sigs[1].mkn == (8, 128, 64)
    assert sigs[3:] == [None, None] and [row for row, _ in errors] == [4, 5]
