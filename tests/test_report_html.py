"""pytest-html pieces: the sample SVG (well-formed, robust), table cells, detail, summary."""

from __future__ import annotations

import random
import re
import xml.etree.ElementTree as ET

import pytest

from pytest_npuperf.measure.result import STATUS_FAILED
from pytest_npuperf.report import (
    html_cells,
    html_extra,
    html_header_cells,
    html_row_cells,
    html_summary,
    samples_svg,
)
from pytest_npuperf.report.names import report_paths

from .report_data import STAMP, case, outcome, session, session_results
from .test_charts import group, line, points, style, texts

SVG = "{http://www.w3.org/2000/svg}"


def _svg(samples: list[float], **kw: int) -> ET.Element:
    root = ET.fromstring(samples_svg(samples, **kw))
    assert root.tag == f"{SVG}svg"
    return root


def _polyline_points(root: ET.Element) -> list[tuple[float, float]]:
    return line(root, "samples")


def _texts(root: ET.Element) -> list[str]:
    return texts(root)


def _median_y(root: ET.Element) -> float:
    (_, y), *_ = line(root, "median")
    assert style(group(root, "median").find(f"{SVG}path"), "stroke") == "#d1242f"
    return y


def test_sample_plot_has_axes_a_median_line_and_says_its_numbers() -> None:
    root = _svg([5.0, 1.0, 3.0, 2.0, 4.0])
    assert root.get("viewBox") == "0 0 400 170"  # readable, not a 150x30 line
    title = "5 samples: min 1, median 3, max 5 us"
    assert root.findtext(f"{SVG}title") == title and title in _texts(root)
    texts = _texts(root)
    assert "samples, fastest to slowest" in texts and "us" in texts  # axis labels
    assert {"1", "2", "3", "4", "5"} <= set(texts)  # tick labels on both axes
    assert "median 3 us" in texts  # the dashed line, named in the legend
    points = _polyline_points(root)
    assert len(points) == 5
    ys = [y for _, y in points]
    assert ys == sorted(ys, reverse=True)  # sorted samples: values rise, y falls
    assert _median_y(root) == pytest.approx(points[2][1], abs=0.1)  # at the middle sample


def test_svg_single_sample_and_identical_values() -> None:
    one = _svg([7.5])
    assert len(points(one)) == 1 and len(_polyline_points(one)) == 1  # a dot, not a line
    flat = _svg([3.0] * 50)
    assert len({y for _, y in _polyline_points(flat)}) == 1  # flat, no division by zero


def test_svg_downsamples_thousands_keeping_extremes() -> None:
    rng = random.Random(7)
    samples = [rng.lognormvariate(3, 0.3) for _ in range(20000)]
    root = _svg(samples)
    points = _polyline_points(root)
    assert len(points) <= 400
    assert points[0][0] < points[-1][0]
    assert root.findtext(f"{SVG}title").startswith("20000 samples: min ")
    assert f"{min(samples):.4g}" in root.findtext(f"{SVG}title")
    assert f"{max(samples):.4g}" in root.findtext(f"{SVG}title")


def test_svg_without_usable_samples() -> None:
    for samples in ([], [float("nan"), float("inf")]):
        assert ET.fromstring(samples_svg(samples)).text == "no samples"


def test_cells_for_a_measured_case() -> None:
    result = session_results()[0]
    cells = html_cells(result)
    assert cells == {"Median (us)": "41.000", "Mean (us)": "50.700", "Samples": "5",
                     "Statistic": "median", "Precision": "2.50 %",
                     "Stop reason": "precision reached", "Outliers": "1",
                     "Method": "profiler", "Status": "ok"}
    row = html_row_cells(result)
    assert row[0] == '<td class="col-npuperf_median">41.000</td>'
    assert row[-1] == '<td class="col-npuperf_status">ok</td>'
    headers = html_header_cells()
    assert len(headers) == len(row) == 9
    assert headers[0] == "<th>Median (us)</th>"
    # Sortable headers name the col- class of their cells (pytest-html sorts by it).
    for header, cell in zip(headers, row):
        if "sortable" in header:
            key = re.search(r'data-column-type="(\w+)"', header).group(1)
            assert cell.startswith(f'<td class="col-{key}">')
    assert sum("sortable" in h for h in headers) == 4  # Statistic, Stop reason, Method, Status


def test_cells_for_failed_case_and_non_case() -> None:
    failed = html_cells(session_results()[5])
    assert failed["Median (us)"] == "" and failed["Precision"] == ""
    # The status with its reason, on one line (the error had two).
    assert failed["Status"] == ("failed: RuntimeError: out of memory | tried to allocate "
                                "1.2 GiB second line")
    assert set(html_cells(None).values()) == {""}
    assert all(re.fullmatch(r'<td class="col-\w+"></td>', c) for c in html_row_cells(None))


def test_cells_escape_unexpected_text() -> None:
    result = session_results()[0]
    result.method = "<b>events</b>"
    assert html_cells(result)["Method"] == "&lt;b&gt;events&lt;/b&gt;"


def test_extra_escapes_user_text_and_embeds_plot() -> None:
    evil = case("MatMulV2", "1,2;3,2", STATUS_FAILED, error='<script>alert("x")</script> & co')
    evil.detail = 'Traceback (most recent call last):\n  File "<kernel>", line 1'
    fragment = html_extra(evil)
    ET.fromstring(fragment)
    assert '<pre class="npuperf-detail">Traceback (most recent call last):\n  File ' \
           '&quot;&lt;kernel&gt;&quot;, line 1</pre>' in fragment
    assert "<script>" not in fragment
    assert "&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt; &amp; co" in fragment
    assert "<svg" not in fragment  # no samples, no plot
    measured = html_extra(session_results()[0])
    ET.fromstring(measured)  # the whole block is well-formed markup
    assert "<svg" in measured and "<th>median (us)</th><td>41.000</td>" in measured
    assert "achieved TFLOP/s" in measured


def test_summary_section() -> None:
    paths = report_paths(__import__("pathlib").Path("/out/reports"), STAMP)
    fragment = html_summary(outcome(), session_results(), session(), paths)
    ET.fromstring(fragment)
    assert "10 cases: 4 ok, 1 failed, 1 error, 1 timeout, 2 skipped, 1 suspect" in fragment
    assert "Duty cycle 0.05: 1.86 s inside measured calls of 40.00 s wall time" in fragment
    assert "Duration gap hotspots: 4" in fragment
    assert fragment.index("<td>Add</td>") < fragment.index("<td>RmsNorm</td>")  # worst first
    assert "<td>3.00x</td>" in fragment
    assert f"/out/reports/run_{STAMP}.json" in fragment
    assert "The source database belongs to ATLAS_800_A3_752T_128G_DIE" in fragment


def test_summary_dry_run_without_hotspots() -> None:
    fragment = html_summary(outcome(native=True, dry_run=True, with_gaps=False), [], session())
    ET.fromstring(fragment)
    assert "Dry run: nothing written" in fragment
    assert "Duration gap hotspots: 0" in fragment and "<p>None</p>" in fragment
    assert "belongs to" not in fragment
