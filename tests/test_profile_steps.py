"""Profile the steps, not the script (issue 28, items 1 and 5): steps a script marks, a
callable, an unmarked script with its initialisation said; the profile command's traps
(python is the running interpreter, the result does not travel through the workload's
output, errors say `npuperf profile:`, parse without --db writes where the docs say)."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

import pytest

from pytest_npuperf.cli.profiles import _workload_command
from pytest_npuperf.db.errors import NpuperfError
from pytest_npuperf.harness.options import DEFAULT_DB
from pytest_npuperf.ingest.trace_rows import trace_rows
from pytest_npuperf.kernels.torch_ops import TorchOperators
from pytest_npuperf.profiling.workload import profile_script
from tests.trace_data import cpu_trace

MARKED = """
import sys
import torch
from pytest_npuperf.profiling import step

torch.manual_seed(0)
w = torch.nn.init.normal_(torch.empty(48, 64))   # model construction: not a step
x = torch.randn(8, 64)
for i in range(int(sys.argv[1])):
    with step():
        y = x @ w.t()
    torch.softmax(y, -1)                           # between steps: left out
"""

UNMARKED = """
import torch
w = torch.nn.init.normal_(torch.empty(256, 256))
x = torch.randn(8, 256)
x @ w.t()
"""


def _script(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "model.py"
    path.write_text(text)
    return path


def _names(trace: Path) -> set[str]:
    return {e["name"] for e in json.loads(trace.read_text())["traceEvents"]
            if e.get("cat") == "cpu_op"}


def test_marked_steps_are_traced_after_the_warm_up_and_nothing_else_counts(tmp_path):
    script = _script(tmp_path, MARKED)
    profiled = profile_script([str(script), "6"], tmp_path / "t.json", kind="cpu", warmup=2,
                              steps=3)
    assert (profiled.traced_steps, profiled.marked_steps) == (3, 6)
    assert "aten::normal_" not in _names(profiled.path)  # initialisation is not in the trace
    rows, summary = trace_rows(profiled.path, TorchOperators())
    assert summary.steps == 3 and summary.outside_steps_us > 0  # the softmax between steps
    assert list(rows["Type"]) == ["MatMulV2"] * 3 and "SoftmaxV2" not in set(rows["Type"])


def test_a_script_with_fewer_steps_than_the_warm_up_says_so(tmp_path):
    script = _script(tmp_path, MARKED)
    with pytest.raises(NpuperfError, match=r"marked 1 step\(s\), all of them warm-up"):
        profile_script([str(script), "1"], tmp_path / "t.json", kind="cpu", warmup=1, steps=1)


def test_an_unmarked_script_is_profiled_whole_and_its_initialisation_is_said(tmp_path):
    script = _script(tmp_path, UNMARKED)
    profiled = profile_script([str(script)], tmp_path / "t.json", kind="cpu", steps=1)
    assert profiled.marked_steps == 0 and "marks no step" in profiled.notes[0]
    _, summary = trace_rows(profiled.path, TorchOperators())
    assert summary.steps == 0 and summary.init_us > 0
    assert any("weight initialisation" in line for line in summary.lines())


def _args(**given) -> argparse.Namespace:
    return argparse.Namespace(**{"workload": [], "call": None, **given})


def test_python_in_a_profile_command_is_the_running_interpreter():
    assert _workload_command(_args(workload=["--", "python", "m.py"])) == \
        [sys.executable, "m.py"]
    assert _workload_command(_args(workload=["python3", "-m", "pkg"]))[0] == sys.executable
    assert _workload_command(_args(workload=["/opt/py/bin/python", "m.py"]))[0] == \
        "/opt/py/bin/python"  # a path names its interpreter
    assert _workload_command(_args(call="m:step")) == [sys.executable]
    with pytest.raises(NpuperfError, match="either --call"):
        _workload_command(_args(call="m:step", workload=["--", "python", "m.py"]))


def test_profile_errors_name_the_command(npuperf):
    code, _, err = npuperf("profile", "--", "model.py")
    assert code == 2 and err.startswith("npuperf profile: error: give the workload")


def test_parse_without_db_writes_a_cpu_trace_to_this_devices_database(tmp_path, npuperf,
                                                                    monkeypatch):
    monkeypatch.chdir(tmp_path)
    trace = cpu_trace(tmp_path / "t.json")
    code, out, err = npuperf("parse", "--profile", trace, "--quiet")
    assert code == 0, err
    [db] = (tmp_path / "data").glob(f"CPU_*/vllm_ascend/{DEFAULT_DB.name}")
    assert (db / "MatMulV2.csv").is_file() and str(db.relative_to(tmp_path)) in out


@pytest.mark.slow
def test_profile_a_callable_shows_the_workloads_output_and_parses(tmp_path):
    (tmp_path / "my_model.py").write_text(
        "import torch\nprint('building the model')\nw = torch.randn(32, 64)\n"
        "x = torch.randn(8, 64)\n\ndef step():\n    print('step output')\n    return x @ w.t()\n")
    db = tmp_path / "db"
    done = subprocess.run([sys.executable, "-m", "pytest_npuperf.cli", "profile", "--device",
                           "cpu", "--call", "my_model:step", "--steps", "2", "--out",
                           str(tmp_path / "t.json"), "--db", str(db), "--quiet"],
                          capture_output=True, text=True, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert "building the model" in out and out.count("step output") == 3  # warm-up + 2
    assert f"trace written: {tmp_path / 't.json'} (2 marked step(s) traced)" in out
    assert "8,64;32,64" in (db / "MatMulV2.csv").read_text()
