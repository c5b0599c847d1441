"""The kernel library inside `pytest bench`: kernels users register (conftest hook, entry
point), rows that cannot be replayed saying why, and --npuperf-verify end to end."""

from __future__ import annotations

import json
import textwrap

import pytest

# In-process pytester runs drop the modules first imported inside them; torch cannot be
# imported twice into one process (see test_replay_plugin).
import torch  # noqa: F401

from pytest_npuperf.db.table import read_table
from pytest_npuperf.kernels import catalog, registry
from tests.replay_project import BENCH, DEVICE, FAST, VERSION, cells, run_json, write_db

DEMO_KERNELS = '''
import torch

from pytest_npuperf.kernels.entry import KernelEntry, SlotLayout
from pytest_npuperf.kernels.spec import KernelSpec


class ScaledTanh(KernelSpec):
    """A user's own kernel, replayed everywhere."""
    kernel_type = "ScaledTanhDemo"
    inputs = (SlotLayout("x"),)
    outputs = (SlotLayout("y"),)
    npu_api = "my_ops.scaled_tanh(x)"
    portable = "torch.tanh(x) * 2"
    work = "2*numel flops; 2*numel*bytes"

    def build_inputs(self, case, backend, generator):
        return {"x": self.tensor(case, 0, backend, generator)}

    def portable_call(self, tensors, case):
        x = tensors["x"]
        return lambda: torch.tanh(x) * 2

    def npu_call(self, tensors, case, backend):
        return self.portable_call(tensors, case)


class FusedThing(KernelSpec):
    """An NPU-only custom operator: no portable path."""
    kernel_type = "FusedThingDemo"
    inputs = (SlotLayout("x"),)
    outputs = (SlotLayout("y"),)
    npu_api = "torch.ops.my_vendor.fused_thing"
    custom_op = True

    def build_inputs(self, case, backend, generator):
        return {"x": self.tensor(case, 0, backend, generator)}

    def npu_call(self, tensors, case, backend):
        return lambda: torch.ops.my_vendor.fused_thing(tensors["x"])


# Catalog metadata only: the replay is imported when a case first needs it.
TANH_ENTRY = KernelEntry(("ScaledTanhDemo",), "activation", "AI_VECTOR_CORE",
                         (SlotLayout("x"),), (SlotLayout("y"),), "my_ops.scaled_tanh(x)",
                         replay="demo_kernels:ScaledTanh")


def register_all(register):
    register(ScaledTanh)
    register(FusedThing)
'''
HOOK_CONFTEST = '''
def pytest_npuperf_register_kernels(register):
    import demo_kernels

    demo_kernels.register_all(register)
'''
DEMO_ROWS = {"ScaledTanhDemo": [cells("4,32", "DT_BF16", "ND", "4,32", "DT_BF16")],
             "FusedThingDemo": [cells("4,32", "DT_BF16", "ND", "4,32", "DT_BF16")]}


@pytest.fixture
def scratch_catalog(monkeypatch):
    """Kernels a run registers are gone after the test."""
    monkeypatch.setattr(catalog, "_BY_TYPE", dict(catalog._BY_TYPE))
    monkeypatch.setattr(registry, "REGISTRY", dict(registry.REGISTRY))


def run(pytester, db, *args):
    return pytester.runpytest("bench", "--npuperf-db", str(db), "--npuperf-out",
                              str(pytester.path / "out"), *FAST, "-rs", *args)


@pytest.fixture
def demo(pytester, scratch_catalog):
    pytester.makepyfile(**{"bench/test_kernels": BENCH, "demo_kernels": DEMO_KERNELS})
    pytester.syspathinsert()
    return pytester, write_db(pytester.path / "db", DEMO_ROWS)


def skip_reasons(result) -> str:
    return "\n".join(line for line in result.outlines if line.startswith("SKIPPED"))


def test_without_registration_user_kernels_are_skipped_as_having_no_replay(demo):
    pytester, db = demo
    result = run(pytester, db)
    result.assert_outcomes(skipped=2)
    assert "no replay for ScaledTanhDemo yet" in skip_reasons(result)


def test_a_conftest_hook_registers_kernels_and_an_npu_only_one_is_skipped_naming_its_op(demo):
    pytester, db = demo
    pytester.makeconftest(HOOK_CONFTEST)
    result = run(pytester, db)
    result.assert_outcomes(passed=1, skipped=1)
    reasons = skip_reasons(result)
    assert ("FusedThingDemo runs only on an NPU: torch.ops.my_vendor.fused_thing (a vllm-ascend "
            "custom operator) has no portable path; skipped on cpu") in reasons
    assert "no replay" not in reasons
    statuses = {c["kernel_type"]: (c["status"], c["error"]) for c in run_json(
        pytester.path / "out")["cases"]}
    assert statuses["ScaledTanhDemo"][0] == "ok"
    assert statuses["FusedThingDemo"][0] == "skipped"
    assert "torch.ops.my_vendor.fused_thing" in statuses["FusedThingDemo"][1]


def install_entry_points(root, lines: str) -> None:
    """A distribution on sys.path whose metadata declares `pytest_npuperf.kernels` entry
    points, as `pip install` of a package with them would leave it."""
    info = root / "npuperf_demo_kernels-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: npuperf-demo-kernels\n"
                                   "Version: 1.0\n")
    (info / "entry_points.txt").write_text("[pytest_npuperf.kernels]\n" + lines)


def test_an_entry_point_registers_kernels_for_pytest_and_npuperf_kernels(demo, npuperf):
    pytester, db = demo
    install_entry_points(pytester.path, "tanh = demo_kernels:TANH_ENTRY\n"
                                        "all = demo_kernels:register_all\n")
    run(pytester, db).assert_outcomes(passed=1, skipped=1)
    code, out, _ = npuperf("kernels", "--json")
    assert code == 0
    kernels = {k["kernel_type"]: k for k in json.loads(out)["kernels"]}
    tanh, fused = kernels["ScaledTanhDemo"], kernels["FusedThingDemo"]
    assert tanh["replayable_here"] and tanh["work"] == "2*numel flops; 2*numel*bytes"
    assert not fused["replayable_here"] and fused["portable"] == "none (NPU only)"
    assert fused["custom_op"] and "no portable path" in fused["why"]


def test_a_broken_entry_point_stops_the_run_with_a_one_line_error(demo, npuperf):
    pytester, db = demo
    install_entry_points(pytester.path, "bad = demo_kernels:NoSuchThing\n")
    result = run(pytester, db)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["ERROR: npuperf: entry point bad (demo_kernels:NoSuchThing)"
                                 " in pytest_npuperf.kernels failed to load: AttributeError*"])
    code, _, err = npuperf("kernels")
    assert code == 2 and "entry point bad" in err


NPU_CONFTEST = '''
import types

import torch

import pytest_npuperf.harness.context as session
from pytest_npuperf.devices import CpuBackend


def npu_interleave_rope(x, cos, sin):
    raise RuntimeError(f"EZ1001: InterleaveRope: the last dim of x must be 64, got {x.shape[-1]}")


def npu_rms_norm(x, gamma, epsilon=1e-6):  # forgets to normalise
    return x * gamma, torch.ones(*x.shape[:-1], 1)


class NpuStandIn(CpuBackend):
    """Reports itself as an A3 NPU; its torch_npu computes on the host."""
    kind = "npu"
    torch_npu = types.SimpleNamespace(npu_interleave_rope=npu_interleave_rope,
                                      npu_rms_norm=npu_rms_norm)

    def device_name(self):
        return "Ascend910_9382"


_select = session.select_backend


def pytest_configure(config):
    session.select_backend = lambda kind, index, name: NpuStandIn(index or 0, name)


def pytest_unconfigure(config):
    session.select_backend = _select
'''
ROPE_D32 = cells("2,4,1,32;2,1,1,32;2,1,1,32", "DT_BF16;DT_BF16;DT_BF16", "ND;ND;ND",
                 "2,4,1,32", "DT_BF16")
RMS_ROW = cells("4,64;64", "DT_BF16;DT_BF16", "ND;ND", "4,64;4,1", "DT_BF16;DT_FLOAT", "ND;ND")
MATMUL_ROW = cells("8,64;32,64", "DT_BF16;DT_BF16", "ND;ND", "8,32", "DT_BF16")


@pytest.fixture
def npu_project(pytester):
    pytester.makepyfile(**{"bench/test_kernels": BENCH})
    pytester.makeconftest(NPU_CONFTEST)
    db = write_db(pytester.path / "db", {"InterleaveRope": [ROPE_D32], "RmsNorm": [RMS_ROW],
                                         "MatMulV2": [MATMUL_ROW]})
    return pytester, db


def test_a_shape_the_npu_api_rejects_is_a_failed_case_with_its_message_and_the_row_stays(
        npu_project):
    pytester, db = npu_project
    result = run(pytester, db, "-k", "InterleaveRope")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*failed: RuntimeError: EZ1001: InterleaveRope: the last dim of "
                                 "x must be 64, got 32*"])
    table = read_table(db / "InterleaveRope.csv")  # the NPU's own database: updated in place
    assert len(table) == 1 and table["Input Shapes"][0] == ROPE_D32["Input Shapes"]
    assert "EZ1001" in table["MicroBench Status"][0]
    assert table["Average Duration(us)"][0] == ""


def test_verify_fails_a_case_whose_npu_output_is_wrong_and_passes_a_right_one(npu_project):
    pytester, db = npu_project
    result = run(pytester, db, "-k", "RmsNorm or MatMul", "--npuperf-verify")
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(["*test_kernel[[]RmsNorm*",
                                 "failed: VerifyError: output 0 (torch.bfloat16): * differ from "
                                 "the float64 CPU reference beyond rtol*"])
    cases = {c["kernel_type"]: c for c in run_json(db)["cases"]}  # reports beside the NPU's db
    assert cases["MatMulV2"]["verified"].startswith("verified: 1 output(s)")
    table = read_table(db / "RmsNorm.csv")
    assert "VerifyError" in table["MicroBench Status"][0]


def test_verify_on_a_cpu_checks_the_first_case_of_each_type_and_is_recorded(pytester):
    pytester.makepyfile(**{"bench/test_kernels": BENCH})
    second = cells("8,64;64", "DT_BF16;DT_BF16", "ND;ND", "8,64;8,1", "DT_BF16;DT_FLOAT", "ND;ND")
    db = write_db(pytester.path / "db", {"RmsNorm": [RMS_ROW, second],
                                         "MatMulV2": [MATMUL_ROW]})
    pytester.makeini(textwrap.dedent("""\
        [pytest]
        npuperf_verify = true
        """))
    run(pytester, db).assert_outcomes(passed=3)
    report = run_json(pytester.path / "out")
    verified = [c["kernel_type"] for c in report["cases"] if c["verified"]]
    assert sorted(verified) == ["MatMulV2", "RmsNorm"]
    assert report["session"]["options"]["verify"] == 0
    assert list((pytester.path / "out").glob(f"CPU_*/vllm_ascend/{VERSION}"))
    assert DEVICE not in str(report["session"]["device"])
