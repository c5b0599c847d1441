"""The run on one page: SVG figures (GEMM latency, roofline, gaps, regressions,
collective bandwidth) inline in report_<stamp>.html, checked in a real headless browser when
one is installed; and `npuperf merge` of several hosts' databases."""

from __future__ import annotations

import re
import shutil
import struct
import subprocess
import zlib
from pathlib import Path

import pytest

from pytest_npuperf.db.combine import combine_databases
from pytest_npuperf.db.table import read_table
from pytest_npuperf.report.figures import draw_figures
from pytest_npuperf.report.writer import write_reports
from tests.replay_project import MATMUL_ROWS, cells, write_db
from tests.report_data import HCOM, gemm_results, outcome, session, session_results


def test_every_figure_is_drawn_from_the_run(tmp_path):
    hccl = tmp_path / "hccl" / "v8.5"
    hccl.mkdir(parents=True)
    (hccl / "hcom_allReduce_.csv").write_text(HCOM)
    (hccl / "hcom_allGather_.csv").write_text(HCOM.replace("30.58", "20.1"))
    figures = draw_figures(gemm_results(), outcome(tmp_path), tmp_path / "hccl")
    assert list(figures) == ["GEMM latency vs M", "Roofline", "Duration gap",
                             "Replay vs in-model", "Regressions vs baseline",
                             "Collective bandwidth"]
    for title, svg in figures.items():
        assert svg.startswith("<svg") and svg.rstrip().endswith("</svg>"), title
    assert "N=7168 K=1536 BF16" in figures["GEMM latency vs M"]
    assert "allReduce" in figures["Collective bandwidth"]
    assert "SLOWER (2)" in figures["Regressions vs baseline"]
    # Nothing measured that a figure could show: no figure, not an empty one.
    assert draw_figures(session_results()[5:], None, None) == {}


@pytest.fixture(scope="module")
def page_file(tmp_path_factory) -> Path:
    return write_page(tmp_path_factory.mktemp("page"))


def write_page(tmp_path) -> Path:
    results = session_results() + gemm_results()
    results[5].error = '<script>alert("x")</script> from a cell'
    figures = draw_figures(results, outcome(tmp_path), None)
    paths = write_reports(outcome(tmp_path), results, session(), tmp_path / "reports",
                          figures=figures, baseline="last: r0", history="run r1 recorded")
    return paths.html


def test_the_page_is_self_contained_and_escaped(page_file):
    page = page_file.read_text()
    assert page.startswith("<!DOCTYPE html>") and page.count("<svg") >= 4
    assert not re.search(r"<(script|link|img)\b", page)  # nothing to fetch, nothing to run
    assert "&lt;script&gt;" in page
    for heading in ("Summary", "Figures", "Against the baseline", "Regressions (SLOWER): 2",
                    "Cases (18)"):
        assert heading in page, heading


BROWSERS = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")


def test_the_page_renders_in_a_headless_browser(page_file, tmp_path):
    browser = next((shutil.which(b) for b in BROWSERS if shutil.which(b)), None)
    if browser is None:
        pytest.skip("no headless browser installed (chromium or google-chrome)")
    page = page_file
    shot = tmp_path / "page.png"
    done = subprocess.run(
        [browser, "--headless=new", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
         "--window-size=1280,3000", f"--screenshot={shot}", "--enable-logging=stderr", "--v=0",
         f"--user-data-dir={tmp_path / 'profile'}", page.as_uri()],
        capture_output=True, text=True, timeout=120)
    console = [line for line in done.stderr.splitlines() if "CONSOLE" in line
               or "Uncaught" in line or "Failed to load resource" in line]
    assert done.returncode == 0, done.stderr[-2000:]
    assert console == []
    width, height, pixels, packed = png_size(shot)
    assert height >= 1000 and width == 1280
    # Text and plots, not a blank page: a blank one packs about 1000:1.
    assert packed * 200 > pixels


def png_size(path: Path) -> tuple[int, int, int, int]:
    """Width, height, raw pixel bytes and deflated image bytes of a PNG file."""
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    chunks, at = {}, 8
    while at < len(data):
        length, kind = struct.unpack(">I4s", data[at:at + 8])
        chunks.setdefault(kind, []).append(data[at + 8:at + 8 + length])
        at += length + 12
    width, height, depth, color = struct.unpack(">IIBB", chunks[b"IHDR"][0][:10])
    channels = {0: 1, 2: 3, 4: 2, 6: 4}.get(color, 1)
    packed = b"".join(chunks[b"IDAT"])
    assert len(zlib.decompress(packed)) == height * (1 + width * channels * depth // 8)
    return width, height, width * height * channels * depth // 8, len(packed)


def test_merge_takes_the_newest_measurement_of_every_row(tmp_path):
    def db(name, rows):
        return write_db(tmp_path / name, {"MatMulV2": rows},
                        extra_columns=("MicroBench Timestamp", "MicroBench Run Id"))

    measured = [dict(MATMUL_ROWS[0]), dict(MATMUL_ROWS[1])]
    target = db("target", [dict(r) for r in measured])
    old = dict(measured[0], **{"Average Duration(us)": "9.0", "MicroBench Timestamp":
                               "2026-01-01T00:00:00", "MicroBench Run Id": "old"})
    new = dict(measured[0], **{"Average Duration(us)": "7.0", "MicroBench Timestamp":
                               "2026-01-02T00:00:00", "MicroBench Run Id": "new"})
    extra = cells("4,32;8,32", "DT_BF16;DT_BF16", "ND;ND", "4,8", "DT_BF16",
                  **{"Average Duration(us)": "3.0", "MicroBench Timestamp": "2026-01-02T00:00:00"})
    shard1 = db("shard1", [old, measured[1]])
    shard2 = db("shard2", [new, measured[1], extra])
    summary = combine_databases(target, [shard1, shard2])
    table = read_table(target / "MatMulV2.csv")
    assert list(table["Average Duration(us)"]) == ["7.0", "12.5", "3.0"]
    assert table["MicroBench Run Id"][0] == "new"
    assert table["Profiling Average Duration(us)"][0] == "0.001"  # not a replay column: kept
    assert summary.updated["MatMulV2.csv"] == 1 and summary.added["MatMulV2.csv"] == 1
    again = combine_databases(target, [shard1, shard2])  # nothing newer any more
    assert not again.updated and "unchanged" in again.render()
