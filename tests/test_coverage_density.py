"""`npuperf coverage --standard`: msmodeling's density standard read as it ships (the pinned
copy in tests/data/density_standard, see its SOURCES.md), and a database's axes judged against
it: values present (positive finite latencies only), required values missing, spacing
violations per interpolation bucket; one line per kernel type, markdown, html, JSON and an exit
status."""

from __future__ import annotations

import csv
import itertools
import json
from collections import defaultdict

import pytest

from pytest_npuperf.coverage.density import kernel_density
from pytest_npuperf.coverage.points import read_points
from pytest_npuperf.coverage.standard import check_values, load_standard, spacing_gaps
from pytest_npuperf.db.errors import ContractError
from pytest_npuperf.grid import grids
from pytest_npuperf.harness.options import DEFAULT_DB

from .coverage_data import STANDARD, database, gemm_row


@pytest.fixture(scope="module")
def standard():
    return load_standard(STANDARD)


def test_the_standard_reads_as_msmodeling_ships_it(standard):
    assert (standard.schema_version, standard.standard_version, standard.policy) == (
        1, "v1", "minimum")
    m = standard.rule("M_GRID")
    assert (m.low, m.high) == (1, 32768) and len(m.segments) == 8
    assert [(s.low, s.high, s.max_gap) for s in m.segments[:2]] == [(1, 8, 1), (9, 16, 2)]
    assert m.segments[-1].max_ratio == 2
    assert len(standard.rule("NK_GRID").required) == 37
    assert standard.rule("ELEM_HIDDEN_GRID") is standard.rule("NK_GRID")  # an alias
    seq = standard.rule("fused_attention.seq")  # a template axis that `use`s a grid
    assert seq.segments == standard.rule("ATTN_SEQ_GRID").segments
    assert standard.rule("transpose_batch_matmul.K").required == (64, 128, 256, 512)
    assert standard.rule("communication.message_bytes").high == 536870912
    assert standard.rule("PAD_TOKENS_GRID").segments == ()  # required values only


def test_the_grids_npuperf_generates_meet_the_standard(standard):
    for name in ("M_GRID", "NK_GRID", "ELEM_TOKENS_GRID", "MOE_TOKENS_GRID", "ATTN_SEQ_GRID",
                 "HEADS_GRID", "KV_HEADS_GRID", "HEAD_DIM_GRID", "ATTN_BATCH_GRID",
                 "PAD_TOKENS_GRID"):
        check = check_values(getattr(grids, name), standard.rule(name))
        assert check.ok and not check.required_outside, (name, check.gaps,
                                                          check.missing_required)


def test_a_gap_is_judged_by_every_segment_it_spans(standard):
    m = standard.rule("M_GRID")
    gaps = spacing_gaps([1, 2, 4, 8, 10, 16, 64], m)
    assert [(g.low, g.high) for g in gaps] == [(2, 4), (4, 8), (10, 16), (16, 64)]
    # 16 -> 64 reaches into 17-32 (max_gap 4, 12x over) and 33-64 (max_gap 8, 6x over)
    assert gaps[-1].limit == "max_gap 4 in 17-32" and gaps[-1].excess == 12
    assert spacing_gaps([1024, 2048, 4096], m) == []  # max_ratio 2 above 1025
    assert [g.text() for g in spacing_gaps([1024, 4096], m)] == ["1024->4096 (max_ratio 2 "
                                                                 "in 1025-32768)"]


def test_required_values_count_inside_the_span_covered(standard):
    check = check_values([512, 1024, 2048, 7168], standard.rule("NK_GRID"))
    assert 640 in check.missing_required and 3584 in check.missing_required
    assert 128 in check.required_outside and 55296 in check.required_outside
    assert check.range_endpoints_missing == (128, 55296)
    assert not check.ok


@pytest.mark.parametrize("text, match", [
    ("schema_version: 2\ngrids: {}\n", "schema_version 2"),
    ("schema_version: 1\ngrids:\n  M: {range: {min: 1, max: 8}, max_gap: 1, max_ratio: 2}\n",
     "max_gap and max_ratio together"),
    ("schema_version: 1\ngrids:\n  M: {range: {min: 8, max: 1}}\n", "above max"),
    ("schema_version: 1\ngrids:\n  M: {required_values: [1, x]}\n", "expected a number"),
    ("- just a list\n", "not a density standard"),
    ("grids: [\n", "not a YAML file"),
])
def test_a_file_that_is_no_standard_is_one_line(tmp_path, text, match):
    path = tmp_path / "standard.yaml"
    path.write_text(text)
    with pytest.raises(ContractError, match=match):
        load_standard(path)


def _independent_gaps(values, limits):
    """Adjacent pairs breaking `limits` [(low, high, gap)]: any sub-range the pair reaches into
    whose max_gap it exceeds (the M_GRID segments up to 64, written out here)."""
    values = sorted(set(values))
    return [(a, b) for a, b in itertools.pairwise(values)
            if any(low < b and high > a and b - a > gap for low, high, gap in limits)]


def test_density_of_a_hand_made_table_agrees_with_a_count(tmp_path, standard):
    dense = [1, 2, 3, 4, 5, 6, 7, 8, 10, 12, 14, 16, 20, 24, 28, 32]
    sparse = [1, 2, 4, 8, 20, 64]
    rows = [gemm_row(m, 512, 7168, 5 + m) for m in dense]
    rows += [gemm_row(m, 7168, 2048, 9 + m) for m in sparse]
    rows += [gemm_row(3, 7168, 2048, None), gemm_row(5, 7168, 2048, "0"),
             gemm_row(6, 7168, 2048, "N/A"), gemm_row(7, 7168, 2048, "-1")]  # not measured
    directory = database(tmp_path, {"MatMulV2": rows})
    density = kernel_density(read_points(directory).kernels["MatMulV2"], standard)
    m_axis = next(a for a in density.axes if a.axis.name == "M")
    assert m_axis.values == tuple(sorted(set(dense) | set(sparse)))
    assert m_axis.buckets == 2
    limits = [(1, 8, 1), (9, 16, 2), (17, 32, 4), (33, 64, 8)]
    expected = _independent_gaps(sparse, limits)
    assert expected == [(2, 4), (4, 8), (8, 20), (20, 64)]
    assert [(g.gap.low, g.gap.high) for g in m_axis.gaps] == expected
    assert {g.bucket for g in m_axis.gaps} == {"K=2048, N=7168"}
    assert _independent_gaps(dense, limits) == []
    n_axis = next(a for a in density.axes if a.axis.name == "N")
    assert n_axis.values == (512, 7168) and not n_axis.axis.sweep
    assert 640 in n_axis.check.missing_required  # NK_GRID's required widths in 512-7168
    assert density.measured == len(dense) + len(sparse) and not density.ok


def test_coverage_prints_a_line_per_kernel_type_and_fails_below_the_standard(
        tmp_path, npuperf):
    directory = database(tmp_path, {
        "MatMulV2": [gemm_row(m, 512, 7168, 5 + m) for m in (1, 2, 4, 8)],
        "RmsNorm": [{"Input Shapes": f"{t},7168;7168", "Input Data Types": "DT_BF16;DT_BF16",
                     "Input Formats": "ND;ND", "Output Shapes": f"{t},7168;{t},1",
                     "Output Data Types": "DT_BF16;FLOAT", "Output Formats": "ND;ND",
                     "Average Duration(us)": str(2 + t / 100)} for t in (2, 4, 16, 64, 128)]})
    out_json, out_md, out_html = (tmp_path / "c.json", tmp_path / "c.md", tmp_path / "c.html")
    code, out, err = npuperf("coverage", directory, "--standard", STANDARD, "--json", out_json,
                             "--markdown", out_md, "--html", out_html)
    assert code == 1, err
    lines = out.splitlines()
    matmul = next(line for line in lines if line.strip().startswith("MatMulV2:"))
    assert "M: 4 value(s) 1-8 [rule M_GRID; 2 gap(s), worst 4->8" in matmul and "FAIL" in matmul
    assert "leave-one-out median 0.00 %, p90 0.00 %, >50 %: 0 (n=2), 2 not bracketed; p90 " \
           "along M 0.00 % (n=2)" in matmul  # latency linear in M
    rms = next(line for line in lines if line.strip().startswith("RmsNorm:"))
    assert "axis_0: 5 value(s) 2-128 [rule ELEM_TOKENS_GRID" in rms and "FAIL" not in rms
    assert "FAIL MatMulV2: density below the standard" in out
    assert "density: 1 kernel type(s) meet the standard, 1 do not (MatMulV2)" in out
    doc = json.loads(out_json.read_text())
    assert doc["standard"]["version"] == "v1" and doc["kernels"]["RmsNorm"]["density_ok"]
    assert doc["kernels"]["MatMulV2"]["axes"]["M"]["gaps"][0]["limit"] == "max_gap 1 in 1-8"
    assert "| MatMulV2 | 4 | 4 |" in out_md.read_text()
    assert "<td>RmsNorm</td>" in out_html.read_text()
    # the workload axes alone: RmsNorm passes, MatMulV2's M still fails
    code, out, _ = npuperf("coverage", directory, "--standard", STANDARD, "--workload-only",
                           "--kernels", "RmsNorm")
    assert code == 0 and "MatMulV2" not in out


def test_coverage_without_a_standard_lists_and_judges_nothing(tmp_path, npuperf):
    directory = database(tmp_path, {"MatMulV2": [gemm_row(m, 64, 128, m) for m in (1, 2, 8)]})
    code, out, _ = npuperf("coverage", "--db", directory)
    assert code == 0 and "M: 3 value(s) 1-8 (no standard given)" in out
    assert "density:" not in out and "FAIL" not in out


def _m_values_per_bucket(path):
    """(N, K) -> the M values of the MatMulV2 rows, read with the csv module."""
    out = defaultdict(set)
    with open(path, newline="") as handle:
        for row in csv.DictReader(handle):
            (m, k), (n, _) = (tuple(int(d) for d in s.split(","))
                              for s in row["Input Shapes"].split(";")[:2])
            out[(n, k)].add(m)
    return out


def test_the_embedded_database_as_planned(npuperf, tmp_path):
    """Its rows carry no latency: --include-theory judges the plan; the values and buckets
    agree with the table read directly."""
    out_json = tmp_path / "embedded.json"
    code, _out, err = npuperf("coverage", DEFAULT_DB, "--standard", STANDARD, "--include-theory",
                             "--no-loo", "--json", out_json, "--kernels", "MatMulV2,RmsNorm")
    assert code == 1, err  # a small database: far below the standard
    doc = json.loads(out_json.read_text())
    buckets = _m_values_per_bucket(DEFAULT_DB / "MatMulV2.csv")
    m_axis = doc["kernels"]["MatMulV2"]["axes"]["M"]
    assert m_axis["values"] == sorted(set().union(*buckets.values()))
    assert m_axis["buckets"] == len(buckets)
    expected = sum(len(spacing_gaps(sorted(v), load_standard(STANDARD).rule("M_GRID")))
                   for v in buckets.values())
    assert len(m_axis["gaps"]) == expected > 0
    assert doc["kernels"]["MatMulV2"]["measured"] == 0


def test_a_grid_database_meets_the_standard_on_m(npuperf, tmp_path):
    directory = tmp_path.joinpath("ATLAS_800_A3_752T_128G_DIE", "vllm_ascend",
                                  "vllm0.18.0_torch2.9.0_cann8.5")
    code, _, err = npuperf("grid", "--db", directory, "--kernels", "MatMulV2",
                           "--target-models", "qwen3-32b", "--rows", "0", "--max-hbm-gb", "0",
                           "--quiet")
    assert code == 0, err
    out_json = tmp_path / "grid.json"
    code, out, _ = npuperf("coverage", directory, "--standard", STANDARD, "--include-theory",
                           "--no-loo", "--workload-only", "--json", out_json)
    buckets = _m_values_per_bucket(directory / "MatMulV2.csv")
    m_axis = json.loads(out_json.read_text())["kernels"]["MatMulV2"]["axes"]["M"]
    assert all(sorted(v) == list(grids.M_GRID) for v in buckets.values())
    assert m_axis["buckets"] == len(buckets) and m_axis["gaps"] == [] and m_axis["ok"]
    assert code == 0, out


def test_max_p90_gates_the_leave_one_out_error(tmp_path, npuperf):
    directory = database(tmp_path, {"MatMulV2": [gemm_row(m, 64, 128, 10.0 + m * m)
                                                 for m in (1, 2, 4, 8, 16)]})
    code, out, _ = npuperf("coverage", directory, "--max-p90", "200")
    assert code == 0, out
    code, out, _ = npuperf("coverage", directory, "--max-p90", "5")
    assert code == 1 and "FAIL MatMulV2: leave-one-out p90" in out and "above 5 %" in out
    with pytest.raises(SystemExit) as usage:
        npuperf("coverage", directory, "--max-p90", "0")
    assert usage.value.code == 2
