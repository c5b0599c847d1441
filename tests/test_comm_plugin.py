"""Collective cases end to end: two real gloo ranks under torchrun (two runs only: each pays
torch's import per rank). The measurement loop's cases are in test_comm_timing.py."""

from __future__ import annotations

import csv
import hashlib
import json

import pytest
import yaml

from pytest_npuperf.history.store import HistoryStore
from tests.comm_threads import gloo_refuses
from tests.replay_project import BENCH as KERNEL_BENCH
from tests.replay_project import FAST, MATMUL_ROWS, VERSION, write_db

BENCH = '''
def test_collective(npuperf_comm_case, npuperf_collective):
    npuperf_collective(npuperf_comm_case)
'''
ATLAS = "ATLAS_800_A3_752T_128G_DIE"
# Where rank 0 writes: a device and version named here, not the machine's.
NAMES = ["--npuperf-device-name", "TESTCPU", "--npuperf-comm-version", "gloo-test",
         "--npuperf-comm-timeout", "60", *FAST]
RUN_TIMEOUT_S = 180  # a hang guard only; the runs take seconds


def table(path) -> list[dict[str, str]]:
    with open(path, newline="") as handle:
        return list(csv.DictReader(handle))


def digest(root) -> dict[str, str]:
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file()}


DEATH = """
import os
import signal

import pytest


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_call(item):
    if os.environ.get("RANK") == "1" and item.nodeid.endswith("[all_to_all-4KiB-2r-FLOAT-tier1]"):
        os.kill(os.getpid(), signal.SIGKILL)
"""


@pytest.mark.slow
def test_two_ranks_in_lockstep_until_one_dies_and_rank0_writes_what_it_measured(pytester):
    """One real job (each rank pays torch's import): `--npuperf-nproc 2` re-launches under
    torchrun; the float8 cases are skipped (gloo has no float8) and the next cases run on the
    same groups; rank 1 is killed in the last all_to_all case: rank 0 fails that case at once,
    the session ends, and rank 0 writes the cases it measured: it replaces the row of a point
    measured again, keeps the others and their unknown columns, and leaves the Ascend tables
    of the database alone. Where this torch's gloo has no all_to_all (torch 2.11), the first
    all_to_all case is skipped too, saying so, and the second is still the one rank 1 dies in."""
    refused = gloo_refuses("all_to_all")
    ok, skipped = (2, 3) if refused else (3, 2)
    # Kernel cases too: collected, then left out under torchrun (the collective cases must
    # still reach the history).
    pytester.makepyfile(test_collectives=BENCH, test_kernels=KERNEL_BENCH)
    pytester.makeconftest(DEATH)
    version = write_db(pytester.path / "db", {"MatMulV2": MATMUL_ROWS[:1]})
    assert version == pytester.path / "db" / ATLAS / "vllm_ascend" / VERSION
    ascend = pytester.path / "db" / ATLAS / "hccl" / "v8.5"
    ascend.mkdir(parents=True)
    (ascend / "hcom_allReduce_.csv").write_text(
        "message_bytes,num_devices,dtype,topology_tier,Duration(us),bandwidth_gbps\n"
        "1024,2,DT_FLOAT,1,7.0,0.14\n")
    before = digest(pytester.path / "db")
    mine = pytester.path / "out" / "TESTCPU" / "hccl" / "vgloo-test"
    mine.mkdir(parents=True)
    (mine / "hcom_allReduce_.csv").write_text(
        "message_bytes,num_devices,dtype,topology_tier,Duration(us),bandwidth_gbps,owner\n"
        "1024,2,DT_FLOAT,1,999.0,0.001,keepme\n"
        "8192,2,DT_FLOAT,1,5.0,1.6,other\n")
    result = pytester.runpytest_subprocess(
        "--npuperf-nproc", "2", "--npuperf-comm-ops", "all_reduce,all_to_all",
        "--npuperf-comm-sizes", "1K,4K", "--npuperf-comm-dtypes", "FLOAT,FLOAT8_E4M3",
        "--npuperf-db", str(version), "--npuperf-out", str(pytester.path / "out"), *NAMES,
        "--npuperf-baseline", "last", timeout=RUN_TIMEOUT_S)
    out = result.stdout.str()
    assert result.ret != 0, out
    assert f"1 failed, {ok} passed, {skipped} skipped" in out, out + result.stderr.str()
    assert out.count("npuperf collectives") == 1  # rank 0 reports
    assert "skipped: gloo does not run all_reduce on DT_FLOAT8_E4M3" in out
    assert ("skipped: gloo does not run all_to_all on DT_FLOAT" in out) == bool(refused)
    # Rank 0 finds its dead peer itself, or the launcher, seeing rank 1 exit first (a busy
    # host), terminates it inside that case: either way that case fails and the session ends.
    assert ("fault: rank 0:" in out or "fault: not run: terminated by the launcher" in out) \
        and "the session ends" in out
    assert "Timed out" not in out  # the closed connection said so, not the 60 s timeout
    rows = {r["message_bytes"]: r for r in table(mine / "hcom_allReduce_.csv")}
    assert sorted(rows, key=int) == ["1024", "4096", "8192"]
    assert rows["1024"]["owner"] == "keepme" and rows["1024"]["Duration(us)"] != "999.0"
    assert rows["1024"]["run_id"] and rows["1024"]["backend"] == "gloo"
    assert rows["1024"]["check"].startswith("ok") and rows["8192"]["Duration(us)"] == "5.0"
    assert float(rows["4096"]["Duration(us)"]) > 0 and rows["4096"]["ranks"] == "0-1"
    run = json.loads(next((mine / "reports").glob("comm_run_*.json")).read_text())
    assert run["by_status"] == {"ok": ok, "skipped": skipped, "fault": 1} and run["world"] == 2
    assert digest(pytester.path / "db") == before
    # The kernel database of the session names the tables for the simulator (op_mapping.yaml).
    mapping = pytester.path / "out" / "TESTCPU" / "vllm_ascend" / version.name / "op_mapping.yaml"
    doc = yaml.safe_load(mapping.read_text())
    assert doc["communication_data_ref"] == "../../hccl/vgloo-test/"
    mappings, alltoallv = doc["operator_mappings"], mine / "hcom_alltoallv_.csv"
    if refused:  # no all_to_all measured: no table, nothing to map it to
        assert not alltoallv.exists() and "tensor_cast.all_to_all.default" not in mappings
    else:
        assert [r["message_bytes"] for r in table(alltoallv)] == ["1024"]
        assert mappings["tensor_cast.all_to_all.default"]["kernel_type"] == "hcom_alltoallv_"
    # Rank 0 recorded the run, its collective cases included, in the history.
    with HistoryStore(pytester.path / "out" / "history.sqlite", readonly=True) as store:
        cases = store.trend(kernel="all_reduce", signature=None, device="TESTCPU", last=10)
        kept = store.run_cases(cases[0].run_id)
    assert sorted((c.key, c.status) for c in cases) == [
        ("all_reduce-1024B-2r-DT_FLOAT-tier1", "ok"), ("all_reduce-1024B-2r-DT_FLOAT8_E4M3-tier1",
                                                      "skipped"),
        ("all_reduce-4096B-2r-DT_FLOAT-tier1", "ok"), ("all_reduce-4096B-2r-DT_FLOAT8_E4M3-tier1",
                                                      "skipped")]
    ok = next(c for c in kept if c.status == "ok")
    assert ok.kind == "collective" and ok.busbw_gbps > 0 and ok.num_devices == 2
    assert len(ok.samples) == ok.samples_count > 0 and len(kept) == 6
    assert ok.verdict == "NEW"  # judged against the baseline: the history had no run yet
    assert "recorded in" in out


@pytest.mark.parametrize("args, message", [
    (["--npuperf-comm-dtypes", "complex64"], "unsupported collective dtype"),
    (["--npuperf-comm-tiers", "3"], "tiers are 0"),
    (["--npuperf-grid-shape", "2 x"], "not a whole number"),
    (["--npuperf-comm-min-bytes", "4K", "--npuperf-comm-max-bytes", "1K"], "min"),
])
def test_bad_collective_options_are_one_usage_error_line(pytester, monkeypatch, args, message):
    monkeypatch.setenv("RANK", "0")
    monkeypatch.setenv("WORLD_SIZE", "1")
    pytester.makepyfile(test_collectives=BENCH)
    result = pytester.runpytest("-p", "no:cacheprovider", "--collect-only", *args)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([f"*{message}*"])


def test_without_torchrun_one_case_says_how_to_get_ranks(pytester):
    pytester.makepyfile(test_collectives=BENCH)
    result = pytester.runpytest("-p", "no:cacheprovider", "-rs", "-k", "all_gather")
    result.assert_outcomes(skipped=1)
    result.stdout.fnmatch_lines(["*torchrun --nproc-per-node N*--npuperf-nproc N*"])


def test_xdist_is_refused_under_torchrun(pytester, monkeypatch):
    monkeypatch.setenv("RANK", "0")
    monkeypatch.setenv("WORLD_SIZE", "2")
    pytester.makepyfile(test_collectives=BENCH)
    result = pytester.runpytest("-p", "no:cacheprovider", "-n", "2")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*xdist (-n / --dist) cannot be used*"])
