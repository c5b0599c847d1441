"""`npuperf grid --fill REPORT`: theory rows that close the density violations first, then split
the intervals with the largest leave-one-out error, within the HBM and row budgets; each round
recorded in collection_meta.yaml (shown by `npuperf validate`, `coverage`, `provenance`)."""

from __future__ import annotations

import json

import yaml

from pytest_npuperf.coverage.proposals import closing_values
from pytest_npuperf.coverage.standard import load_standard
from pytest_npuperf.db.signature import signature

from .conftest import read_rows
from .coverage_data import STANDARD, database, gemm_row


def _ms(path) -> list[int]:
    return [int(r["Input Shapes"].split(",")[0]) for r in read_rows(path)]


def _report(npuperf, directory, path, *extra) -> dict:
    code, _out, err = npuperf("coverage", directory, "--standard", STANDARD, "--json", path,
                             "--quiet", *extra)
    assert code in (0, 1), err
    return json.loads(path.read_text())


def test_closing_values_follow_the_segments():
    m = load_standard(STANDARD).rule("M_GRID")
    assert closing_values(8, 64, m) == [10, 12, 14, 16, 20, 24, 28, 32, 40, 48, 56]
    assert closing_values(1024, 8192, m) == [2048, 4096]
    assert closing_values(8, 10, m) == []


def test_a_fill_round_closes_density_gaps_first_within_the_budgets(tmp_path, npuperf):
    ms = (1, 2, 4, 8, 64)
    directory = database(tmp_path, {"MatMulV2": [gemm_row(m, 512, 1024, 5.0 + m / 8)
                                                 for m in ms]})
    doc = _report(npuperf, directory, tmp_path / "round1.json")
    first = doc["proposals"][0]
    assert first["kind"] == "density" and first["template"]["Input Shapes"].startswith("8,")
    # 8 -> 64 breaks 17-32's max_gap 4 twelve-fold: its values come before 2 -> 4's
    assert [p["value"] for p in doc["proposals"][:3]] == [10, 12, 14]

    code, out, err = npuperf("grid", "--db", directory, "--fill", tmp_path / "round1.json",
                             "--rows", "4", "--dry-run")
    assert code == 0 and "would add 4 of" in out and _ms(directory / "MatMulV2.csv") == list(ms)
    code, out, err = npuperf("grid", "--db", directory, "--fill", tmp_path / "round1.json",
                             "--rows", "4")
    assert code == 0, err
    assert "MatMulV2: +4 (4 for density)" in out and "left out" in out
    rows = read_rows(directory / "MatMulV2.csv")
    assert _ms(directory / "MatMulV2.csv") == [*ms, 10, 12, 14, 16]
    new = rows[len(ms):]
    assert all(not r["Average Duration(us)"] for r in new)  # theory rows: replayed next
    assert new[0]["Input Shapes"] == "10,1024;512,1024" and new[0]["Output Shapes"] == "10,512"
    record = yaml.safe_load((directory / "collection_meta.yaml").read_text())
    (entry,) = record["collections"]
    assert entry["kind"] == "fill" and entry["round"] == 1 and entry["rows"] == {"MatMulV2": 4}
    assert entry["standard"]["version"] == "v1" and len(entry["standard"]["sha256"]) == 64
    assert [a["value"] for a in entry["added"]] == [10, 12, 14, 16]
    assert "M_GRID: gap 8->64 breaks" in entry["added"][0]["why"]

    # the same report again: those rows exist now, the next ones go in as round 2
    code, out, _ = npuperf("grid", "--db", directory, "--fill", tmp_path / "round1.json",
                           "--rows", "2")
    assert "left out 4: its signature is already in the table" in out
    record = yaml.safe_load((directory / "collection_meta.yaml").read_text())
    assert [e["round"] for e in record["collections"]] == [1, 2]
    code, out, _ = npuperf("validate", directory)
    assert code == 0 and "fill round 2" in out


def test_the_hbm_budget_and_the_default_row_budget(tmp_path, npuperf):
    directory = database(tmp_path, {"MatMulV2": [gemm_row(m, 4096, 4096, 5.0 + m)
                                                 for m in (1, 2, 4, 8, 16, 1024, 8192)]})
    doc = _report(npuperf, directory, tmp_path / "r.json")
    code, out, _ = npuperf("grid", "--db", directory, "--fill", tmp_path / "r.json",
                           "--max-hbm-gb", "0.04", "--dry-run")
    assert code == 0 and "budget 1 rows" in out and "would add 1 of" in out  # a fifth of 7 measured rows
    _code, out, _ = npuperf("grid", "--db", directory, "--fill", tmp_path / "r.json",
                           "--max-hbm-gb", "0.04", "--rows", "100", "--dry-run")
    # bf16 (M, 4096) + (4096, 4096) -> (M, 4096): over 0.04 GiB from M = 574 on
    over = {p["value"] for p in doc["proposals"]
            if 2 * (2 * p["value"] * 4096 + 4096 * 4096) > 0.04 * 2 ** 30}
    assert over and max(over) > 1024 and f"left out {len(over)}: over 0.04 GiB" in out


def test_accuracy_proposals_split_the_worst_intervals(tmp_path, npuperf):
    """Every M of M_GRID up to 64 (density met), one bump: the fill splits the intervals on
    either side of the worst-predicted rows."""
    ms = [1, 2, 3, 4, 5, 6, 7, 8, 10, 12, 14, 16, 20, 24, 28, 32, 40, 48, 56, 64]
    latency = {m: 5.0 + m for m in ms}
    latency[24] = 60.0
    directory = database(tmp_path, {"MatMulV2": [gemm_row(m, 256, 256, latency[m])
                                                 for m in ms]})
    doc = _report(npuperf, directory, tmp_path / "r.json", "--workload-only")
    assert doc["kernels"]["MatMulV2"]["axes"]["M"]["gaps"] == []
    kinds = {p["kind"] for p in doc["proposals"]}
    assert kinds == {"accuracy"}
    top = doc["proposals"][:2]
    assert all("leave-one-out error" in p["reason"] for p in top)
    code, _out, _ = npuperf("grid", "--db", directory, "--fill", tmp_path / "r.json",
                           "--rows", "2")
    assert code == 0
    added = _ms(directory / "MatMulV2.csv")[len(ms):]
    assert added == [22, 26] or added == [18, 22] or added == [26, 30]
    assert all(abs(m - 24) <= 6 for m in added)


def test_a_proposal_for_a_kernel_without_a_fill_rule_is_left_out(tmp_path, npuperf):
    report = {"schema": "npuperf-coverage/1", "database": str(tmp_path), "kernels": {},
              "proposals": [{"kernel_type": "FusedInferAttentionScore", "axis": "seq",
                             "value": 300, "kind": "density", "score": 2.0, "reason": "r",
                             "bucket": "", "template_value": 256, "template": {
                                 "Input Shapes": "1,8,128;1,8,128;1,8,128"}}]}
    path = tmp_path / "r.json"
    path.write_text(json.dumps(report))
    directory = database(tmp_path, {"MatMulV2": [gemm_row(1, 64, 64, 1.0)]})
    code, out, _ = npuperf("grid", "--db", directory, "--fill", path)
    assert code == 0 and "left out 1: no fill rule for attention axis seq" in out
    code, _, err = npuperf("grid", "--db", directory, "--fill", tmp_path / "nothing.json")
    assert code == 2 and "no such file" in err
    (tmp_path / "bad.json").write_text("{}")
    code, _, err = npuperf("grid", "--db", directory, "--fill", tmp_path / "bad.json")
    assert code == 1 and "not a coverage report" in err


def test_provenance_records_reused_rows_and_validate_shows_them(tmp_path, npuperf):
    directory = database(tmp_path, {"MatMulV2": [gemm_row(1, 64, 64, 1.0)]})
    code, out, _ = npuperf("provenance", directory)
    assert code == 0 and "no collection_meta.yaml" in out
    code, _, err = npuperf("provenance", directory, "--reused", "MatMulV2")
    assert code == 2 and "--why" in err
    code, out, err = npuperf("provenance", directory, "--reused", "MatMulV2", "--from-device",
                             "ATLAS_800_A2_376T_64G", "--rows", "12", "--why",
                             "the A3 profile had no decode GEMMs")
    assert code == 0, err
    assert "reused 12 row(s) of MatMulV2 from ATLAS_800_A2_376T_64G: the A3 profile had no " \
           "decode GEMMs" in out
    code, out, _ = npuperf("validate", directory)
    assert code == 0 and "reused 12 row(s) of MatMulV2" in out
    code, out, _ = npuperf("coverage", directory, "--no-loo")
    assert "provenance: reused 12 row(s) of MatMulV2" in out
    record = yaml.safe_load((directory / "collection_meta.yaml").read_text())
    record["reused"].append({"table": "Gone", "from_device": "X", "why": "w"})
    (directory / "collection_meta.yaml").write_text(yaml.safe_dump(record))
    code, out, _ = npuperf("validate", directory)
    assert code == 1 and "reused entry names 'Gone': no such kernel table here" in out
    (directory / "collection_meta.yaml").write_text("schema: something else\n")
    code, out, _ = npuperf("validate", directory)
    assert code == 1 and "not a collection record" in out


def test_grid_and_parse_record_how_they_collected(tmp_path, npuperf):
    from .conftest import kd_row, write_kernel_details

    directory = tmp_path / "ATLAS_800_A3_752T_128G_DIE" / "vllm_ascend" / "vllm0.18.0_torch2.9.0_cann8.5"
    code, _, err = npuperf("grid", "--db", directory, "--kernels", "RmsNorm", "--rows", "3",
                           "--target-models", "qwen3-32b", "--quiet")
    assert code == 0, err
    kd = write_kernel_details(tmp_path / "run_ascend_pt" / "kernel_details.csv",
                              [kd_row("MatMulV2", 12.5)])
    assert npuperf("parse", "--quiet", "--profile", kd, "--db", directory)[0] == 0
    record = yaml.safe_load((directory / "collection_meta.yaml").read_text())
    grid, parse = record["collections"]
    assert grid["kind"] == "grid" and grid["rows"] == {"RmsNorm": 3}
    assert grid["models"] == ["qwen3-32b"] and grid["device"] == "ATLAS_800_A3_752T_128G_DIE"
    assert grid["stack"] == "vllm0.18.0_torch2.9.0_cann8.5"
    assert parse["kind"] == "parse" and parse["rows"] == {"MatMulV2": 1}
    assert parse["profiles"] == "run_ascend_pt"
    code, out, _ = npuperf("provenance", "--db", directory)
    assert "grid at" in out and "parse at" in out


def test_new_rows_keep_their_bucket(tmp_path):
    """A filled row differs from its template in the axis alone: same signature otherwise."""
    from pytest_npuperf.coverage.fill import row_with_axis

    template = gemm_row(8, 512, 7168, None)
    row = row_with_axis("MatMulV2", "compute", "M", template, 8, 12)
    assert row["Input Shapes"] == "12,7168;512,7168" and row["Output Shapes"] == "12,512"
    assert signature("MatMulV2", row["Input Shapes"], row["Input Data Types"],
                     row["Input Formats"], row["Output Shapes"], row["Output Data Types"]) != \
        signature("MatMulV2", template["Input Shapes"], template["Input Data Types"],
                  template["Input Formats"], template["Output Shapes"],
                  template["Output Data Types"])
    norm = {"Input Shapes": "16,7168;7168", "Output Shapes": "16,7168;16,1"}
    assert row_with_axis("RmsNorm", "generic", "axis_0", norm, 16, 32)["Output Shapes"] == \
        "32,7168;32,1"
    assert row_with_axis("X", "attention", "seq", norm, 16, 32) is None
    assert row_with_axis("MatMulV2", "compute", "M", {}, 8, 12) is None


def test_fill_rounds_lower_the_leave_one_out_p90(tmp_path):
    """The loop the benchmark runs on real replays, with a GEMM whose latency steps at every
    64-row tile standing in for the replay of the new rows: each round adds at most a fifth
    more rows and the leave-one-out p90 falls."""
    import math

    from pytest_npuperf.coverage.fill import run_fill
    from pytest_npuperf.coverage.report import build_report, write_outputs
    from pytest_npuperf.db.table import read_table, write_table
    from pytest_npuperf.grid.grids import M_GRID

    def latency(m: int, n: int, k: int) -> float:
        return 8.0 + 2.56e-4 * math.ceil(m / 64) * n * k + 0.5 * math.log2(m)

    pairs = ((320, 5120), (5120, 320), (1600, 5120))
    directory = database(tmp_path, {"MatMulV2": [
        gemm_row(m, n, k, latency(m, n, k)) for n, k in pairs for m in M_GRID if m <= 4096]})
    p90s, sizes = [], []
    for number in range(3):
        report = build_report(directory, standard=STANDARD)
        p90s.append(report.loo["MatMulV2"].stats.p90)
        sizes.append(report.points.kernels["MatMulV2"].measured)
        if number == 2:
            break
        write_outputs(report, json_path=tmp_path / f"round{number}.json")
        added = run_fill(directory, tmp_path / f"round{number}.json").added
        assert 0 < len(added) <= sizes[-1] // 5
        frame = read_table(directory / "MatMulV2.csv")  # "replay" the new theory rows
        for i, shapes in enumerate(frame["Input Shapes"]):
            if not frame.at[i, "Average Duration(us)"].strip():
                (m, k), (n, _) = (tuple(map(int, s.split(","))) for s in shapes.split(";"))
                frame.at[i, "Average Duration(us)"] = f"{latency(m, n, k):.4f}"
        write_table(frame, directory / "MatMulV2.csv")
    assert p90s[0] > p90s[1] > p90s[2], p90s
    assert sizes[1] <= sizes[0] * 1.2 and sizes[2] <= sizes[1] * 1.2
