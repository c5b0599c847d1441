"""Reading the run history as a performance engineer does: `npuperf runs` with filters,
`npuperf history` with readable numbers, the trend page, the history found from another
directory the way pytest finds its rootdir, and run ids suggested when one is mistyped."""

from __future__ import annotations

import datetime as _dt
import re
from html.parser import HTMLParser
from pathlib import Path

import pytest

from pytest_npuperf.cli import main
from pytest_npuperf.history.records import KIND_KERNEL, CaseRecord, RunRecord
from pytest_npuperf.history.store import HistoryStore
from pytest_npuperf.history.views import parse_when
from pytest_npuperf.history.where import find_history
from pytest_npuperf.measure.units import fmt_duration
from tests.test_charts import line, parse

GEMM = "MatMulV2-16x64x32-BF16-aaaaaaaa"
NORM = "RmsNorm-128x7168-BF16-bbbbbbbb"
NIGHT = _dt.datetime(2026, 11, 20, 2, 0)


def _case(key: str, value: float, *, status: str = "ok", verdict: str = "", ratio=None):
    return CaseRecord(kind=KIND_KERNEL, key=key, kernel=key.split("-")[0], signature=key[-8:],
                      status=status, method="events", value_us=value, median_us=value,
                      min_us=value * 0.97, samples_count=40, verdict=verdict, ratio=ratio,
                      baseline_run="n2" if verdict else "")


def _run(run_id: str, night: int, *, commit: str, device: str = "CPU_TEST",
         passed: bool = True, torch: str = "2.13.0+cpu") -> RunRecord:
    when = NIGHT + _dt.timedelta(days=night)
    return RunRecord(run_id=run_id, started=when.timestamp(),
                     started_iso=when.isoformat(timespec="seconds"), device=device,
                     stack={"torch": torch, "threads": 2}, git_commit=commit,
                     git_dirty=night == 3, passed=passed, exit_status=0 if passed else 1)


@pytest.fixture
def history(tmp_path) -> Path:
    """Four nights on a CPU: the GEMM noisy on night 2, SLOWER on night 4 (commit
    dddd...); the norm suspect once; a GPU run beside them."""
    path = tmp_path / "npuperf-out" / "history.sqlite"
    with HistoryStore(path) as store:
        store.record(_run("n1", 0, commit="aaaa1111"), [_case(GEMM, 26210.4), _case(NORM, 3.1)])
        store.record(_run("n2", 1, commit="bbbb2222"),
                     [_case(GEMM, 8000.0 * 26, status="noisy"), _case(NORM, 3.0)])
        store.record(_run("n3", 2, commit="cccc3333"),
                     [_case(GEMM, 26100.0), _case(NORM, 0.4, status="suspect")])
        store.record(_run("n4", 3, commit="dddd4444", passed=False),
                     [_case(GEMM, 31900.0, verdict="SLOWER", ratio=1.222), _case(NORM, 3.05)])
        store.record(_run("g1", 3, commit="dddd4444", device="CUDA_H100", torch="2.9.0"),
                     [_case(GEMM, 12.5)])
    return path


def test_durations_read_in_their_own_unit_without_exponents():
    assert [fmt_duration(v) for v in (26210.4, 312.46, 0.85, 1.5e6, 1000.0, None)] == \
        ["26.21 ms", "312.5 us", "850.0 ns", "1.500 s", "1.000 ms", "-"]


def test_runs_lists_every_run_and_filters_by_device_kernel_and_date(history, capsys):
    assert main(["runs", "--history", str(history)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split()[:3] == ["run", "id", "started"]
    assert [line.split()[0] for line in lines[1:-1]] == ["n1", "n2", "n3", "n4", "g1"]
    n4 = next(line for line in lines if line.startswith("n4"))
    assert "dddd4444+dirty" in n4 and "failed" in n4 and "torch 2.13.0+cpu" in n4
    assert lines[-1] == "5 run(s)"
    assert main(["runs", "--history", str(history), "--device", "CUDA_H100"]) == 0
    assert [line.split()[0] for line in capsys.readouterr().out.splitlines()[1:-1]] == ["g1"]
    assert main(["runs", "--history", str(history), "--kernel", "RmsNorm"]) == 0
    assert [line.split()[0] for line in capsys.readouterr().out.splitlines()[1:-1]] == \
        ["n1", "n2", "n3", "n4"]
    assert main(["runs", "--history", str(history), "--since", "2026-11-21T12:00",
                 "--until", "2026-11-23"]) == 0
    assert [line.split()[0] for line in capsys.readouterr().out.splitlines()[1:-1]] == ["n3"]
    assert main(["runs", "--history", str(history), "--kernel", "Nope"]) == 1
    assert "no run matches" in capsys.readouterr().err
    assert main(["runs", "--history", str(history), "--since", "yesterday"]) == 2
    assert "neither a date" in capsys.readouterr().err


def test_ages_count_back_from_now():
    now = NIGHT.timestamp()
    assert parse_when("7d", now=now) == now - 7 * 86400
    assert parse_when("12h", now=now) == now - 12 * 3600


def test_history_without_a_filter_is_one_readable_line_per_case(history, capsys):
    assert main(["history", "--history", str(history), "--device", "CPU_TEST"]) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    gemm = next(line for line in lines if line.startswith(GEMM))
    # newest 31.90 ms, +22.2 % from the last trusted value (26.10 ms), best and worst
    assert re.search(r"31\.90 ms\s+\+22\.2%\s+26\.10 ms\s+208\.0 ms\s+4\s+ok / SLOWER 1\.222x",
                     gemm), gemm
    assert not re.search(r"\de[+-]\d", out)  # no 2.621e+04
    assert "2 case(s) over 4 run(s)" in out
    assert main(["history", "--history", str(history), "--kernel", "MatMulV2", "--device",
                 "CPU_TEST"]) == 0
    per_run = capsys.readouterr().out.splitlines()
    assert len(per_run) == 2 + 4 and "26.21 ms" in per_run[2] and "noisy" in per_run[3]
    assert main(["history", "--history", str(history), "--since", "2026-11-22"]) == 0
    out = capsys.readouterr().out
    assert "over 3 run(s)" in out  # n3, n4 and g1
    # a case measured on two devices is two lines, never one series of mixed values
    gpu = next(line for line in out.splitlines() if line.startswith(f"{GEMM} on CUDA_H100"))
    assert "12.50 us" in gpu and " 1  " in gpu


def test_the_history_is_found_from_another_directory_as_pytest_finds_its_rootdir(
        history, tmp_path, monkeypatch, capsys):
    root = history.parent.parent
    (root / "pyproject.toml").write_text("[tool.pytest.ini_options]\naddopts = \"-q\"\n")
    deep = root / "bench" / "sub"
    deep.mkdir(parents=True)
    monkeypatch.chdir(deep)
    assert find_history().path == history
    assert main(["runs"]) == 0
    assert "5 run(s)" in capsys.readouterr().out
    # npuperf_out in the configuration moves it, as it moves the session's
    (root / "pyproject.toml").write_text("[tool.pytest.ini_options]\nnpuperf_out = \"out\"\n")
    assert find_history().path == root / "out" / "history.sqlite"
    assert main(["history"]) == 2
    err = capsys.readouterr().err
    assert "no run history at" in err and "npuperf_out in" in err and err.count("\n") == 1
    # A pyproject.toml without pytest's section is not the rootdir; an ini file above is.
    (root / "pyproject.toml").write_text("[project]\nname = \"x\"\n")
    (root / "pytest.ini").write_text("[pytest]\nnpuperf_history = hist/h.sqlite\n")
    assert find_history().path == root / "hist" / "h.sqlite"


def test_a_mistyped_run_id_gets_the_ids_it_may_mean(history, capsys):
    assert main(["compare", "nonexist", "last", "--history", str(history)]) == 2
    err = capsys.readouterr().err
    assert "no run 'nonexist'" in err and "newest: g1, n4, n3" in err
    assert "npuperf runs lists them" in err and err.count("\n") == 1
    assert main(["compare", "n5", "last", "--history", str(history)]) == 2
    assert "did you mean: n4, n3, n2" in capsys.readouterr().err  # the closest, newest first


class _Points(HTMLParser):
    """The hover texts of a page's points, per chart, and its text."""

    def __init__(self) -> None:
        super().__init__()
        self.titles: list[str] = []
        self.charts = 0
        self.text: list[str] = []
        self._in_title = False
        self._point = 0  # inside a point's element (a <use> or <path> with a hover text)

    def handle_starttag(self, tag, attrs):
        if tag == "svg":
            self.charts += 1
        self._point += tag in ("use", "path")
        self._in_title = tag == "title" and self._point > 0

    def handle_startendtag(self, tag, attrs):
        self.handle_starttag(tag, attrs)
        self._point -= tag in ("use", "path")

    def handle_endtag(self, tag):
        self._point -= tag in ("use", "path")
        self._in_title = False

    def handle_data(self, data):
        if self._in_title:
            self.titles.append(data)
        self.text.append(data)


def test_the_trend_page_shows_every_run_with_commit_stack_and_marks(history, tmp_path, capsys):
    out = tmp_path / "public" / "site" / "trend.html"
    assert main(["trend", "--history", str(history), "--device", "CPU_TEST", "--out",
                 str(out)]) == 0
    assert f"trend page written: {out} (2 case(s) over 4 run(s))" in capsys.readouterr().out
    page = out.read_text()
    assert page.startswith("<!DOCTYPE html>") and not re.search(r"<(script|link|img)\b", page)
    parsed = _Points()
    parsed.feed(page)
    assert parsed.charts == 2
    text = " ".join(parsed.text)
    assert 'MatMulV2: 1 case(s), <span class="v-SLOWER">1 SLOWER</span>' in page
    assert "Regressions in the newest runs" in text
    # every measurement a point, its hover naming the run, commit and stack
    gemm = [t for t in parsed.titles if "run n" in t and ("26.21 ms" in t or "31.90 ms" in t
                                                          or "208.0 ms" in t or "26.10 ms" in t)]
    assert len(gemm) >= 4
    slower = next(t for t in parsed.titles if "31.90 ms" in t and "SLOWER" in t)
    assert "commit dddd4444+dirty" in slower and "torch 2.13.0+cpu" in slower
    assert "vs baseline: SLOWER 1.222x (baseline run n2)" in slower
    # noisy and suspect apart from the line, in the legend, and the line skips them
    assert "noisy (off the line) (1)" in text and "suspect (off the line) (1)" in text
    assert "SLOWER than its baseline (1)" in text
    first_chart = page[page.index("<svg"):page.index("</svg>") + 6]
    assert len(line(parse(first_chart), "trusted")) == 3  # n1, n3, n4: the noisy night is off
    # the line
    assert 'class="figure regressed"' in page


def test_the_trend_page_goes_beside_the_history_by_default(history, capsys):
    assert main(["trend", "--history", str(history), "--kernel", "RmsNorm"]) == 0
    assert (history.parent / "trend.html").is_file()
    capsys.readouterr()
