"""The msprof wrap end to end (issue 10, items 1, 3, 4, 5): the parent re-runs the invocation
under a stand-in `msprof` (tests/standin_bin/msprof), the child measures on the CPU and hands
its cases over, the stand-in lays down a PROF tree in the real layout, the parent attributes,
backfills and reports; then `npuperf backfill` reads the same output again."""

from __future__ import annotations

import json
import os
import statistics
import sys
from pathlib import Path

import pytest

# In-process pytester runs drop modules first imported inside them (torch cannot be imported
# twice into one process): import the heavy ones here.
import torch  # noqa: F401

import pytest_npuperf.profiling.profiled  # noqa: F401  (patched below, after such a run)
from pytest_npuperf.harness.wrap import end_wrapped, should_wrap
from pytest_npuperf.history.store import HistoryStore
from pytest_npuperf.measure.result import STATUS_OK, CaseResult
from pytest_npuperf.profiling.handoff import HANDOFF_NAME, read_handoff, write_handoff
from pytest_npuperf.profiling.msprof_parent import ParentRun
from tests.msprof_standin import COUNTERS, counter_value, kernel_duration
from tests.replay_project import BENCH, FAST, MATMUL_ROWS, RMSNORM_ROWS, VERSION, write_db

STANDIN_BIN = Path(__file__).parent / "standin_bin"
SWITCHES = ["--task-time=l1", "--ai-core=on", "--aic-metrics=PipeUtilization", "--msproftx=on"]


@pytest.fixture
def standin(monkeypatch):
    """`msprof` is the stand-in; `python3` is this interpreter."""
    monkeypatch.setenv("PATH", os.pathsep.join(
        [str(STANDIN_BIN), str(Path(sys.executable).parent), os.environ.get("PATH", "")]))
    for name in ("MSPROF_STANDIN_RAN", "MSPROF_STANDIN_EXTRA", "MSPROF_STANDIN_TX",
                 "MSPROF_STANDIN_DROP", "MSPROF_STANDIN_EXPORT", "MSPROF_STANDIN_EXIT",
                 "NPUPERF_MSPROF_CHILD"):
        monkeypatch.delenv(name, raising=False)
    return monkeypatch


@pytest.fixture
def project(pytester):
    pytester.makepyfile(**{"bench/test_kernels": BENCH})
    # MatMulV3.csv holds the signature of the first MatMulV2 row: when the device runs
    # MatMulV3 for it, the measurement belongs there (CONTRACT.md §4, MatMul rule).
    tables = {"MatMulV2": MATMUL_ROWS, "MatMulV3": [MATMUL_ROWS[0]], "RmsNorm": RMSNORM_ROWS}
    return pytester, write_db(pytester.path / "db", tables)


def rows_by_file(db: Path) -> dict[str, list[dict[str, str]]]:
    import csv

    return {p.name: list(csv.DictReader(open(p, encoding="utf-8")))
            for p in sorted(db.glob("*.csv"))}


def expected_from(handoff: Path) -> dict[str, dict]:
    """What the stand-in's formula gives each case (its samples: calls after the warmups)."""
    out = {}
    profiled = [r for r in read_handoff(handoff).results if r.profile]
    for ordinal, result in enumerate(profiled):
        calls, warmup = result.profile["calls"], result.profile["warmup"]
        timed = [kernel_duration(ordinal, j) for j in range(warmup, calls)]
        out[result.kernel_type + ":" + result.case_id] = {
            "median": statistics.median(timed), "samples": len(timed),
            "counters": {name: statistics.fmean(counter_value(d, i) for d in timed)
                         for i, name in enumerate(COUNTERS)}}
    return out


@pytest.mark.slow
def test_wrapped_run_attributes_backfills_reports_and_backfill_reads_it_again(
        project, standin, npuperf):
    pytester, db = project
    standin.setenv("MSPROF_STANDIN_RAN", "MatMulV2=MatMulV3")
    standin.setenv("MSPROF_STANDIN_EXTRA", "RmsNorm=Cast")
    out = pytester.path / "out"
    args = ["bench", "--npuperf-db", str(db), "--npuperf-out", str(out), *FAST,
            "--npuperf-profiler", "msprof", "--npuperf-keep-prof", "-k", "MatMulV2 or RmsNorm"]
    result = pytester.runpytest(*args)
    assert result.ret == 0, result.outlines
    # The child: the same invocation, same interpreter, under msprof's documented switches.
    [run_dir] = list((out / "msprof").iterdir())
    [call] = [json.loads(line) for line in (run_dir / "standin_calls.jsonl").read_text()
              .splitlines()]
    assert call["options"] == {"output": str(run_dir), **{s[2:].split("=")[0]: s.split("=")[1]
                                                          for s in SWITCHES}}
    # (pytester adds --basetemp to what it passes on)
    assert call["app"][:3 + len(args)] == [sys.executable, "-m", "pytest", *args]
    expected = expected_from(run_dir / HANDOFF_NAME)
    [cpu_db] = list(out.glob(f"CPU_*/vllm_ascend/{VERSION}"))
    tables = rows_by_file(cpu_db)
    # MatMulV2 row 1: the device ran MatMulV3, whose file holds the signature -> that row.
    [mm_a] = [v for k, v in expected.items() if k.startswith("MatMulV2:MatMulV2-16x64x32")]
    v3 = tables["MatMulV3.csv"][0]
    assert float(v3["Average Duration(us)"]) == pytest.approx(mm_a["median"])
    assert v3["MicroBench Method"] == "msprof" and v3["MicroBench Statistic"] == "median"
    assert int(v3["MicroBench Samples"]) == mm_a["samples"]
    for name in COUNTERS:  # all 25 counters, the mean of the timed calls' kernels
        assert float(v3[f"MicroBench {name}"]) == pytest.approx(mm_a["counters"][name]), name
    assert tables["MatMulV2.csv"][0]["Average Duration(us)"] == ""  # not this file
    # MatMulV2 row 2 ran MatMulV3 too, but MatMulV3.csv has no such row: it stays in V2.
    [mm_b] = [v for k, v in expected.items() if k.startswith("MatMulV2:MatMulV2-8x128x64")]
    assert float(tables["MatMulV2.csv"][1]["Average Duration(us)"]) == pytest.approx(
        mm_b["median"])
    [rms] = [v for k, v in expected.items() if k.startswith("RmsNorm")]
    rms_row = tables["RmsNorm.csv"][0]
    assert float(rms_row["Average Duration(us)"]) == pytest.approx(rms["median"])  # no Cast
    report = next((out / "reports").glob("replay_report_*.md")).read_text()
    assert "## Profiler Attribution" in report and "Cast x" in report
    assert "3 case(s) attributed by mstx marker, 0 unattributed" in report
    run = json.loads(next((out / "reports").glob("run_*.json")).read_text())
    rms_case = next(c for c in run["cases"] if c["kernel_type"] == "RmsNorm")
    # One Cast per call, warmups included: reported, not in the samples.
    assert rms_case["extra_kernels"] == {"Cast": rms_case["stats"]["samples"]
                                         + rms_case["warmup"]}
    assert rms_case["method"] == "msprof" and rms_case["measured_kernel_type"] == "RmsNorm"
    assert any("raw profiler output kept" in line for line in result.outlines)
    # The parent ends the run as a session does: the history and the standalone html page.
    with HistoryStore(out / "history.sqlite", readonly=True) as store:
        [recorded] = store.runs()
        cases = store.run_cases(recorded.run_id)
    assert recorded.run_id == run["run_id"] and recorded.passed
    assert run_dir.name == recorded.run_id  # the child measured the run its parent named
    assert sorted(c.kernel for c in cases) == ["MatMulV2", "MatMulV2", "RmsNorm"]
    assert all(c.method == "msprof" and c.samples for c in cases)
    page = next((out / "reports").glob("report_*.html")).read_text()
    assert "<svg" not in page and "RmsNorm" in page  # FAST: --npuperf-no-figures, obeyed
    assert any(f"run {recorded.run_id} recorded in" in line for line in result.outlines)

    # `npuperf backfill` of the kept output: the same numbers into another database, judged
    # against the wrapped run (the same samples: no case is SLOWER) and recorded. Its kernel
    # table is read by a child process (as a large one is), the wrapped run's in-process.
    standin.setattr("pytest_npuperf.profiling.profiled.CHILD_MIN_BYTES", 1)
    other = write_db(pytester.path / "again", {"MatMulV2": MATMUL_ROWS,
                                               "MatMulV3": [MATMUL_ROWS[0]],
                                               "RmsNorm": RMSNORM_ROWS})
    code, text, err = npuperf("backfill", "--profile", run_dir, "--db", other,
                              "--history", out / "history.sqlite", "--baseline",
                              recorded.run_id)
    assert code == 0, err
    assert "matched by the runs' hand-off files" in text
    assert "kernel tables read in a child process" in text
    assert f"vs baseline run {recorded.run_id}" in text and "SLOWER" not in text
    page = next((other / "reports").glob("report_*.html")).read_text()
    assert "<svg" in page and "GEMM latency vs M" in page
    with HistoryStore(out / "history.sqlite", readonly=True) as store:
        latest = store.runs()[-1]
        again_cases = store.run_cases(latest.run_id)
    assert latest.run_id != recorded.run_id and len(again_cases) == 3
    assert {c.verdict for c in again_cases} <= {"SAME", "UNCERTAIN"}, again_cases
    again = rows_by_file(other)
    assert again["MatMulV3.csv"][0]["Average Duration(us)"] == v3["Average Duration(us)"]
    assert again["RmsNorm.csv"][0]["MicroBench aicore_time(us)"] == \
        rms_row["MicroBench aicore_time(us)"]


# -- the parent's failure paths, without a child -------------------------------------------------
def _handoff(run_dir: Path, db: Path, results: list[CaseResult]) -> None:
    write_handoff(run_dir / HANDOFF_NAME, {
        "source": str(db), "target": str(db), "native": True, "grid": False,
        "reports_dir": str(db / "reports"), "run_id": "20260101_000000-abcdef12",
        "stamp": "20260101_000000", "dry_run": False, "prune_empty": False, "notes": [],
        "info": {"run_id": "r", "started": "2026-01-01T00:00:00", "wall_s": 1.0,
                 "device": {"kind": "npu"}, "options": {}}}, results)


def _case(db: Path, begin: float, *, calls: int = 3) -> CaseResult:
    from pytest_npuperf.profiling.profiled import profile_record
    from pytest_npuperf.replay.cases import CaseCatalog

    ref = next(r for r in CaseCatalog(db).cases() if r.kernel_type == "RmsNorm")
    result = CaseResult(case_id=ref.case_id, nodeid="n", kernel_type="RmsNorm", file=ref.file,
                        signature=ref.signature, row=ref.row_number, status=STATUS_OK)
    result.set_samples([3.0, 3.1, 3.2])
    result.profile = profile_record(ref.case_id, "RmsNorm", pid=1, device=0, calls=calls,
                                    warmup=1, range_us=(begin, begin + 1000))
    return result


def test_deferred_export_new_marker_form_and_a_failing_msprof(tmp_path, standin):
    """msprof exited non-zero after writing raw data only: the parent exports, reads the
    summaries anyway (host ranges of the newest marker form), keeps the raw output, and exits
    with msprof's status."""
    from tests.msprof_standin import collect

    db = write_db(tmp_path / "db", {"RmsNorm": RMSNORM_ROWS})
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    _handoff(run_dir, db, [_case(db, 1.7e15)])
    standin.setenv("MSPROF_STANDIN_EXPORT", "deferred")
    standin.setenv("MSPROF_STANDIN_TX", "new")
    standin.setenv("NPUPERF_MSPROF_CHILD", str(run_dir / HANDOFF_NAME))
    collect(run_dir, [sys.executable, "-c", "pass"])  # what msprof left: PROF, not exported
    assert not list(run_dir.rglob("op_summary_*.csv"))
    code = end_wrapped(ParentRun(run_dir, str(STANDIN_BIN / "msprof"), 3, keep=False,
                                  started=0.0))
    assert code == 3
    assert list(run_dir.rglob("op_summary_*.csv"))  # exported by the parent
    row = rows_by_file(db)["RmsNorm.csv"][0]
    assert row["MicroBench Method"] == "msprof" and row["MicroBench Samples"] == "2"
    assert run_dir.is_dir()  # kept: msprof failed
    report = next((db / "reports").glob("replay_report_*.md")).read_text()
    assert "exited with status 3; its summaries were read anyway" in report


def test_no_summaries_says_which_kernel_types_ran_and_keeps_the_rows(tmp_path, capsys):
    db = write_db(tmp_path / "db", {"RmsNorm": RMSNORM_ROWS})
    run_dir = tmp_path / "run"
    (run_dir / "PROF_1" / "device_0" / "data").mkdir(parents=True)
    _handoff(run_dir, db, [_case(db, 1.7e15)])
    code = end_wrapped(ParentRun(run_dir, "/nonexistent/msprof", 0, keep=False, started=0.0))
    assert code == 0
    row = rows_by_file(db)["RmsNorm.csv"][0]
    assert row["Average Duration(us)"] == ""  # no kernel time: the latency is not replaced
    assert row["MicroBench Status"].startswith("unattributed: msprof wrote no kernel summaries")
    report = next((db / "reports").glob("replay_report_*.md")).read_text()
    assert "kernel types that ran: RmsNorm. Re-run them one session each" in report
    assert run_dir.is_dir() and "raw profiler output kept" in capsys.readouterr().out


# -- when to wrap ------------------------------------------------------------------------------
def test_auto_wraps_only_replay_runs_on_an_npu_host_with_msprof(pytester, standin):
    pytester.makepyfile(test_plain="def test_x():\n    pass\n")
    config = pytester.parseconfig("--npuperf-device", "npu")
    assert not should_wrap(config)  # no test file names npuperf_case: the plugin stays inert
    pytester.makepyfile(**{"bench/test_kernels": BENCH})
    assert should_wrap(pytester.parseconfig("--npuperf-device", "npu"))
    assert not should_wrap(pytester.parseconfig("--npuperf-device", "cpu"))
    assert not should_wrap(pytester.parseconfig("--npuperf-device", "npu",
                                                "--npuperf-profiler", "none"))
    assert not should_wrap(pytester.parseconfig("--npuperf-device", "npu", "--collect-only"))
    assert should_wrap(pytester.parseconfig("--npuperf-profiler", "msprof", "test_plain.py"))
    standin.setenv("NPUPERF_MSPROF_CHILD", "x")
    assert not should_wrap(pytester.parseconfig("--npuperf-profiler", "msprof"))



def test_auto_wraps_the_packaged_suite_by_module_name_and_through_the_clones_bench(pytester,
                                                                                  standin):
    assert should_wrap(pytester.parseconfig("--npuperf-device", "npu", "--pyargs",
                                            "pytest_npuperf.suite"))
    assert not should_wrap(pytester.parseconfig("--npuperf-device", "npu", "--pyargs",
                                                "pytest_npuperf.kernels"))
    clone_bench = Path(__file__).resolve().parents[1] / "bench"
    assert should_wrap(pytester.parseconfig("--npuperf-device", "npu", str(clone_bench)))


def test_msprof_missing_is_one_line_saying_how_to_source_cann(pytester, monkeypatch):
    monkeypatch.setenv("PATH", str(pytester.path))
    monkeypatch.delenv("NPUPERF_MSPROF_CHILD", raising=False)
    result = pytester.runpytest("--npuperf-profiler", "msprof")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    errors = [line for line in result.errlines if line.startswith("ERROR")]
    assert errors == ["ERROR: --npuperf-profiler msprof: the msprof command is not on PATH; "
                      "source the CANN environment first, e.g. `source "
                      "/usr/local/Ascend/ascend-toolkit/set_env.sh` (or <CANN "
                      "install>/set_env.sh)"]


def test_backfill_of_marker_files_without_a_range_matches_by_order(tmp_path, standin):
    """The kernels are read ahead before the markers, without their shapes when marker files
    exist; marker files that hold no range leave attribution to launch order, which reads
    the kernels again with their shapes."""
    from pytest_npuperf.measure.policy import METHOD_MSPROF_ORDER
    from pytest_npuperf.run.from_profile import backfill_profile
    from tests.msprof_standin import collect

    db = write_db(tmp_path / "db", {"RmsNorm": RMSNORM_ROWS})
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    _handoff(run_dir, db, [_case(db, 1.7e15)])
    standin.setenv("NPUPERF_MSPROF_CHILD", str(run_dir / HANDOFF_NAME))
    collect(run_dir, [sys.executable, "-c", "pass"])
    (tx,) = run_dir.rglob("msprof_tx_*.csv")
    tx.write_text(tx.read_text().splitlines()[0] + "\n")  # the header, no range
    # The paths as texts, as a script passes them (benchmarks/bench_msprof_ingest.py).
    lines, code = backfill_profile(str(run_dir), str(db), reports=False)
    assert code == 0
    row = rows_by_file(db)["RmsNorm.csv"][0]
    assert row["MicroBench Method"] == METHOD_MSPROF_ORDER, lines
    assert row["MicroBench Samples"] == "2" and row["Average Duration(us)"]
