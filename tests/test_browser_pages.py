"""The html a performance engineer opens, checked in a real headless browser (Chromium or
Chrome; skipped where none is installed): the trend page and a pytest-html report render
without a console error, are not blank, and show, after the browser ran pytest-html's script,
whole status texts and readable sample charts (axes, median line)."""

from __future__ import annotations

import html
import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest

# In-process pytester runs drop the modules first imported inside them, and torch cannot be
# imported twice into one process: imported here, before the run that replays a case.
import torch  # noqa: F401

from pytest_npuperf.cli import main
from tests.replay_project import BENCH, FAST, MATMUL_ROWS, write_db
from tests.test_history_views import history  # noqa: F401 (a fixture)
from tests.test_report_page import BROWSERS, png_size


@pytest.fixture(scope="module")
def browser() -> str:
    found = next((shutil.which(b) for b in BROWSERS if shutil.which(b)), None)
    if found is None:
        pytest.skip("no headless browser installed (chromium or google-chrome)")
    return found


def _run(browser: str, page: str, tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    done = subprocess.run(
        [browser, "--headless=new", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
         "--enable-logging=stderr", "--v=0", f"--user-data-dir={tmp_path / 'profile'}",
         *args, page], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    console = [line for line in done.stderr.splitlines() if "CONSOLE" in line
               or "Uncaught" in line or "Failed to load resource" in line]
    assert console == []
    return done


def screenshot(browser: str, page: str, tmp_path: Path, size: str = "1280,2000") -> Path:
    shot = tmp_path / "page.png"
    _run(browser, page, tmp_path, f"--window-size={size}", f"--screenshot={shot}")
    width, height, pixels, packed = png_size(shot)
    assert (width, height) == tuple(int(v) for v in size.split(","))
    assert packed * 200 > pixels  # text and charts, not a blank page (about 1000:1)
    return shot


def dom(browser: str, page: str, tmp_path: Path) -> str:
    """The page as the browser holds it once loaded (scripts run)."""
    return _run(browser, page, tmp_path, "--dump-dom", "--virtual-time-budget=5000").stdout


def test_the_trend_page_renders_with_its_charts_and_hover_texts(browser, history, tmp_path,  # noqa: F811
                                                                capsys):
    page = tmp_path / "trend.html"
    assert main(["trend", "--history", str(history), "--out", str(page)]) == 0
    capsys.readouterr()
    screenshot(browser, page.as_uri(), tmp_path)
    loaded = dom(browser, page.as_uri(), tmp_path)
    assert loaded.count("<svg") == 3  # two cases on the CPU, the GEMM on the GPU apart
    assert "commit dddd4444+dirty" in html.unescape(loaded)


def test_a_pytest_html_report_shows_whole_statuses_and_sample_charts(browser, pytester,
                                                                     tmp_path):
    pytester.makepyfile(**{"bench/test_kernels": BENCH})
    db = write_db(pytester.path / "db", {"MatMulV2": MATMUL_ROWS})
    report = pytester.path / "report.html"
    result = pytester.runpytest("bench", "--npuperf-db", str(db), "--npuperf-out",
                                str(pytester.path / "out"), *FAST, f"--html={report}",
                                "--self-contained-html")
    result.assert_outcomes(passed=2)
    screenshot(browser, report.as_uri() + "?collapsed=", tmp_path, "1400,2400")
    # What the browser drew from pytest-html's data (the data itself is escaped in the page)
    loaded = dom(browser, report.as_uri() + "?collapsed=", tmp_path)
    statuses = re.findall(r'<td class="col-npuperf_status">([^<]*)</td>', loaded)
    assert len(statuses) == 2
    # each case's chart: axes labelled, the median a dashed line named in its legend
    assert loaded.count(">samples, fastest to slowest</text>") == 2
    median_lines = r'<path d="M[\d.]+ [\d.]+H[\d.]+" stroke="#d1242f" [^>]*stroke-dasharray="5,3"'
    assert len(re.findall(median_lines, loaded)) == 2  # across each plot (not the legend's)
    # whole status texts: each as the run JSON has it, nothing cut
    cases = json.loads(next((pytester.path / "out" / "reports").glob("run_*.json"))
                       .read_text())["cases"]
    assert sorted(html.unescape(s) for s in statuses) == sorted(_status_text(c) for c in cases)


def _status_text(case: dict) -> str:
    text = f"{case['status']}: {case['error']}" if case.get("error") else case["status"]
    remarks = [case[k] for k in ("fallback", "note") if case.get(k)]
    return " ".join((text + (f" ({'; '.join(remarks)})" if remarks else "")).split())
