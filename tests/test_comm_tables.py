"""hcom tables: upsert, importers (the real nccl-tests and HCCL Test samples, the old nccl-tests
table, MPI noise), `npuperf import-nccl-tests` and `npuperf comm-validate`."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

from pytest_npuperf.comm.importers import ImportOptions, import_log
from pytest_npuperf.comm.table import COLUMNS, CONTRACT_COLUMNS, upsert, write_tables
from pytest_npuperf.db.table import read_table
from tests.real_samples import REALDATA, needs

NCCL_LOG = REALDATA / "nccl_tests" / "lessizzmore_a3mega_H100x16_all_reduce_perf.txt"
HCCL_LOG = REALDATA / "hccl_test" / "cann_oamtools_doc_all_reduce_test_example.txt"
needs_realdata = needs(NCCL_LOG, HCCL_LOG)

# The older nccl-tests table (2019-2021 builds, src/all_gather.cu print_header): no redop or
# root for all_gather, `error` (the largest deviation) instead of #wrong; rank lines without
# Group. Between the lines, what multi-node MPI runs print.
OLD_ALL_GATHER = """\
[1,0]<stdout>:# nThread 1 nGpus 1 minBytes 1024 maxBytes 4096 step: 2(factor) warmup iters: 5 iters: 20 validation: 1
[1,0]<stdout>:#
[1,0]<stdout>:# Using devices
[1,0]<stdout>:#   Rank  0 Pid  40001 on     node01 device  0 [0x07] Tesla V100-SXM2-32GB
[1,1]<stdout>:#   Rank  1 Pid  40002 on     node01 device  1 [0x0a] Tesla V100-SXM2-32GB
[1,2]<stdout>:#   Rank  2 Pid  50001 on     node02 device  0 [0x07] Tesla V100-SXM2-32GB
[1,3]<stdout>:#   Rank  3 Pid  50002 on     node02 device  1 [0x0a] Tesla V100-SXM2-32GB
Warning: Permanently added 'node02' (ECDSA) to the list of known hosts.
[1,0]<stdout>:#
[1,0]<stdout>:#                                             out-of-place                       in-place
[1,0]<stdout>:#       size         count    type     time   algbw   busbw  error     time   algbw   busbw  error
[1,0]<stdout>:#        (B)    (elements)             (us)  (GB/s)  (GB/s)             (us)  (GB/s)  (GB/s)
[1,0]<stdout>:        1024            64   float    30.00    0.03    0.03  0e+00    29.00    0.04    0.03  0e+00
node02:50001:50077 [0] NCCL INFO Channel 00 : 2[7000] -> 3[a000] via P2P/IPC
[1,0]<stdout>:        2048           128   float    32.00    0.06    0.05  0e+00    31.00    0.07    0.05  0e+00
[1,0]<stdout>:        4096           256   float    40.00    0.10    0.08  2e-07    39.00    0.11    0.08  0e+00
[1,0]<stdout>:# Out of bounds values : 1 FAILED
[1,0]<stdout>:# Avg bus bandwidth    : 0.0533
"""  # noqa: E501 (verbatim nccl-tests lines)
# The modern table (src/util.cu writeResultHeader), broadcast with a root, a wrong result,
# a reduction other than sum in an all_reduce log, an in-place-only line.
MODERN_BROADCAST = """\
# nThread 1 nGpus 2 minBytes 8 maxBytes 64 step: 2(factor) warmup iters: 5 iters: 50 agg iters: 1 validation: 1 graph: 0
#  Rank  0 Group  0 Pid   6899 on hosta device  0 [0000:04:00] NVIDIA H100 80GB HBM3
#  Rank  1 Group  0 Pid   6899 on hosta device  1 [0000:05:00] NVIDIA H100 80GB HBM3
#
#                                                              out-of-place                       in-place
#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong
#        (B)    (elements)                               (us)  (GB/s)  (GB/s)            (us)  (GB/s)  (GB/s)
          16             4     float    none       0    10.00    0.00    0.00      0     9.00    0.00    0.00      0
          32             8     float    none       0    11.00    0.00    0.00      3    10.00    0.00    0.00      0
          64            16     float    none       0                                    12.00    0.01    0.01    N/A
"""  # noqa: E501 (verbatim nccl-tests lines)


def rows_of(path: Path) -> list[dict[str, str]]:
    with open(path, newline="") as handle:
        return list(csv.DictReader(handle))


@needs_realdata
def test_the_real_nccl_tests_log_becomes_all_reduce_rows():
    log = import_log(NCCL_LOG, ImportOptions(run_id="r1"))
    assert (log.op, log.num_devices, log.format) == ("all_reduce", 16, "nccl-tests")
    assert log.topology_tier == 0  # 16 ranks on 2 hosts: a 2 x 8 grid, the group spans hosts
    assert len(log.rows) == 31
    last = log.rows[-1]
    assert last["message_bytes"] == "8589934592" and last["dtype"] == "DT_FLOAT"
    assert last["Duration(us)"] == "47535.000" and last["inplace_duration_us"] == "47743.000"
    assert last["busbw_gbps"] == "338.82" and last["inplace_busbw_gbps"] == "337.35"  # kept
    assert float(last["bandwidth_gbps"]) == pytest.approx(8589934592 / 47535 / 1e3, rel=1e-5)
    assert last["device"] == "NVIDIA H100 80GB HBM3" and last["check"] == "nccl-tests #wrong 0"
    assert last["ops_per_sample"] == "20" and last["warmup"] == "5"
    assert log.rows[0]["busbw_gbps"] == "0"


def test_the_old_nccl_tests_table_with_error_and_mpi_noise(tmp_path):
    path = tmp_path / "all_gather_perf.log"
    path.write_text(OLD_ALL_GATHER)
    log = import_log(path, ImportOptions())
    assert (log.op, log.num_devices, log.topology_tier) == ("all_gather", 4, 0)
    # nccl-tests' all_gather size is the gathered output: the per-rank message is size / n.
    assert [r["message_bytes"] for r in log.rows] == ["256", "512", "1024"]
    assert [r["Duration(us)"] for r in log.rows] == ["30.000", "32.000", "40.000"]
    assert log.rows[2]["check"] == "nccl-tests error 2e-07"
    assert log.rows[0]["device"] == "Tesla V100-SXM2-32GB"
    assert any("old nccl-tests table" in n for n in log.notes)
    assert any("1 out-of-bounds value(s) (FAILED)" in n for n in log.notes)


def test_modern_broadcast_keeps_wrong_rows_out_and_reads_in_place_only_lines(tmp_path):
    path = tmp_path / "run.txt"
    path.write_text("mpirun -np 2 ./build/broadcast_perf -b 16 -e 64\n" + MODERN_BROADCAST)
    log = import_log(path, ImportOptions(topology_tier=2))
    assert (log.op, log.num_devices, log.topology_tier) == ("broadcast", 2, 2)
    assert [r["message_bytes"] for r in log.rows] == ["16", "64"]
    assert log.rows[1]["method"] == "nccl-tests in-place" and log.rows[1]["check"] == "not checked"
    assert any("#wrong > 0" in n for n in log.notes)


def test_reductions_other_than_sum_are_not_imported(tmp_path):
    text = MODERN_BROADCAST.replace("none       0", "prod      -1")
    path = tmp_path / "all_reduce_perf.txt"
    path.write_text(text)
    with pytest.raises(Exception, match="no row to import"):
        from pytest_npuperf.comm.log_import import import_logs
        import_logs([path], tmp_path / "out")


@needs_realdata
def test_the_hccl_test_sample_needs_the_rank_count_and_reads_leniently(tmp_path):
    from pytest_npuperf.db.errors import NpuperfError

    with pytest.raises(NpuperfError, match="--num-devices"):
        import_log(HCCL_LOG, ImportOptions())
    log = import_log(HCCL_LOG, ImportOptions(num_devices=8))
    assert (log.op, log.format, log.topology_tier) == ("all_reduce", "hccl-test", 1)
    assert len(log.rows) == 14 and log.rows[0]["message_bytes"] == "8192"
    assert log.rows[0]["dtype"] == "DT_FLOAT" and log.rows[0]["check"] == "check_result success"
    assert float(log.rows[-1]["Duration(us)"]) == 2630.2
    # A command line in the file gives the rank count and the type; a failed check is dropped.
    text = ("mpirun -n 4 ./bin/all_gather_test -b 8K -e 64M -f 2 -d fp16 -p 4\n"
            + HCCL_LOG.read_text().replace("| success", "| failed", 1)
            .replace("avg_time(us):", "aveg_time(us)"))  # the documentation's spelling
    other = tmp_path / "hccl.txt"
    other.write_text(text)
    log = import_log(other, ImportOptions())
    assert (log.op, log.num_devices, log.rows[0]["dtype"]) == ("all_gather", 4, "DT_FLOAT16")
    assert len(log.rows) == 13 and any("check failed" in n for n in log.notes)


def test_a_file_without_a_table_is_a_data_error(tmp_path):
    from pytest_npuperf.cli import main

    path = tmp_path / "notes.txt"
    path.write_text("hello\n")
    assert main(["import-nccl-tests", str(path), "--db", str(tmp_path / "db")]) == 1


def row(message: int, duration: str = "10.0", dtype: str = "DT_BF16", tier: int = 1,
        **extra: str) -> dict[str, str]:
    return {"message_bytes": str(message), "num_devices": "8", "dtype": dtype,
            "topology_tier": str(tier), "Duration(us)": duration, "bandwidth_gbps": "1", **extra}


def test_upsert_replaces_the_point_and_keeps_everything_else(tmp_path):
    path = tmp_path / "hcom_allReduce_.csv"
    path.write_text("message_bytes,num_devices,dtype,topology_tier,Duration(us),bandwidth_gbps,"
                    "owner\n"
                    "1024,8,DT_BF16,1,50.0,0.02,alice\n"
                    "2048,8,DT_BF16,1,60.0,0.03,bob\n"
                    "1024,8,BF16,1,55.0,0.02,carol\n"  # the same point, other spelling
                    "junk,8,DT_BF16,1,1.0,1,dave\n")
    merged, stats = upsert(read_table(path), [row(1024, "12.5", run_id="r2"), row(4096)],
                           path.name)
    records = merged.to_dict("records")
    assert (stats.updated, stats.added, stats.duplicates_dropped) == (1, 1, 1)
    assert list(merged.columns[:7]) == [*CONTRACT_COLUMNS, "owner"]  # its order, ours after
    assert [(r["message_bytes"], r["Duration(us)"], r["owner"]) for r in records] == [
        ("1024", "12.5", "alice"), ("2048", "60.0", "bob"), ("junk", "1.0", "dave"),
        ("4096", "10.0", "")]
    assert records[0]["run_id"] == "r2"


def test_a_new_table_has_the_contract_columns_first(tmp_path):
    stats = write_tables(tmp_path / "dev" / "hccl" / "v1", {"hcom_allGather_.csv": [row(1024)]},
                         purpose="test")
    path = tmp_path / "dev" / "hccl" / "v1" / "hcom_allGather_.csv"
    assert list(read_table(path).columns) == list(COLUMNS)
    assert stats[0].added == 1
    again = write_tables(path.parent, {"hcom_allGather_.csv": [row(1024, "9.0")]},
                         purpose="test")
    assert again[0].updated == 1 and rows_of(path)[0]["Duration(us)"] == "9.0"


def test_an_lfs_pointer_table_is_refused_and_left_alone(tmp_path):
    from pytest_npuperf.db.errors import ContractError

    path = tmp_path / "hcom_allReduce_.csv"
    pointer = "version https://git-lfs.github.com/spec/v1\noid sha256:abc\nsize 5528\n"
    path.write_text(pointer)
    with pytest.raises(ContractError, match="LFS"):
        write_tables(tmp_path, {path.name: [row(1024)]}, purpose="test")
    assert path.read_text() == pointer


@needs_realdata
def test_import_nccl_tests_cli_writes_and_a_rerun_replaces(tmp_path, capsys):
    from pytest_npuperf.cli import main

    db = tmp_path / "CUDA_NVIDIA_H100" / "hccl" / "vnccl2.21"
    args = ["import-nccl-tests", str(NCCL_LOG), "--db", str(db)]
    assert main([*args, "--dry-run"]) == 0
    assert not db.exists()
    assert main(args) == 0
    assert "31 added" in capsys.readouterr().out
    assert main(args) == 0
    assert "31 row(s) were replaced, 0 added" in capsys.readouterr().out
    assert len(rows_of(db / "hcom_allReduce_.csv")) == 31
    with pytest.raises(SystemExit) as usage:
        main([*args, "--num-devices", "0"])
    assert usage.value.code == 2


@needs_realdata
def test_import_nccl_tests_names_the_tables_in_the_op_mapping_of_the_kernel_databases(
        tmp_path, capsys):
    """The version directories of the same CANN beside the tables, and one named with
    --version-dir, get an op_mapping.yaml whose communication_data_ref is the table directory;
    a hand-edited one is kept byte for byte; a later kernel write keeps the reference."""
    import yaml

    from pytest_npuperf.cli import main
    from pytest_npuperf.db.transaction import Transaction
    from pytest_npuperf.kernels.mapping_writer import ensure_op_mapping

    device = tmp_path / "CUDA_NVIDIA_H100"
    sibling = device / "vllm_ascend" / "vllm0.18.0_torch2.9.0_cann8.5"
    edited = device / "vllm_ascend" / "vllm0.17.0_torch2.8.0_cann8.5"
    named = device / "vllm_ascend" / "vllm0.18.0_torch2.9.0_cann8.3"
    for d in (sibling, edited, named):
        d.mkdir(parents=True)
    (sibling / "MatMulV2.csv").write_text("OP State,Average Duration(us)\n")
    mine = "# my own mapping\noperator_mappings: {}\n"
    (edited / "op_mapping.yaml").write_text(mine)
    hccl = device / "hccl" / "v8.5"
    assert main(["import-nccl-tests", str(NCCL_LOG), "--db", str(hccl),
                 "--version-dir", str(named)]) == 0
    out = capsys.readouterr().out
    assert f"{sibling / 'op_mapping.yaml'}: generated" in out
    assert f"{edited / 'op_mapping.yaml'}: kept" in out
    assert (edited / "op_mapping.yaml").read_text() == mine
    for version_dir in (sibling, named):
        doc = yaml.safe_load((version_dir / "op_mapping.yaml").read_text())
        assert doc["communication_data_ref"] == "../../hccl/v8.5/"
        assert doc["operator_mappings"]["tensor_cast.all_reduce.default"]["kernel_type"] == \
            "hcom_allReduce_"
    assert "profiling.MatMulV2" in (sibling / "op_mapping.yaml").read_text()
    # cann8.3's own default is hccl/v8.3: a kernel write regenerates, the reference stays.
    with Transaction(named, "test") as tx:
        (named / "Add.csv").write_text("OP State\n")
        assert ensure_op_mapping(tx, named) == "kept"
        tx.stage_text(named / "Cast.csv", "OP State\n")
        assert ensure_op_mapping(tx, named) == "regenerated"
    doc = yaml.safe_load((named / "op_mapping.yaml").read_text())
    assert doc["communication_data_ref"] == "../../hccl/v8.5/"
    assert not list(device.glob(".npuperf*")) and not list(hccl.glob(".npuperf*"))
    # A version directory of another device (or anywhere else) is refused, nothing written.
    before = (hccl / "hcom_allReduce_.csv").read_bytes()
    assert main(["import-nccl-tests", str(NCCL_LOG), "--db", str(hccl),
                 "--version-dir", str(tmp_path / "OTHER" / "vllm_ascend" / named.name)]) == 2
    assert "not a version directory of CUDA_NVIDIA_H100" in capsys.readouterr().err
    assert (hccl / "hcom_allReduce_.csv").read_bytes() == before


def test_comm_validate_judges_every_row_and_fails_on_a_fail(tmp_path, capsys):
    from pytest_npuperf.cli import main
    from pytest_npuperf.comm.model import predict_us

    good = predict_us("all_reduce", 1 << 20, 8, 1)
    write_tables(tmp_path, {"hcom_allReduce_.csv": [row(1 << 20, f"{good * 1.5:.3f}")],
                            "hcom_broadcast_.csv": [row(1024)]}, purpose="test")
    assert main(["comm-validate", "--db", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "1 PASS, 0 WARN, 0 FAIL, 0 INVALID, 1 not modelled" in out
    report = tmp_path / "check.md"
    assert main(["comm-validate", "--db", str(tmp_path), "--tolerance", "1.2",
                 "--report", str(report)]) == 0
    assert "WARN" in report.read_text()  # 1.5 is beyond 1.2, within 2.4
    write_tables(tmp_path, {"hcom_allReduce_.csv": [row(1 << 20, f"{good * 10:.3f}"),
                                                    row(2048, "oops")]}, purpose="test")
    assert main(["comm-validate", "--db", str(tmp_path)]) == 1
    out = capsys.readouterr().out
    assert "| FAIL |" in out and "INVALID (unreadable a duration)" in out
    assert main(["comm-validate", "--db", str(tmp_path / "missing")]) == 2
    assert main(["comm-validate", "--db", str(tmp_path), "--tolerance", "0.5"]) == 2


def test_comm_validate_reads_a_table_without_a_tier_as_tier_1(tmp_path, capsys):
    from pytest_npuperf.cli import main

    (tmp_path / "hcom_alltoallv_.csv").write_text("message_bytes,num_devices,Duration(us)\n"
                                                  "1048576,16,10.0\n")
    assert main(["comm-validate", "--db", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "no topology_tier column; rows read as tier 1" in out and "| PASS |" in out


def _without_command_line(text: str) -> str:
    """A log as superbench keeps it: the nccl-tests output without the command that ran it."""
    return "\n".join(line for line in text.splitlines() if "_perf" not in line)


@needs_realdata
@pytest.mark.parametrize(("name", "op"), [
    ("superbench_nccl_allreduce.log", "all_reduce"),
    ("superbench_nccl_allgather.log", "all_gather"),
    ("nccl-bw_reducescatter_rank0.txt", "reduce_scatter"),
    ("superbench_nccl_alltoall.log", "all_to_all"),
    ("nccl_Broadcast.log", "broadcast")])
def test_a_superbench_log_names_its_collective_in_the_file_name(tmp_path, name, op):
    path = tmp_path / name
    path.write_text(_without_command_line(NCCL_LOG.read_text()))
    log = import_log(path, ImportOptions())
    assert log.op == op
    assert any("from the file name" in n for n in log.notes)


@needs_realdata
def test_without_a_name_the_redop_and_root_columns_tell_the_collective(tmp_path):
    path = tmp_path / "rank0.log"
    path.write_text(_without_command_line(NCCL_LOG.read_text()))
    log = import_log(path, ImportOptions())
    # The real all_reduce log: redop sum, root -1, size = count x 4 bytes.
    assert log.op == "all_reduce" and len(log.rows) == 31
    assert any("redop sum, root -1, size = count x element size: all_reduce" in n
               for n in log.notes)
    # A broadcast: nothing reduced, a root rank.
    path.write_text(MODERN_BROADCAST)
    assert import_log(path, ImportOptions()).op == "broadcast"
    # A reduce_scatter: summed, the buffer n x the count.
    path.write_text(MODERN_BROADCAST.replace("16             4     float    none       0",
                                             "16             2     float     sum      -1"))
    assert import_log(path, ImportOptions()).op == "reduce_scatter"


def test_a_table_that_fits_several_collectives_asks_for_op(tmp_path):
    from pytest_npuperf.cli import main

    path = tmp_path / "rank0.log"
    # all_gather and alltoall print the same columns: size = n x count, redop none, root -1.
    path.write_text(MODERN_BROADCAST.replace("16             4     float    none       0",
                                             "16             2     float    none      -1"))
    code = main(["import-nccl-tests", str(path), "--db", str(tmp_path / "out")])
    assert code == 2
