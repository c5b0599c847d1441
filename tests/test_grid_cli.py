"""`npuperf grid` on the command line: dry run, bad inputs, the embedded default database."""

from __future__ import annotations

import os
import textwrap
from pathlib import Path

import pytest

from pytest_npuperf.harness.options import DEFAULT_DB
from pytest_npuperf.kernels import catalog

from .conftest import tree_digest

EMBEDDED = DEFAULT_DB
# The embedded database holds rows of every kernel type the catalog knows.
EMBEDDED_KERNELS = set(catalog.kernel_types())

CONFIG = """\
    patterns:
      add:
        iterators: {T: [1, 2, 4], H: [64, 32768]}
        inputs: ["(T, H)", "(T, H)"]
        outputs: ["(T, H)"]
      mm:
        iterators: {M: [1, 2], "N, K": [[256, 512]]}
        inputs: ["(M, K)", "(N, K)"]
        outputs: ["(M, N)"]
    assignments: {Add: add, MatMulV2: mm}
    """


@pytest.fixture
def db(tmp_path) -> Path:
    path = tmp_path / "db"
    path.mkdir()
    (path / "Notes.csv").write_text("a,b\n1,2\n")
    return path


@pytest.fixture
def config(tmp_path) -> Path:
    path = tmp_path / "grid.yaml"
    path.write_text(textwrap.dedent(CONFIG))
    return path


def test_grid_writes_and_reports(npuperf, db, config):
    code, out, err = npuperf("grid", "--db", db, "--config", config, "--quiet")
    assert code == 0, err
    assert "Add" in out and "added 8 row(s) to 2 file(s)" in out
    assert (db / "Add.csv").exists() and (db / "MatMulV2.csv").exists()
    code, out, _ = npuperf("grid", "--db", db, "--config", config, "--quiet")
    assert code == 0 and "added 0 row(s)" in out


def test_dry_run_prints_counts_per_kernel_and_writes_nothing(npuperf, db, config):
    before = tree_digest(db)
    code, out, err = npuperf("grid", "--db", db, "--config", config, "--dry-run",
                             "--max-hbm-gb", str(265216 / 2 ** 30), "--rows", "3")
    assert code == 0, err
    assert tree_digest(db) == before
    lines = out.splitlines()
    header = next(line for line in lines if line.startswith("kernel type"))
    assert header.split()[2:] == ["candidates", "over", "memory", "duplicates", "would", "add"]
    add = next(line for line in lines if line.startswith("Add "))
    # 6 T H bytes per Add row: T = 2 and 4 with H = 32768 are over the budget; the second
    # GEMM, (2*512 + 256*512 + 2*256) * 2 = 265216 bytes, is exactly at it and is kept.
    assert add.split()[1:] == ["6", "2", "0", "3"]
    assert next(line for line in lines if line.startswith("MatMulV2")).split()[1:] == [
        "2", "0", "0", "2"]
    assert "dry run: 5 row(s) would be added to 2 file(s)" in out and "nothing written" in out


def _fails(npuperf, db, *args, match: str) -> str:
    before = tree_digest(db)
    code, out, err = npuperf("grid", "--db", db, "--quiet", *args)
    assert code == 2, (out, err)
    assert err.count("\n") == 1 and err.startswith("npuperf grid: error: ")
    assert match in err, err
    assert tree_digest(db) == before
    return err


def test_invalid_yaml(npuperf, db, tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("patterns:\n  add: {iterators: [1, 2}\n")
    err = _fails(npuperf, db, "--config", bad, match=f"{bad}:2:")
    assert "invalid YAML" in err


def test_failing_expression(npuperf, db, tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text(textwrap.dedent("""\
        patterns:
          add:
            iterators: {T: [2, 1], H: [8]}
            inputs: ["(T, H // (T - 1))", "(T, H)"]
            outputs: ["(T, H)"]
        assignments: {Add: add}
        """))
    err = _fails(npuperf, db, "--config", bad, match="pattern 'add'")
    assert "'H // (T - 1)'" in err and "T=1" in err


def test_unsafe_expression(npuperf, db, tmp_path):
    marker = tmp_path / "ran"
    bad = tmp_path / "bad.yaml"
    bad.write_text(textwrap.dedent(f"""\
        patterns:
          add:
            iterators: {{T: [1]}}
            constraints: ["__import__('os').system('touch {marker}') == 0"]
            inputs: ["(T,)"]
            outputs: ["(T,)"]
        assignments: {{Add: add}}
        """))
    _fails(npuperf, db, "--config", bad, match="unsafe expression")
    assert not marker.exists()


def test_unknown_kernel_and_model(npuperf, db, config):
    err = _fails(npuperf, db, "--config", config, "--kernels", "Add,Nope", match="'Nope'")
    assert "Add, MatMulV2" in err
    err = _fails(npuperf, db, "--target-models", "nope", match="unknown model 'nope'")
    assert "deepseek-v3" in err and "Qwen/Qwen3-32B" in err


def test_budget_below_every_row(npuperf, db, config):
    _fails(npuperf, db, "--config", config, "--max-hbm-gb", "0.0000001",
           match="below every one of the")


@pytest.mark.parametrize("args, match", [
    (("--rows", "-1"), "--rows must be"),
    (("--max-hbm-gb", "-2"), "--max-hbm-gb must be"),
    (("--config", "/no/such/file.yaml"), "no such config file"),
    (("--model-file", "/no/such/models.yaml"), "no such file"),
])
def test_bad_options(npuperf, db, config, args, match):
    _fails(npuperf, db, *args, match=match)


def test_a_missing_directory_is_created_and_a_file_refused(npuperf, tmp_path, config):
    """Every writer creates its target directory (parse always did; grid refused)."""
    target = tmp_path / "new" / "vllm0.18.0_torch2.9.0_cann8.5"
    code, _, err = npuperf("grid", "--db", target, "--config", config, "--dry-run")
    assert code == 0 and not target.exists()  # a dry run creates nothing
    code, _, err = npuperf("grid", "--db", target, "--config", config)
    assert code == 0 and err == "" and sorted(p.name for p in target.glob("*.csv"))
    code, _, err = npuperf("grid", "--db", tmp_path / "missing", "--config", "/no/such.yaml")
    assert code == 2 and not (tmp_path / "missing").exists()  # nothing made for a bad job
    afile = tmp_path / "afile"
    afile.write_text("x")
    code, _, err = npuperf("grid", "--db", afile, "--config", config)
    assert code == 2 and "not a directory" in err


@pytest.mark.skipif(os.geteuid() == 0, reason="root can write into read-only directories")
def test_read_only_data_dir(npuperf, db, config):
    db.chmod(0o555)
    try:
        _fails(npuperf, db, "--config", config, match="cannot write to")
    finally:
        db.chmod(0o755)


def test_embedded_database_is_regenerated_byte_identically(npuperf, tmp_path):
    """The documented command, run on an empty directory, gives the committed files."""
    target = tmp_path.joinpath(*EMBEDDED.parts[-3:])  # <DEVICE>/vllm_ascend/<VERSION>, as committed
    target.mkdir(parents=True)
    code, out, err = npuperf("grid", "--config", "embedded_db", "--db", target, "--quiet")
    assert code == 0, err
    committed = sorted([p.name for p in EMBEDDED.glob("*.csv")] + ["op_mapping.yaml"])
    # and the record of how it was collected (its time: never committed)
    assert sorted(p.name for p in target.iterdir()) == sorted(committed
                                                              + ["collection_meta.yaml"])
    assert "kind: grid" in (target / "collection_meta.yaml").read_text()
    for name in committed:
        assert (target / name).read_bytes() == (EMBEDDED / name).read_bytes(), name
    assert {n[:-4] for n in committed if n.endswith(".csv")} >= EMBEDDED_KERNELS
    code, out, _ = npuperf("grid", "--config", "embedded_db", "--db", target, "--quiet")
    assert code == 0 and "added 0 row(s)" in out
    code, out, _ = npuperf("grid", "--config", "embedded_db", "--db", EMBEDDED, "--dry-run",
                           "--quiet")
    assert code == 0 and "dry run: 0 row(s) would be added" in out


def test_embedded_rows_are_small():
    from pytest_npuperf.kernels.case import case_from_row
    from pytest_npuperf.kernels.registry import spec_for

    from .conftest import read_rows

    total = 0
    for kernel_type in EMBEDDED_KERNELS:
        rows = read_rows(EMBEDDED / f"{kernel_type}.csv")
        assert 0 < len(rows) <= 36
        total += len(rows)
        spec = spec_for(kernel_type)
        for row in rows:
            case = case_from_row(kernel_type, row)
            largest = max(s.numel for s in case.inputs if s.present)
            # DispatchFFNCombine: one DeepSeek-V3 expert per rank is its smallest row.
            assert largest <= (32 if kernel_type == "DispatchFFNCombine" else 8) * 2 ** 20
            if spec is not None:  # a kernel without a replay yet: a skipped case
                spec.check(case)
                # DispatchFFNCombine: T*8 token-expert pairs through one 44 Mi-weight expert.
                limit = 6e9 if kernel_type == "DispatchFFNCombine" else 2e8
                assert spec.flops(case) <= limit, row["Input Shapes"]
    assert total <= 300
