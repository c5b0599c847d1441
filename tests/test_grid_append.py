"""Appending grid rows: existing bytes kept, atomic, idempotent, new files with contract columns."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from pytest_npuperf.db import append as append_module
from pytest_npuperf.db.columns import FIA_RUNTIME_COLUMNS, contract_columns_for
from pytest_npuperf.db.signature import signature
from pytest_npuperf.grid import run_grid

from .conftest import read_header, read_rows, tree_digest

MATMUL = """\
    patterns:
      mm:
        iterators: {M: [1, 2, 4, 8], "N, K": [[256, 512], [512, 256]]}
        inputs: ["(M, K)", "(N, K)"]
        outputs: ["(M, N)"]
      add:
        iterators: {T: [1, 2, 3], H: [64]}
        inputs: ["(T, H)", "(T, H)"]
        outputs: ["(T, H)"]
    assignments: {MatMulV2: mm, MatMulV3: mm, Add: add}
    """


@pytest.fixture
def config(tmp_path) -> Path:
    path = tmp_path / "grid.yaml"
    path.write_text(textwrap.dedent(MATMUL))
    return path


@pytest.fixture
def db(tmp_path) -> Path:
    path = tmp_path / "db"
    path.mkdir()
    return path


def grid(db: Path, config: Path, **kw):
    kw.setdefault("show_progress", False)
    return run_grid(db, config_path=config, **kw)


def test_new_files_get_the_contract_columns(db, config):
    summary = grid(db, config, rows=0)
    assert summary.rows_added == 8 + 0 + 3  # MatMulV3 finds every GEMM taken by MatMulV2
    assert sorted(p.name for p in db.iterdir()) == ["Add.csv", "MatMulV2.csv",
                                                   "collection_meta.yaml", "op_mapping.yaml"]
    assert read_header(db / "MatMulV2.csv") == list(contract_columns_for("MatMulV2"))
    rows = read_rows(db / "MatMulV2.csv")
    assert rows[0]["Input Shapes"] == "1,512;256,512"
    assert rows[0]["OP State"] == "dynamic" and rows[0]["Accelerator Core"] == "AI_CORE"
    filled = {k for r in rows for k, v in r.items() if v}
    assert filled == {"OP State", "Accelerator Core", "Input Shapes", "Input Data Types",
                      "Input Formats", "Output Shapes", "Output Data Types", "Output Formats"}
    assert (db / "MatMulV2.csv").read_bytes().endswith(b"\n")
    assert b"\r" not in (db / "MatMulV2.csv").read_bytes()


def test_second_run_adds_nothing(db, config):
    grid(db, config, rows=5)
    before = tree_digest(db)
    summary = grid(db, config, rows=5)
    assert summary.rows_added == 0
    assert tree_digest(db) == before
    assert "added 0 row(s)" in summary.render()


ODD_FILE = (
    "\ufeffOP State,Input Shapes,Input Data Types,Input Formats,Output Shapes,"
    "Output Data Types,Notes,Average Duration(us)\r\n"
    'static,"""1,512;256,512""",DT_BF16;DT_BF16,ND;ND,"""1,256""",DT_BF16,"keep, me",12.5\r\n'
    '"dynamic","2,256;512,256",DT_BF16;DT_BF16,"ND;ND","2,512",DT_BF16,,0'
)


def test_existing_rows_are_kept_byte_for_byte(db, config):
    path = db / "MatMulV2.csv"
    original = ODD_FILE.encode("utf-8")
    path.write_bytes(original)
    grid(db, config, rows=0, kernels="MatMulV2")
    data = path.read_bytes()
    assert data.startswith(original + b"\r\n")  # the missing final line end is added first
    added = data[len(original) + 2:].decode()
    lines = added.split("\r\n")
    assert lines[-1] == "" and len(lines) - 1 == 8 - 2  # two GEMMs were there already
    rows = read_rows(path)
    assert [r["Notes"] for r in rows[:2]] == ["keep, me", ""]
    assert all(r["Notes"] == "" and r["Average Duration(us)"] == "" for r in rows[2:])
    assert "Accelerator Core" not in rows[0]  # the file's own header is kept as it is


def test_existing_kn_stored_row_blocks_the_candidate(db, config):
    # MatMulV3.csv stores one GEMM as (K, N): the (N, K) candidate of MatMulV2 is a duplicate.
    (db / "MatMulV3.csv").write_text(
        "Input Shapes,Input Data Types,Input Formats,Output Shapes,Output Data Types\n"
        '"4,512;512,256",DT_BF16;DT_BF16,ND;ND,"4,256",DT_BF16\n')
    summary = grid(db, config, rows=0, kernels="MatMulV2")
    shapes = {r["Input Shapes"] for r in read_rows(db / "MatMulV2.csv")}
    assert "4,512;256,512" not in shapes and len(shapes) == 7
    assert summary.plans[0].stats.duplicates == 1


def test_fia_file_without_runtime_columns_is_rewritten_with_them(tmp_path, db):
    config = tmp_path / "fia.yaml"
    config.write_text(textwrap.dedent("""\
        patterns:
          fia:
            generator: fused_infer_attention_score
            params: {scenes: [decode], decode_batch: [1], decode_kv_len: [256]}
        assignments: {FusedInferAttentionScore: fia}
        """))
    path = db / "FusedInferAttentionScore.csv"
    path.write_text("Input Shapes,Input Data Types,Input Formats,Output Shapes,Output Data Types,"
                    "Profiling Average Duration(us)\n"
                    '"1,2,3",DT_BF16,ND,"1,2,3",DT_BF16,7.5\n')
    summary = grid(db, config, rows=0, target_models="qwen3-32b")
    assert summary.plans[0].how == "rewritten"
    header = read_header(path)
    assert header[:6] == ["Input Shapes", "Input Data Types", "Input Formats", "Output Shapes",
                          "Output Data Types", "Profiling Average Duration(us)"]
    # Every Runtime column is added, those the new rows leave empty too (the simulator reads
    # an absent column differently from an empty cell).
    assert set(FIA_RUNTIME_COLUMNS) <= set(header)
    rows = read_rows(path)
    assert rows[0]["Input Shapes"] == "1,2,3" and rows[0]["Profiling Average Duration(us)"] == "7.5"
    assert all(r["Runtime block_table_shape"] for r in rows[1:])
    assert all((r["Runtime phase"], r["Runtime batch_size"], r["Runtime topk"])
               == ("decode", "1", "") for r in rows[1:])


def test_a_failure_while_staging_writes_nothing(db, config, monkeypatch):
    grid(db, config, rows=2)
    before = tree_digest(db)
    real = append_module.stage_rows
    calls = []

    def failing(batch, path, kernel_type, rows, existing):
        calls.append(kernel_type)
        if len(calls) == 2:
            raise OSError("disk full")
        return real(batch, path, kernel_type, rows, existing)

    monkeypatch.setattr("pytest_npuperf.grid.job.stage_rows", failing)
    with pytest.raises(OSError):
        grid(db, config, rows=4)
    assert tree_digest(db) == before  # no file replaced, no temporary file left
    assert len(calls) == 2


def test_file_changed_meanwhile_is_an_error(db, config, monkeypatch):
    grid(db, config, rows=2)
    path = db / "MatMulV2.csv"
    real = append_module.unchanged_since

    def touch_first(existing, target):
        if target == path:
            with open(path, "a", encoding="utf-8") as handle:
                handle.write("dynamic,,1;2,,,3,,\n")
        return real(existing, target)

    monkeypatch.setattr("pytest_npuperf.grid.job.unchanged_since", touch_first)
    with pytest.raises(Exception, match="changed while the grid was being generated"):
        grid(db, config, rows=4)
    assert (db / "Add.csv").read_text().count("\n") == 3  # header + the first run's 2 rows


def test_dry_run_writes_nothing(db, config):
    summary = grid(db, config, rows=0, dry_run=True)
    assert summary.rows_added == 11 and list(db.iterdir()) == []
    text = summary.render()
    assert "would add" in text and "nothing written" in text


def test_rows_written_are_the_rows_generated(db, config):
    from pytest_npuperf.grid import generate_rows

    expected = generate_rows(None, config_path=config, rows=0)
    grid(db, config, rows=0)
    for kernel_type, rows in expected.items():
        path = db / f"{kernel_type}.csv"
        if not rows:
            assert not path.exists()
            continue
        on_disk = read_rows(path)
        assert [{k: r[k] for k in row} for r, row in zip(on_disk, rows)] == rows
        for row in on_disk:
            signature(kernel_type, row["Input Shapes"], row["Input Data Types"],
                      row["Input Formats"], row["Output Shapes"], row["Output Data Types"])


def test_unparsable_existing_rows_are_noted_and_kept(db, config):
    path = db / "Add.csv"
    path.write_text("Input Shapes,Input Data Types,Input Formats,Output Shapes,Output Data Types\n"
                    "x;y,DT_BF16,ND,1,DT_BF16\n")
    summary = grid(db, config, rows=0, kernels="Add")
    assert "1 row(s) with unparsable identity cells were ignored" in summary.render()
    text = path.read_text()
    assert text.startswith("Input Shapes,Input Data Types,Input Formats,Output Shapes,"
                           "Output Data Types\nx;y,DT_BF16,ND,1,DT_BF16\n")
    assert len(read_rows(path)) == 4
