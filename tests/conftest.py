"""Shared fixtures: the real profiler samples, and writers of synthetic files that reproduce
every quirk of the real ones (docs/format.md §5): literal quotes around shapes, a TAB after start
times, N/A (HCCL) rows, a UTF-8 BOM, CRLF line ends, headers without `OP State` /
`HF32 Eligible`, other counter sets, level-0 tables.
"""

from __future__ import annotations

import csv
import hashlib
import io
import itertools
import os
import statistics
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

import pytest
from hypothesis import settings

from pytest_npuperf.cli import main as cli_main

# The 25 counters of docs/format.md §2, spelled out once for the tests (the msprof stand-in runs
# without pytest, so it holds them).
from tests.msprof_standin import COUNTERS
from tests.real_samples import ABSENT, REALDATA

# Property tests: the same examples on every run (CI must not flake), and no example
# database written into the working tree.
settings.register_profile("npuperf", derandomize=True, database=None)
settings.load_profile("npuperf")
# The pytest processes the tests start (pytester, torchrun ranks) skip hypothesis's plugin, as
# pyproject.toml's addopts do here: it would import all of hypothesis (~1 s) in each.
os.environ["PYTEST_ADDOPTS"] = f"{os.environ.get('PYTEST_ADDOPTS', '')} -p no:hypothesispytest".strip()

def pytest_configure(config: pytest.Config) -> None:
    """`pytest tests` runs the quick tests; the end-to-end ones that start whole pytest sessions,
    installs or kill processes are marked `slow` and run with `-m slow` (README's test command
    runs both)."""
    config.addinivalue_line("markers", "slow: an end-to-end test of several seconds (run with -m slow)")
    if not config.option.markexpr:
        config.option.markexpr = "not slow"



# Level 1, CANN 8.x (docs/format.md §5), spelled out here rather than imported from the product.
FULL_HEADER = (
    "Step Id", "Model ID", "Task ID", "Stream ID", "Name", "Type", "OP State",
    "Accelerator Core", "Start Time(us)", "Duration(us)", "Wait Time(us)", "Block Dim",
    "Mix Block Dim", "HF32 Eligible", "Input Shapes", "Input Data Types", "Input Formats",
    "Output Shapes", "Output Data Types", "Output Formats", "Context ID", *COUNTERS,
)
# CANN 7.x: no OP State, no HF32 Eligible, another counter set.
CANN7_COUNTERS = ("aicore_time(us)", "aic_total_cycles", "aic_mac_fp16_ratio",
                  "aic_mac_int8_ratio", "aic_cube_fops", "aic_l0a_read_bw(GB/s)")
CANN7_HEADER = (
    "Step Id", "Model ID", "Task ID", "Stream ID", "Name", "Type", "Accelerator Core",
    "Start Time(us)", "Duration(us)", "Wait Time(us)", "Block Dim", "Mix Block Dim",
    "Input Shapes", "Input Data Types", "Input Formats", "Output Shapes", "Output Data Types",
    "Output Formats", "Context ID", *CANN7_COUNTERS,
)
LEVEL0_HEADER = ("Step Id", "Name", "Type", "Accelerator Core", "Start Time(us)",
                 "Duration(us)", "Wait Time(us)", "Block Dim")
SHAPE_CELLS = ("Input Shapes", "Output Shapes")

_task_ids = itertools.count(60000)


def kd_row(type: str = "MatMulV2", duration: float | str = 10.0, *,
           in_shapes: str = "128,7168;3584,7168", in_dtypes: str = "DT_BF16;DT_BF16",
           in_formats: str = "ND;ND", out_shapes: str = "128,3584", out_dtypes: str = "DT_BF16",
           out_formats: str = "ND", core: str = "AI_CORE", op_state: str = "dynamic",
           task: int | None = None, stream: int = 2, start: float | str | None = None,
           name: str | None = None, counters: Mapping[str, float | str] | None = None,
           **extra: str) -> dict[str, str]:
    """One kernel_details record as cell texts (before CSV quoting)."""
    task = next(_task_ids) if task is None else task
    start = f"{1736413971000000 + task * 10:.3f}" if start is None else start
    row = {
        "Step Id": "19", "Model ID": "4294967295", "Task ID": str(task), "Stream ID": str(stream),
        "Name": name or f"aclnn{type}_{type}_{type}", "Type": type, "OP State": op_state,
        "Accelerator Core": core, "Start Time(us)": str(start), "Duration(us)": str(duration),
        "Wait Time(us)": "1.087", "Block Dim": "20", "Mix Block Dim": "0", "HF32 Eligible": "NO",
        "Input Shapes": in_shapes, "Input Data Types": in_dtypes, "Input Formats": in_formats,
        "Output Shapes": out_shapes, "Output Data Types": out_dtypes,
        "Output Formats": out_formats, "Context ID": "N/A",
    }
    row.update({k: str(v) for k, v in (counters or {}).items()})
    row.update(extra)
    return row


def hccl_row(duration: float = 72994.438, **kw: str) -> dict[str, str]:
    """An HCCL record of a level-1 table: N/A in most columns."""
    row = kd_row("hcom_allReduce_", duration, in_shapes="N/A", in_dtypes="N/A",
                 in_formats="N/A", out_shapes="N/A", out_dtypes="N/A", out_formats="N/A",
                 core="HCCL", op_state="N/A", name="hcom_allReduce__868_0_1")
    row.update({c: "N/A" for c in COUNTERS})
    row.update({"Block Dim": "0", "HF32 Eligible": "N/A"})
    row.update(kw)
    return row


def _csv_cell(text: str) -> str:
    if any(ch in text for ch in ',"\t\r\n'):
        return '"' + text.replace('"', '""') + '"'
    return text


def kernel_details_text(rows: Iterable[Mapping[str, str]], header: Sequence[str] = FULL_HEADER,
                        *, literal_quotes: bool = True, start_tab: bool = True,
                        crlf: bool = False, default_counter: str = "0") -> str:
    """CSV text as torch_npu writes it: shapes wrapped in literal quotes (on disk
    `\"\"\"1,2\"\"\"`), a TAB after each start time, counters present as numbers."""
    lines = [",".join(_csv_cell(h) for h in header)]
    for row in rows:
        cells = []
        for column in header:
            value = row.get(column, default_counter if column not in FULL_HEADER[:21] else "")
            if column in SHAPE_CELLS and literal_quotes and value not in ("N/A",):
                value = f'"{value}"'
            if column == "Start Time(us)" and start_tab:
                value = f"{value}\t"
            cells.append(_csv_cell(str(value)))
        lines.append(",".join(cells))
    end = "\r\n" if crlf else "\n"
    return end.join(lines) + end


def write_kernel_details(path: Path, rows: Iterable[Mapping[str, str]],
                         header: Sequence[str] = FULL_HEADER, *, bom: bool = False,
                         **kw: object) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    text = kernel_details_text(rows, header, **kw)  # type: ignore[arg-type]
    path.write_bytes((b"\xef\xbb\xbf" if bom else b"") + text.encode("utf-8"))
    return path


def write_csv(path: Path, header: Sequence[str], rows: Iterable[Sequence[str] | Mapping[str, str]],
              *, crlf: bool = False) -> Path:
    """A database CSV as the csv module writes it (minimal quoting)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\r\n" if crlf else "\n")
    writer.writerow(header)
    for row in rows:
        writer.writerow([row.get(h, "") for h in header] if isinstance(row, Mapping) else row)
    path.write_bytes(buffer.getvalue().encode("utf-8"))
    return path


def read_rows(path: Path) -> list[dict[str, str]]:
    with open(path, encoding="utf-8-sig", newline="") as handle:
        return list(csv.DictReader(handle))


def read_header(path: Path) -> list[str]:
    with open(path, encoding="utf-8-sig", newline="") as handle:
        return next(csv.reader(handle))


def tree_digest(root: Path) -> dict[str, str]:
    """Every file below `root` (hidden ones included) -> sha256 of its bytes."""
    if not root.exists():
        return {}
    if root.is_file():
        return {root.name: hashlib.sha256(root.read_bytes()).hexdigest()}
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file()}


def stats(values: Sequence[float]) -> dict[str, float]:
    """Expected aggregates, computed with the statistics module (exact summation)."""
    return {"count": len(values), "mean": statistics.fmean(values),
            "median": statistics.median(values), "std": statistics.pstdev(values),
            "min": min(values), "max": max(values)}


@pytest.fixture
def realdata() -> Path:
    if not REALDATA.is_dir():
        pytest.skip(ABSENT)
    return REALDATA


@pytest.fixture
def npuperf(capsys: pytest.CaptureFixture[str]):
    """Run `npuperf ARGS...` in-process: returns (exit code, stdout, stderr)."""
    def run(*args: object) -> tuple[int, str, str]:
        capsys.readouterr()
        code = cli_main([str(a) for a in args])
        out, err = capsys.readouterr()
        return code, out, err
    return run


@pytest.fixture(autouse=True)
def _own_cache_dir(request, monkeypatch):
    """Each test that runs sessions keeps what a session caches per device (the demo model's
    trace) in a directory of its own: never the user's cache, never another test's."""
    if "pytester" in request.fixturenames or "tmp_path" in request.fixturenames:
        monkeypatch.setenv("NPUPERF_CACHE_DIR", str(request.getfixturevalue("tmp_path_factory")
                                                     .mktemp("npuperf_cache")))


@pytest.fixture(autouse=True)
def _hypothesis_start_up_count_kept(request):
    """An in-process pytester run that stops before its session starts (a usage error) leaves
    hypothesis's plugin counting its own start-up, and every strategy built later in this
    process warns as a side effect of that start-up: the count is put back after the test."""
    if "pytester" not in request.fixturenames:
        yield
        return
    import _hypothesis_globals

    before = _hypothesis_globals.in_initialization
    yield
    _hypothesis_globals.in_initialization = before
