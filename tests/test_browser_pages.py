"""The html a performance engineer opens, checked in a real headless browser (Chromium or
Chrome; skipped where none is installed): the trend page and a pytest-html report render
without a console error, are not blank, and show, after the browser ran pytest-html's script,
whole status texts and readable sample charts (axes, median line). And the figures' defects
once seen in Chromium, measured where the browser laid the page out: the GEMM legend over
its data, repeated date labels on the trend page, an empty chart for a case with no value,
unpadded summary tables, the minimum-effect band at a widened threshold with a 1.05x SLOWER
point inside it, noisy cases drawn in a verdict's green."""

from __future__ import annotations

import datetime as _dt
import html
import json
import math
import re
import shutil
import subprocess
from itertools import pairwise
from pathlib import Path

import pytest

# In-process pytester runs drop the modules first imported inside them, and torch cannot be
# imported twice into one process: imported here, before the run that replays a case.
import torch  # noqa: F401

from pytest_npuperf.cli import main
from pytest_npuperf.history.records import RunRecord
from pytest_npuperf.history.store import HistoryStore
from pytest_npuperf.report.figures import regression_ratios
from pytest_npuperf.report.html import html_summary
from tests.replay_project import BENCH, FAST, MATMUL_ROWS, write_db
from tests.report_data import gemm_results, outcome, session, session_results
from tests.test_figures import _compared
from tests.test_history_views import GEMM, NORM, _case, history  # noqa: F401 (a fixture)
from tests.test_report_page import BROWSERS, png_size, write_page


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


def measured(browser: str, page: Path, tmp_path: Path, script: str):
    """What `script` (a function body returning JSON-able data) finds in `page` once the
    browser laid it out: run in a copy of the page, read back from the DOM it leaves."""
    probe = tmp_path / f"probe-{page.name}"
    text = page.read_text()
    code = (f"<script>(function(){{const found=(function(){{{script}}})();"
            "const out=document.createElement('pre');out.id='npuperf-probe';"
            "out.textContent=JSON.stringify(found);document.body.appendChild(out);})()</script>")
    at = text.rfind("</body>")
    probe.write_text(text[:at] + code + text[at:] if at >= 0 else text + code)
    loaded = dom(browser, probe.as_uri(), tmp_path)
    found = re.search(r'<pre id="npuperf-probe">(.*?)</pre>', loaded, re.S)
    assert found, loaded[-2000:]
    return json.loads(html.unescape(found[1]))


# Boxes as the browser drew them, and whether two meet.
BOXES = """
const box = e => { const r = e.getBoundingClientRect(); return [r.left, r.top, r.right, r.bottom]; };
const meet = (a, b) => a[0] < b[2] && b[0] < a[2] && a[1] < b[3] && b[1] < a[3];
const marks = svg => [...svg.querySelectorAll('g[id^="series-"] path, g[id^="series-"] use,'
    + 'g[id^="hover-"] use, g[id^="hover-"] > path, g[id^="hover-"] g > path,'
    + 'g[id^="PathCollection_"] use')].filter(e => !e.closest('g[id^="legend_"]'));
"""


def test_the_gemm_legend_covers_none_of_its_data(browser, tmp_path):
    page = write_page(tmp_path)
    found = measured(browser, page, tmp_path, BOXES + """
        const svg = document.querySelector('div[aria-label="GEMM latency vs M"] svg');
        const legend = box(svg.querySelector('g[id^="legend_"]'));
        const drawn = marks(svg).map(box);
        return {marks: drawn.length, covered: drawn.filter(m => meet(m, legend)).length};""")
    assert found["marks"] >= 8 and found["covered"] == 0


def _trend_history(path: Path) -> Path:
    """Two runs a minute apart at 06:54 (their labels were both "11-28 06:54"), one a week
    before; a case that never got a value (it failed every run)."""
    def run(run_id: str, when: str) -> RunRecord:
        started = _dt.datetime.fromisoformat(when)
        return RunRecord(run_id=run_id, started=started.timestamp(), started_iso=when,
                         device="CPU_TEST", stack={"torch": "2.13.0+cpu"}, git_commit="abc")

    never = "SoftmaxV2-8x8-BF16-cccccccc"
    with HistoryStore(path) as store:
        for run_id, when, value in (("w1", "2026-11-21T06:54:05", 26.0),
                                    ("m1", "2026-11-28T06:54:10", 26.5),
                                    ("m2", "2026-11-28T06:54:50", 27.0)):
            failed = _case(never, 1.0, status="failed")
            failed.value_us = failed.median_us = None
            store.record(run(run_id, when), [_case(GEMM, value), _case(NORM, value / 9),
                                             failed])
    return path


def test_trend_dates_never_repeat_and_a_case_without_a_value_says_why(browser, tmp_path,
                                                                     capsys):
    history_file = _trend_history(tmp_path / "history.sqlite")
    page = tmp_path / "trend.html"
    assert main(["trend", "--history", str(history_file), "--out", str(page)]) == 0
    capsys.readouterr()
    found = measured(browser, page, tmp_path, BOXES + """
        const charts = [...document.querySelectorAll('.figure svg')].map(svg => {
            const labels = [...svg.querySelectorAll('g[id^="xtick_"] text')]
                .filter(t => t.textContent.trim());
            return {labels: labels.map(t => t.textContent),
                    boxes: labels.map(box)}; });
        const empty = [...document.querySelectorAll('.figure')].filter(
            f => f.querySelector('.no-value'));
        return {charts, sentences: empty.map(f => f.textContent),
                svgs_beside: empty.filter(f => f.querySelector('svg')).length};""")
    assert len(found["charts"]) == 2
    for chart in found["charts"]:
        assert len(chart["labels"]) >= 2
        assert len(set(chart["labels"])) == len(chart["labels"]), chart["labels"]
        boxes = sorted(chart["boxes"])
        assert all(a[2] <= b[0] for a, b in pairwise(boxes))  # side by side, apart
    (sentence,) = found["sentences"]
    assert "no value to draw" in sentence and "failed 3x" in sentence
    assert found["svgs_beside"] == 0  # no empty 0-1 chart


def test_the_volcano_band_is_the_minimum_effect_and_noisy_cases_are_not_green(browser,
                                                                            tmp_path):
    wide = _compared(1.0, 0, threshold=0.09)  # its baseline's spread widened its threshold
    slower = _compared(1.06, 1)
    faster = _compared(0.7, 2)
    noisy = _compared(0.7, 3, status="noisy")
    page = tmp_path / "volcano.html"
    page.write_text("<!DOCTYPE html><html><body>"
                    + regression_ratios([wide, slower, faster, noisy]) + "</body></html>")
    found = measured(browser, page, tmp_path, BOXES + """
        const svg = document.querySelector('svg');
        const band = box(svg.querySelector('g#min-effect path'));
        const points = {};
        for (const m of marks(svg)) {
            const title = m.querySelector('title');
            if (title) points[title.textContent.split(':')[0]] = {
                box: box(m), fill: getComputedStyle(m).fill}; }
        const legend = [...svg.querySelectorAll('g[id^="legend_"] text')]
            .map(t => t.textContent);
        return {band, points, legend};""")
    band, points = found["band"], found["points"]
    centre = lambda key: (points[key]["box"][0] + points[key]["box"][2]) / 2  # noqa: E731
    one = centre(wide.case_id)
    # the band spans 1/1.05 .. 1.05 (log axis: as far from 1 each way), not the widened 9 %
    assert (band[2] - one) / (centre(slower.case_id) - one) == \
        pytest.approx(math.log(1.05) / math.log(1.06), rel=0.03)
    assert centre(slower.case_id) > band[2]  # the 1.06x SLOWER point lies outside it
    assert f"1: {slower.case_id} (1.060x)" in found["legend"]  # and is named
    assert "minimum effect ±5 %" in found["legend"]
    green = "rgb(26, 127, 55)"
    assert points[faster.case_id]["fill"] == green
    assert points[noisy.case_id]["fill"] != green  # a ring of the noisy colour
    assert "noisy or suspect: no stored value (1)" in found["legend"]


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
    median_lines = r'<g id="median">\s*<path [^>]*stroke-dasharray: [\d.]+,[\d.]+;[^>]*stroke: #d1242f'
    assert len(re.findall(median_lines, loaded)) == 2  # across each plot (not the legend's)
    # whole status texts: each as the run JSON has it, nothing cut
    cases = json.loads(next((pytester.path / "out" / "reports").glob("run_*.json"))
                       .read_text())["cases"]
    assert sorted(html.unescape(s) for s in statuses) == sorted(_status_text(c) for c in cases)


def test_the_summary_tables_are_padded(browser, tmp_path):
    """The summary pytest-html shows above its results, in a page with no style of ours (as
    pytest-html's, which styles its own table only): its numbers ran into each other
    ("1.335x7.3e-30")."""
    results = session_results() + gemm_results()
    page = tmp_path / "summary.html"
    page.write_text("<!DOCTYPE html><html><body>" + html_summary(
        outcome(tmp_path), results, session(), baseline="last: r0") + "</body></html>")
    padding = measured(browser, page, tmp_path, """
        return [...document.querySelectorAll('.npuperf-summary td')].map(
            td => parseFloat(getComputedStyle(td).paddingLeft)
                  + parseFloat(getComputedStyle(td).paddingRight));""")
    assert len(padding) > 10 and min(padding) >= 8


def _status_text(case: dict) -> str:
    text = f"{case['status']}: {case['error']}" if case.get("error") else case["status"]
    remarks = [case[k] for k in ("fallback", "note") if case.get(k)]
    return " ".join((text + (f" ({'; '.join(remarks)})" if remarks else "")).split())
