"""benchmarks/gpu_acceptance.py: the one prepared run a lent GPU gets (issue 31).

Its --smoke mode runs every stage on this CPU, so the script cannot rot between GPU sessions:
the run JSON must hold every stage, each figure with its goal and a verdict (or the reason it
has none), and a stage that fails or runs out of time must be reported while the next runs.
"""

from __future__ import annotations

import functools
import importlib.util
import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "benchmarks" / "gpu_acceptance.py"
FIGURE_KEYS = {"figure", "value", "unit", "goal", "verdict", "reason"}
STAGE_KEYS = {"status", "wall_s", "cpu_s", "limit_s", "figures"}
TOP_KEYS = {"schema", "smoke", "started", "device_name", "wall_s", "total_limit_s", "cpu_s",
            "load", "python", "environment", "stages"}


@functools.cache
def _module():
    """The script as a module, without leaving its folders on sys.path for other tests."""
    saved = list(sys.path)
    try:
        spec = importlib.util.spec_from_file_location("gpu_acceptance_under_test", SCRIPT)
        module = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = module  # its dataclasses look their module up there
        spec.loader.exec_module(module)
    finally:
        sys.path[:] = saved
    return module


def _run(out: Path, *args: str, timeout: float) -> dict:
    done = subprocess.run([sys.executable, str(SCRIPT), "--smoke", "--out", str(out), *args],
                          cwd=ROOT, capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert (out / "gpu_acceptance.md").is_file()
    return json.loads((out / "gpu_acceptance.json").read_text())


def _check_shape(result: dict, stages: tuple[str, ...]) -> None:
    assert result.keys() >= TOP_KEYS
    assert result["schema"] == "npuperf-gpu-acceptance/1" and result["smoke"] is True
    assert tuple(result["stages"]) == stages
    for name, stage in result["stages"].items():
        assert STAGE_KEYS - {"cpu_s"} <= stage.keys(), name
        if stage["status"] != "done":
            assert stage.get("reason"), f"{name} {stage['status']} without a reason"
        for figure in stage["figures"]:
            assert figure.keys() >= FIGURE_KEYS, figure
            assert figure["goal"], figure
            if figure["verdict"] in ("pass", "fail"):
                assert math.isfinite(figure["value"])
            else:
                assert figure["verdict"] in ("n/a", "reported") and figure["reason"], figure


@pytest.mark.slow
def test_smoke_runs_every_stage_and_each_figure_has_a_verdict_or_a_reason(tmp_path):
    # Limits far above the smoke's own (under a minute on 2 quiet cores): a busy shared
    # host must not turn a working stage into a timed-out one here.
    result = _run(tmp_path, "--total", "1200", "--limits",
                  "reference=300,session=300,impls=300,fidelity=300", timeout=1300)
    stages = _module().STAGES
    _check_shape(result, stages)
    found = result["stages"]
    has_transformers = importlib.util.find_spec("transformers") is not None
    for name in ("reference", "session", "impls") + (("fidelity",) if has_transformers else ()):
        assert found[name]["status"] == "done", (name, found[name].get("reason"))
        assert found[name]["figures"], name
    assert found["tests"]["status"] == "skipped" and "smoke" in found["tests"]["reason"]
    names = {s: " / ".join(f["figure"] for f in found[s]["figures"]) for s in found}
    assert " / reference, median" in names["reference"] and "unseen grid rows" in names["reference"]
    for wanted in ("duty cycle", "overhead per case", "wall vs a plain loop"):
        assert wanted in names["session"]
    assert "share of the HBM bound" in names["impls"] and "suspect" in names["impls"]
    assert "FusedInferAttentionScore prefill" in names["impls"]
    if has_transformers:
        assert "predicted / measured" in names["fidelity"] and "GEMM" in names["fidelity"]
    table = (tmp_path / "gpu_acceptance.md").read_text()
    assert table.startswith("# GPU acceptance: SMOKE")
    for name in stages:
        assert f"| {name} (" in table
    # Every row has the table's five cells: a | inside a figure's name is escaped.
    rows = [line for line in table.splitlines() if line.startswith("| ")]
    assert all(line.replace("\\|", "").count("|") == 6 for line in rows)


def test_a_stage_out_of_time_is_reported_and_the_next_one_runs(tmp_path):
    result = _run(tmp_path, "--stages", "reference,tests", "--limits", "reference=1",
                  timeout=60)
    _check_shape(result, _module().STAGES)
    reference = result["stages"]["reference"]
    assert reference["status"] == "timed out" and "ran out of its 1 s" in reference["reason"]
    assert result["stages"]["tests"]["status"] == "skipped"
    assert "not asked for" in result["stages"]["session"]["reason"]


def test_figures_get_a_verdict_or_a_reason(tmp_path):
    acceptance = _module()
    rec = acceptance.Recorder(tmp_path / "stage.json", "reference")
    rec.figure("met", 1.0, "x", "in [0.99, 1.01]", True)
    rec.figure("missed", 1.2, "x", "in [0.99, 1.01]", False)
    rec.figure("unmeasured", math.nan, "%", ">= 60 %", None, "no row of this size")
    rec.figure("no goal", 0.9, "%", "as measured", None)
    saved = json.loads((tmp_path / "stage.json").read_text())
    assert [(f["verdict"], f["reason"]) for f in saved["figures"]] == [
        ("pass", None), ("fail", None), ("n/a", "no row of this size"),
        ("reported", "no goal")]
    assert saved["figures"][2]["value"] is None


def test_junit_failures_are_listed(tmp_path):
    report = tmp_path / "junit.xml"
    report.write_text(
        '<testsuites><testsuite name="pytest">'
        '<testcase classname="tests.test_a" name="test_ok"/>'
        '<testcase classname="tests.test_a" name="test_bad"><failure message="x"/></testcase>'
        '<testcase classname="tests.test_b" name="test_err"><error message="y"/></testcase>'
        '<testcase classname="tests.test_b" name="test_skip"><skipped/></testcase>'
        "</testsuite></testsuites>")
    assert _module()._junit_failures(report) == (
        4, ["tests.test_a::test_bad", "tests.test_b::test_err"])


def test_fia_prefill_tokens_read_from_the_query():
    acceptance = _module()
    from pytest_npuperf.kernels.case import KernelCase, TensorSlot

    def case(query, layout):
        return KernelCase(acceptance.FIA, (TensorSlot(query, "DT_BF16", "ND"),), (),
                          {"input_layout": layout} if layout else {})

    assert acceptance._fia_tokens(case((8192, 64, 128), "TND")) == 8192
    assert acceptance._fia_tokens(case((2, 4096, 8192), "BSH")) == 8192
    assert acceptance._fia_tokens(case((8, 16, 1, 512), "BNSD_NBSD")) == 0
