"""Bounded reading and one-line errors on hostile or damaged input (issue 8, items 3, 5, 8).

Every case reproduces a finding of the issue; sizes are kept small (a few MB) where the
finding used gigabytes: what is checked is that the reader stops at the first bad byte or line,
whatever follows it.
"""

from __future__ import annotations

import builtins
import os
from pathlib import Path

import pytest

from pytest_npuperf.cli import main as cli_main
from pytest_npuperf.db.csvfile import MAX_LINE_BYTES, scan_csv
from pytest_npuperf.db.errors import ContractError
from pytest_npuperf.db.table import read_table
from pytest_npuperf.db.validate import validate_path
from pytest_npuperf.grid.yamlio import MAX_YAML_BYTES

from .conftest import FULL_HEADER, kd_row, kernel_details_text, read_rows, tree_digest

ADD = {"in_shapes": "8,16;8,16", "out_shapes": "8,16"}


def _kd(tmp_path: Path, rows, name: str = "kernel_details.csv") -> Path:
    path = tmp_path / "prof" / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(kernel_details_text(rows))
    return path


def _one_line(code: int, err: str, command: str, *needles: str, status: int | None = None):
    assert code != 0 and (status is None or code == status), (code, err)
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith(f"npuperf {command}: error: ") and "Traceback" not in err
    assert len(lines[0]) < 600, len(lines[0])
    for needle in needles:
        assert needle in lines[0], lines[0]


# -- bounded reading -----------------------------------------------------------------------------

@pytest.mark.parametrize("padding", [b"\0" * (8 << 20), b"\0"])
def test_a_nul_padded_kernel_table_is_one_line_at_its_first_nul(tmp_path, npuperf, padding):
    kd = _kd(tmp_path, [kd_row("Add", 2.0, **ADD)] * 3)
    with open(kd, "ab") as handle:
        handle.write(padding)
    code, _, err = npuperf("parse", "--quiet", "--profile", kd,
                           "--db", tmp_path / "db")
    _one_line(code, err, "parse", str(kd), "NUL byte at line 5", status=1)
    assert not (tmp_path / "db").exists()


def test_an_all_nul_or_binary_file_is_one_line(tmp_path, npuperf):
    path = tmp_path / "kernel_details.csv"
    path.write_bytes(b"\0" * (4 << 20))
    code, _, err = npuperf("parse", "--quiet", "--profile", path,
                           "--db", tmp_path / "db")
    _one_line(code, err, "parse", "NUL byte at line 1", status=1)
    path.write_bytes(os.urandom(1 << 20).replace(b"\0", b"\1"))  # binary without NUL bytes
    code, _, err = npuperf("parse", "--quiet", "--profile", path,
                           "--db", tmp_path / "db")
    _one_line(code, err, "parse", str(path))


def test_a_line_without_end_stops_the_scan_at_the_limit(tmp_path):
    path = tmp_path / "t.csv"
    path.write_bytes(b"a,b\n1,2\n" + b"x" * (MAX_LINE_BYTES + 10))
    with pytest.raises(ContractError, match="line 3 is longer than"):
        scan_csv(path)
    path.write_bytes(b"x" * (MAX_LINE_BYTES + 10))  # not even a header line
    with pytest.raises(ContractError, match="no line end"):
        read_table(path)


def test_unreadable_and_unreadable_like_files_are_one_line(tmp_path, npuperf, monkeypatch):
    kd = _kd(tmp_path, [kd_row("Add", 2.0, **ADD)])
    real_open = builtins.open

    def denied(file, *args, **kwargs):
        if str(file) == str(kd):
            raise PermissionError(13, "Permission denied", str(file))
        return real_open(file, *args, **kwargs)

    monkeypatch.setattr(builtins, "open", denied)  # tests run as root: bits mean nothing
    code, _, err = npuperf("parse", "--quiet", "--profile", kd,
                           "--db", tmp_path / "db")
    _one_line(code, err, "parse", str(kd), "Permission denied")
    monkeypatch.undo()
    if Path("/proc/self/mem").exists():
        code, _, err = npuperf("parse", "--quiet", "--profile", "/proc/self/mem",
                               "--db", tmp_path / "db")
        _one_line(code, err, "parse", "/proc/self/mem")


def test_a_fifo_as_profiling_path_is_refused_without_blocking(tmp_path, npuperf):
    fifo = tmp_path / "kernel_details.csv"
    os.mkfifo(fifo)
    code, _, err = npuperf("parse", "--quiet", "--profile", fifo,
                           "--db", tmp_path / "db")
    _one_line(code, err, "parse", "not a regular file")


def test_an_unreadable_subdirectory_is_named_not_skipped(tmp_path, npuperf, monkeypatch):
    _kd(tmp_path, [kd_row("Add", 2.0, **ADD)], "rank0/kernel_details.csv")
    locked = tmp_path / "prof" / "rank1"
    locked.mkdir()
    real_scandir = os.scandir

    def scandir(path="."):
        if str(path) == str(locked):
            raise PermissionError(13, "Permission denied", str(path))
        return real_scandir(path)

    monkeypatch.setattr(os, "scandir", scandir)
    code, _, err = npuperf("parse", "--quiet", "--profile", tmp_path / "prof",
                           "--db", tmp_path / "db")
    _one_line(code, err, "parse", str(locked), "cannot read this directory")
    (tmp_path / "db").mkdir()
    (tmp_path / "db" / "Add.csv").write_text("OP State\n")
    locked_db = tmp_path / "db" / "sub"
    locked_db.mkdir()
    locked = locked_db
    code, _, err = npuperf("validate", tmp_path / "db")
    _one_line(code, err, "validate", str(locked_db), "cannot read this directory")


# -- kernel tables: what real exports contain -------------------------------------------------

def _with_short_row(tmp_path: Path) -> Path:
    text = kernel_details_text([kd_row("Add", 2.0, **ADD), kd_row("Add", 4.0, **ADD),
                                kd_row("Add", 6.0, **ADD)])
    lines = text.splitlines()
    lines[2] = lines[2].rsplit(",", 1)[0]  # one field fewer, as older CANN tables have
    path = tmp_path / "prof" / "kernel_details.csv"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines) + "\n")
    return path


def test_rows_with_one_field_fewer_are_skipped_counted_and_named(tmp_path, npuperf):
    kd = _with_short_row(tmp_path)
    code, out, err = npuperf("parse", "--quiet", "--profile", kd,
                             "--db", tmp_path / "db")
    assert code == 0, err
    assert f"{kd}: 1 row(s) with fewer fields than the header's 46 (line 3)" in out
    assert "skipped 1 rows: 1 fewer fields than the header" in out
    [row] = read_rows(tmp_path / "db" / "Add.csv")
    assert row["Profiling Count"] == "2" and row["Profiling Average Duration(us)"] == "4"


def test_strict_makes_a_short_row_an_error(tmp_path, npuperf):
    kd = _with_short_row(tmp_path)
    code, _, err = npuperf("parse", "--quiet", "--strict", "--profile", kd,
                           "--db", tmp_path / "db")
    _one_line(code, err, "parse", str(kd), "fewer fields", "line 3", "--strict", status=1)
    assert not (tmp_path / "db").exists()


def test_a_bad_number_after_a_skipped_row_names_the_right_row(tmp_path, npuperf):
    text = kernel_details_text([kd_row("Add", 2.0, **ADD), kd_row("Add", 4.0, **ADD),
                                kd_row("Add", "fast", **ADD)])
    lines = text.splitlines()
    lines[1] = lines[1].rsplit(",", 1)[0]
    kd = tmp_path / "kernel_details.csv"
    kd.write_text("\n".join(lines) + "\n")
    code, _, err = npuperf("parse", "--quiet", "--profile", kd,
                           "--db", tmp_path / "db")
    _one_line(code, err, "parse", "row 3", "'Duration(us)'", "'fast'", status=1)


def test_extra_trailing_fields_are_counted_not_dropped_silently(tmp_path, npuperf):
    text = kernel_details_text([kd_row("Add", 2.0, **ADD), kd_row("Add", 4.0, **ADD)])
    lines = text.splitlines()
    kd = tmp_path / "kernel_details.csv"
    kd.write_text("\n".join([lines[0], lines[1] + ",extra", lines[2]]) + "\n")
    code, out, err = npuperf("parse", "--quiet", "--profile", kd,
                             "--db", tmp_path / "db")
    assert code == 0, err
    assert "1 row(s) with more fields than the header's 46 (line 2)" in out
    code, _, err = npuperf("parse", "--quiet", "--strict", "--profile", kd,
                           "--db", tmp_path / "db2")
    _one_line(code, err, "parse", "more fields", status=1)


def test_a_duplicate_header_name_is_an_error_not_first_wins(tmp_path, npuperf):
    header = list(FULL_HEADER)
    header[header.index("Wait Time(us)")] = "Duration(us)"
    kd = tmp_path / "kernel_details.csv"
    kd.write_text(kernel_details_text([kd_row("Add", 2.0, **ADD)], header))
    code, _, err = npuperf("parse", "--quiet", "--profile", kd,
                           "--db", tmp_path / "db")
    _one_line(code, err, "parse", "'Duration(us)'", "more than once", status=1)


def test_what_parse_writes_validate_accepts(tmp_path, npuperf):
    rows = [
        kd_row("TransData", 3.0, in_shapes="8,16,16,16", in_formats="NC1HWC0:1",
               in_dtypes="FLOAT16", out_shapes="8,16,16,16", out_formats="FRACTAL_Z:1",
               out_dtypes="FLOAT16"),
        # dtype / format lists one short of the shape slots (an absent trailing input)
        kd_row("RmsNorm", 2.0, in_shapes="1,512;512;", in_dtypes="DT_BF16;DT_BF16",
               in_formats="ND;ND", out_shapes="1,512", out_dtypes="DT_BF16"),
        # durations near the float limit: their mean would be inf
        kd_row("Huge", 1.5e308, **ADD), kd_row("Huge", 1.6e308, **ADD), kd_row("Huge", 2.0, **ADD),
    ]
    kd = _kd(tmp_path, rows)
    code, out, err = npuperf("parse", "--quiet", "--profile", kd,
                             "--db", tmp_path / "db")
    assert code == 0, err
    assert "2 duration above 1e+12 us" in out
    code, out, _ = npuperf("validate", tmp_path / "db")
    assert code == 0, out
    norm = read_rows(tmp_path / "db" / "RmsNorm.csv")[0]
    assert norm["Input Data Types"] == "DT_BF16;DT_BF16;DT_UNDEFINED"
    assert norm["Input Formats"] == "ND;ND;NULL"
    assert read_rows(tmp_path / "db" / "Huge.csv")[0]["Profiling Average Duration(us)"] == "2"


def test_dtype_lists_longer_than_the_shapes_are_skipped_and_counted(tmp_path, npuperf):
    kd = _kd(tmp_path, [kd_row("Add", 2.0, in_shapes="8,16", in_dtypes="DT_BF16;DT_BF16",
                               in_formats="ND", out_shapes="8,16"), kd_row("Add", 2.0, **ADD)])
    code, out, err = npuperf("parse", "--quiet", "--profile", kd,
                             "--db", tmp_path / "db")
    assert code == 0, err
    assert "1 dtype or format list with more entries than shape slots" in out
    assert npuperf("validate", tmp_path / "db")[0] == 0


def test_validate_rejects_a_junk_row(tmp_path, npuperf):
    db = tmp_path / "db"
    db.mkdir()
    good = ('dynamic,AI_CORE,"8,16;8,16",DT_BF16;DT_BF16,ND;ND,"8,16",DT_BF16,ND\n')
    (db / "Add.csv").write_text("OP State,Accelerator Core,Input Shapes,Input Data Types,"
                                "Input Formats,Output Shapes,Output Data Types,Output Formats\n"
                                + good + "hello\n")
    code, out, _ = npuperf("validate", db)
    assert code == 1
    assert "row 2: line 3 has 1 field(s), the header has 8" in out
    [report] = [r for r in validate_path(db) if r.path.name == "Add.csv"]
    assert [p.row for p in report.problems] == [2]


@pytest.mark.parametrize("value", ["0", "-2", "abc", "1.5", "8.0", "1e3"])
def test_ep_size_is_a_positive_whole_number(tmp_path, capsys, value):
    kd = _kd(tmp_path, [kd_row("Add", 2.0, **ADD)])
    with pytest.raises(SystemExit) as info:  # argparse: a usage error, before anything runs
        cli_main(["parse", "--quiet", "--profile", str(kd), "--ep-size", value,
                  "--db", str(tmp_path / "db")])
    _one_line(info.value.code, capsys.readouterr().err, "parse", "--ep-size",
              "whole number >= 1", status=2)


# -- grid inputs ------------------------------------------------------------------------------

def _grid(npuperf, tmp_path, *args):
    db = tmp_path / "db"
    db.mkdir(exist_ok=True)
    before = tree_digest(db)
    code, out, err = npuperf("grid", "--db", db, "--quiet", "--dry-run", *args)
    assert tree_digest(db) == before
    return code, out, err


def _config(tmp_path, body: str) -> Path:
    path = tmp_path / "grid.yaml"
    path.write_text(body + "\nassignments: {Add: p}\n")
    return path


def test_a_config_or_model_file_that_never_ends_is_refused_at_the_size_limit(tmp_path, npuperf):
    for option in ("--config", "--model-file"):
        code, _, err = _grid(npuperf, tmp_path, option, "/dev/zero")
        _one_line(code, err, "grid", "/dev/zero", f"larger than {MAX_YAML_BYTES >> 20} MiB")


def test_yaml_aliases_past_the_node_budget_are_refused(tmp_path, npuperf):
    lines = ["a0: &a0 [x, x, x, x, x, x, x, x, x, x]"]
    lines += [f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 10)}]" for i in range(1, 9)]
    bomb = tmp_path / "bomb.yaml"
    bomb.write_text("\n".join(lines) + "\npatterns: *a8\n")
    code, _, err = _grid(npuperf, tmp_path, "--config", bomb)
    _one_line(code, err, "grid", "expands to more than 1,000,000 values")
    models = tmp_path / "models.yaml"
    models.write_text("\n".join(lines) + "\nmodels: *a8\n")
    code, _, err = _grid(npuperf, tmp_path, "--model-file", models)
    _one_line(code, err, "grid", "expands to more than")
    models.write_text("a: &a [1, *a]\nmodels: *a\n")  # a list that contains itself
    code, _, err = _grid(npuperf, tmp_path, "--model-file", models)
    _one_line(code, err, "grid", "expands to more than")


@pytest.mark.parametrize("iterators, needle", [
    ("{M: {min: 1, max: 1.0e+30, mul: 1.0000001}}", "range has 690,775,563 values"),
    ("{M: {min: 1, max: 1.0e+300, mul: 1.0000001}}", "beyond the 3.4e+38 limit"),
    ("{M: {min: 1.0e-30, max: 1.0e+30, mul: 2}}", "inputs"),  # 200 values: only M's dims fail
    ("{M: {min: 1, max: .inf, step: 1}}", "expected a finite number, got inf"),
    ("{M: {min: .nan, max: 4}}", "expected a finite number, got nan"),
    ("{M: {min: 1, max: 10000000}, N: {min: 1, max: 10000000}, K: {min: 1, max: 10000000}}",
     "1,000,000,000,000,000,000,000 candidates"),
])
def test_every_range_kind_and_the_product_are_capped_before_generation(tmp_path, npuperf,
                                                                       iterators, needle):
    config = _config(tmp_path, f'patterns: {{p: {{iterators: {iterators}, '
                               f'inputs: ["(M, 1)"], outputs: ["(M,)"]}}}}')
    code, _, err = _grid(npuperf, tmp_path, "--config", config)
    _one_line(code, err, "grid", needle)


def test_runaway_arithmetic_through_constants_is_an_error_not_a_hang(tmp_path, npuperf):
    constants = ", ".join(["a0: 65536"] + [f'a{i}: "a{i - 1} * a{i - 1}"' for i in range(1, 40)])
    config = _config(tmp_path, f'patterns: {{p: {{constants: {{{constants}}}, '
                               f'inputs: ["(a39,)"], outputs: ["(a39,)"]}}}}')
    code, _, err = _grid(npuperf, tmp_path, "--config", config)
    _one_line(code, err, "grid", "a3 * a3", "beyond the")


def test_runaway_arithmetic_per_candidate_is_an_error(tmp_path, npuperf):
    config = _config(tmp_path, 'patterns: {p: {iterators: {M: [1, 2]}, '
                               'constraints: ["M * 1e300 * 1e300 > 0"], '
                               'inputs: ["(M,)"], outputs: ["(M,)"]}}')
    code, _, err = _grid(npuperf, tmp_path, "--config", config)
    _one_line(code, err, "grid", "beyond the")


def test_deeply_nested_expressions_are_one_line(tmp_path, npuperf):
    config = _config(tmp_path, 'patterns: {p: {iterators: {M: [1, 2]}, '
                               f'constraints: ["{"not " * 400}M"], '
                               'inputs: ["(M,)"], outputs: ["(M,)"]}}')
    code, _, err = _grid(npuperf, tmp_path, "--config", config)
    _one_line(code, err, "grid", "nested more than 100 levels")
    config.write_text(config.read_text().replace(f"{'not ' * 400}M", "(" * 150 + "M" + ")" * 150))
    code, _, err = _grid(npuperf, tmp_path, "--config", config)
    _one_line(code, err, "grid", "nested")


@pytest.mark.parametrize("iterators, constraint, needle", [
    ("{M: [1, " + "9" * 3000 + "]}", "M > 0", "(3,000 characters) is beyond the"),
    ("{M: [1, 1.0e+400]}", "M > 0", "expected a finite number, got inf"),
    ("{M: [1, 2]}", "M < " + "9" * 1500, "unsafe expression"),
    ("{M: [1, 2]}", "M < 1e999", "not finite"),
])
def test_numbers_beyond_any_shape_are_one_line(tmp_path, npuperf, iterators, constraint, needle):
    """Found while trying hostile input: these used to end in an OverflowError traceback."""
    config = _config(tmp_path, f'patterns: {{p: {{iterators: {iterators}, '
                               f'constraints: ["{constraint}"], inputs: ["(M,)"], '
                               f'outputs: ["(M,)"]}}}}')
    code, _, err = _grid(npuperf, tmp_path, "--config", config)
    _one_line(code, err, "grid", needle)


def test_a_model_file_with_an_absurd_dimension_or_nesting_is_one_line(tmp_path, npuperf):
    models = tmp_path / "models.yaml"
    models.write_text(f"name: m\nhidden: {'9' * 3000}\nintermediate: 1\nheads: 1\n"
                      f"kv_heads: 1\nhead_dim: 1\ntp: [1]\n")
    code, _, err = _grid(npuperf, tmp_path, "--model-file", models)
    _one_line(code, err, "grid", "larger than any model dimension")
    models.write_text("models: " + "[" * 1100 + "]" * 1100 + "\n")
    code, _, err = _grid(npuperf, tmp_path, "--model-file", models)
    _one_line(code, err, "grid", "nested too deeply")
