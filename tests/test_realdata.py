"""Integration on the real profiler samples (tests/real_samples.py says where; skipped when absent).

The expected aggregates are recomputed here from the raw file with the csv and statistics
modules only, applying the rules of docs/format.md §5 explicitly:
- rows without a type (`N/A`), HCCL rows and rows without shapes are skipped;
- a launch exported twice (same `Stream ID`, `Task ID`, `Start Time(us)` and signature) is
  counted once (the real export repeats one MatMulV3 record four times);
- per (type, shapes, dtypes, formats): count, mean, median, population std, min, max of
  `Duration(us)`, and the mean of each counter.
"""

from __future__ import annotations

import csv
import shutil
import statistics
from collections import defaultdict
from pathlib import Path

import pytest

from .conftest import COUNTERS, read_rows, tree_digest, write_kernel_details

LEVEL1 = "mstt_advisor_compute_advice_2025_kernel_details.csv"
LEVEL0 = "msinsight_pt_level0_rank0_kernel_details.csv"
FIA_FIXTURE = "msmodeling_fixture_fia_raw_test_FusedInferAttentionScore.csv"


def _unquote(cell: str) -> str:
    return cell.strip().strip('"')


def independent_aggregate(path: Path):
    with open(path, encoding="utf-8-sig", newline="") as handle:
        records = list(csv.DictReader(handle))
    durations: dict[tuple, list[float]] = defaultdict(list)
    counters: dict[tuple, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    seen, duplicates = set(), 0
    for record in records:
        kernel_type = record["Type"].strip()
        shapes = _unquote(record["Input Shapes"])
        if kernel_type in ("", "N/A") or record["Accelerator Core"].strip() == "HCCL" \
                or shapes == "N/A":
            continue
        key = (kernel_type, shapes, record["Input Data Types"].strip(),
               record["Input Formats"].strip(), _unquote(record["Output Shapes"]),
               record["Output Data Types"].strip())
        launch = (record["Stream ID"].strip(), record["Task ID"].strip(),
                  record["Start Time(us)"].strip(), key)
        if launch in seen:
            duplicates += 1
            continue
        seen.add(launch)
        duration = float(record["Duration(us)"])
        if not duration > 0:
            continue
        durations[key].append(duration)
        for counter in COUNTERS:
            text = record.get(counter, "").strip()
            if text and text != "N/A":
                counters[key][counter].append(float(text))
    return records, durations, counters, duplicates


def _db_row(db: Path, key: tuple) -> dict[str, str]:
    """The database row of a profiler key; a lone empty (scalar) slot is written as the profiler
    spells it, `""`, not as an empty cell."""
    kernel_type, shapes, dtypes, formats, out_shapes, out_dtypes = key
    matches = [r for r in read_rows(db / f"{kernel_type}.csv")
               if (r["Input Shapes"], r["Input Data Types"], r["Input Formats"],
                   r["Output Shapes"], r["Output Data Types"]) ==
               (shapes or '""', dtypes, formats, out_shapes or '""', out_dtypes)]
    assert len(matches) == 1, key
    return matches[0]


@pytest.fixture
def level1(realdata) -> Path:
    return realdata / "kernel_details" / LEVEL1


def test_real_kernel_table_parses_into_the_independently_computed_numbers(
        level1, tmp_path, npuperf) -> None:
    records, durations, counters, duplicates = independent_aggregate(level1)
    db = tmp_path / "db"
    code, out, err = npuperf("parse", "--quiet", "--profile", level1, "--db", db)
    assert code == 0, err
    assert duplicates == 3
    assert f"read 1 kernel table(s), {len(records)} rows" in out
    used = sum(len(v) for v in durations.values())
    assert f"{used} rows in {len(durations)} (kernel type, signature) groups" in out
    assert "3 duplicate launch record" in out
    expected_files = sorted({f"{key[0]}.csv" for key in durations})
    assert sorted(p.name for p in db.glob("*.csv")) == expected_files
    assert sum(len(read_rows(p)) for p in db.glob("*.csv")) == len(durations)
    for key, values in durations.items():
        row = _db_row(db, key)
        assert int(row["Profiling Count"]) == len(values), key
        assert float(row["Profiling Average Duration(us)"]) == pytest.approx(
            statistics.fmean(values), rel=1e-9)
        assert float(row["Profiling Median Duration(us)"]) == pytest.approx(
            statistics.median(values), rel=1e-9)
        assert float(row["Profiling Std Duration(us)"]) == pytest.approx(
            statistics.pstdev(values), rel=1e-8, abs=1e-9)
        assert float(row["Profiling Min Duration(us)"]) == pytest.approx(min(values), rel=1e-9)
        assert float(row["Profiling Max Duration(us)"]) == pytest.approx(max(values), rel=1e-9)
        for counter in COUNTERS:
            expected = statistics.fmean(counters[key][counter])
            assert float(row[f"Profiling Average {counter}"]) == pytest.approx(
                expected, rel=1e-9, abs=1e-12), (key, counter)
        assert row["Average Duration(us)"] == ""
        assert row["OP State"] == "dynamic"


def test_real_kernel_table_quirks_are_present(level1) -> None:
    """The sample still has the quirks the tests above rely on (a guard for the fixture)."""
    raw = level1.read_text(encoding="utf-8")
    assert '"""81920,4096;8192,512"""' in raw                 # literal quotes
    assert '.912\t"' in raw                                    # TAB after the start time
    records, _, _, duplicates = independent_aggregate(level1)
    assert duplicates == 3
    assert {r["Type"] for r in records} >= {"MatMulV2", "MatMulV3", "Add"}


def test_real_variants_bom_and_several_ranks(level1, tmp_path, npuperf) -> None:
    prof = tmp_path / "prof"
    for rank in ("rank0", "rank1"):
        target = prof / rank / f"{rank}_ascend_pt" / "ASCEND_PROFILER_OUTPUT"
        target.mkdir(parents=True)
        shutil.copyfile(level1, target / "kernel_details.csv")
    bom = prof / "rank1" / "rank1_ascend_pt" / "ASCEND_PROFILER_OUTPUT" / "kernel_details.csv"
    bom.write_bytes(b"\xef\xbb\xbf" + bom.read_bytes().replace(b"\n", b"\r\n"))
    _, durations, _, _ = independent_aggregate(level1)
    db = tmp_path / "db"
    code, out, err = npuperf("parse", "--quiet", "--profile", prof, "--db", db)
    assert code == 0, err
    assert "6 duplicate launch record" in out
    for key, values in durations.items():
        row = _db_row(db, key)
        assert int(row["Profiling Count"]) == 2 * len(values)
        assert float(row["Profiling Average Duration(us)"]) == pytest.approx(
            statistics.fmean(values), rel=1e-9)
        assert float(row["Profiling Std Duration(us)"]) == pytest.approx(
            statistics.pstdev(values + values), rel=1e-8, abs=1e-9)
        assert row["Profiling Source"] == "rank0_ascend_pt;rank1_ascend_pt"


def test_rerun_on_real_data_updates_in_place(level1, tmp_path, npuperf) -> None:
    db = tmp_path / "db"
    assert npuperf("parse", "--quiet", "--profile", level1, "--db", db)[0] == 0
    counts = {p.name: len(read_rows(p)) for p in db.glob("*.csv")}
    code, out, _ = npuperf("parse", "--quiet", "--profile", level1, "--db", db)
    assert code == 0
    assert f"0 rows added, {sum(counts.values())} rows updated" in out
    assert {p.name: len(read_rows(p)) for p in db.glob("*.csv")} == counts
    code, out, _ = npuperf("validate", db)
    assert code == 0, out


def test_real_level0_table_has_no_shapes_to_aggregate(realdata, tmp_path, npuperf) -> None:
    level0 = realdata / "kernel_details" / LEVEL0
    with open(level0, encoding="utf-8-sig", newline="") as handle:
        header = next(csv.reader(handle))
    assert "Input Shapes" not in header
    db = tmp_path / "db"
    code, out, err = npuperf("parse", "--quiet", "--profile", level0, "--db", db)
    assert code == 0, err
    assert "level-0 kernel table" in out and "no shapes to aggregate" in out
    assert "nothing to aggregate" in out
    assert tree_digest(db) == {}


def test_real_directory_with_both_levels(realdata, tmp_path, npuperf) -> None:
    db = tmp_path / "db"
    code, out, err = npuperf("parse", "--quiet", "--profile", realdata / "kernel_details",
                             "--db", db)
    assert code == 0, err
    assert LEVEL0 in out and "level-0" in out
    assert "read 1 kernel table(s)" in out
    _, durations, _, _ = independent_aggregate(realdata / "kernel_details" / LEVEL1)
    assert sum(len(read_rows(p)) for p in db.glob("*.csv")) == len(durations)


def test_real_old_schema_fia_file_is_merged_without_misreading_it(realdata, tmp_path,
                                                                   npuperf) -> None:
    fixture = realdata / "msmodeling" / FIA_FIXTURE
    db = tmp_path / "db"
    db.mkdir()
    shutil.copyfile(fixture, db / "FusedInferAttentionScore.csv")
    before = read_rows(db / "FusedInferAttentionScore.csv")
    target = before[3]                                      # the 160-token call
    assert target["Input Shapes"].startswith('"160,4,128;')
    kd = write_kernel_details(tmp_path / "prof" / "kernel_details.csv", [
        {"Step Id": "1", "Model ID": "4294967295", "Task ID": str(task), "Stream ID": "2",
         "Name": "FusedInferAttentionScore", "Type": "FusedInferAttentionScore",
         "OP State": "dynamic", "Accelerator Core": "MIX_AIC",
         "Start Time(us)": f"17364139715{task}.5", "Duration(us)": duration,
         "Input Shapes": _unquote(target["Input Shapes"]),
         "Input Data Types": target["Input Data Types"], "Input Formats": target["Input Formats"],
         "Output Shapes": _unquote(target["Output Shapes"]),
         "Output Data Types": target["Output Data Types"],
         "Output Formats": target["Output Formats"]}
        for task, duration in ((101, "70.5"), (102, "71.5"))])
    code, out, err = npuperf("parse", "--quiet", "--profile", kd, "--db", db)
    assert code == 0, err
    assert "0 rows added, 1 rows updated" in out
    assert "Average Duration(us) -> Profiling Average Duration(us)" in out   # migrated
    after = read_rows(db / "FusedInferAttentionScore.csv")
    assert len(after) == len(before)
    for old, new in zip(before, after):
        # the old profiling averages are profiling values, never replay values
        assert "Average Duration(us)" not in new
        assert new["avg_seq_len"] == old["avg_seq_len"]
        assert new["Input Shapes"] == old["Input Shapes"]
        if new is not after[3]:
            assert new["Profiling Average Duration(us)"] == old["Average Duration(us)"]
    assert after[3]["Profiling Average Duration(us)"] == "71"
    assert after[3]["Profiling Count"] == "2"
    assert after[3]["Runtime num_heads"] == "4"
    assert after[3]["Runtime kv_cache_mode"] == "paged_cache_pool"
    assert after[0]["Runtime num_heads"] == ""          # only the measured row gets metadata
