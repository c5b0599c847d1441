"""`npuperf kernels` (the kernel table) and the grid's warning for rows nothing replays."""

from __future__ import annotations

import json
import textwrap

import pytest
import torch

from pytest_npuperf.devices import npu
from pytest_npuperf.kernels import catalog, registry
from pytest_npuperf.kernels.entry import KernelEntry, SlotLayout
from pytest_npuperf.kernels.overview import describe


def _by_type(out: str) -> dict[str, str]:
    lines = out.splitlines()
    return {line.split()[0]: line for line in lines[2:lines.index("")]}


# The table and JSON tests judge the CPU (--device cpu): what replays here differs by device,
# and the default is this host's own (on a CUDA host, cuda: see the test after them).
def test_the_table_lists_every_catalog_kernel_type_and_what_replays_here(npuperf):
    code, out, err = npuperf("kernels", "--device", "cpu")
    assert code == 0, err
    lines = out.splitlines()
    assert lines[0].split()[:3] == ["kernel", "type", "family"]
    by_type = _by_type(out)
    assert set(by_type) == set(catalog.kernel_types())
    assert "torch_npu.npu_interleave_rope(x, cos, sin)" in by_type["InterleaveRope"]
    assert "yes, cpu: portable path" in by_type["InterleaveRope"]
    assert "3*B*N*S*D flops" in by_type["InterleaveRope"]
    assert "vllm-ascend" in by_type["AddRmsNormBias"]
    replayed = catalog.replayable_types()
    assert (f"{len(by_type)} kernel types: {len(replayed)} with a replay, "
            f"{len(replayed)} replayable here (cpu)") in lines
    for kernel_type in set(by_type) - set(replayed):
        assert "no, no replay yet" in by_type[kernel_type]


def test_json_gives_one_object_per_kernel_type(npuperf):
    code, out, _ = npuperf("kernels", "--json", "--device", "cpu")
    assert code == 0
    data = json.loads(out)
    assert data["device"] == "cpu"
    kernels = {k["kernel_type"]: k for k in data["kernels"]}
    assert set(kernels) == set(catalog.kernel_types())
    matmul = kernels["MatMulV3"]
    assert matmul["same_call"] == ["MatMulV2", "MatMulV3", "MatMulCommon"]
    assert matmul["work"] == "2*M*N*K flops; (M*K + N*K + M*N)*bytes"
    split = kernels["split_qkv_rmsnorm_rope_kernel"]
    # a Triton operator and an ATB one: no custom OPP (docs/format.md §10)
    assert not split["custom_op"] and not kernels["RINGMLAPrefillBF16Kernel"]["custom_op"]
    assert split["replayable_here"] and kernels["DispatchFFNCombine"]["custom_op"]
    assert split["replay"] == "pytest_npuperf.kernels.rope:SplitQkvRmsNormRope"


@pytest.mark.parametrize("cuda", [False, True], ids=["cpu-host", "cuda-host"])
def test_without_a_device_the_table_judges_the_one_pytest_bench_picks(npuperf, monkeypatch,
                                                                      cuda):
    """Which device this host has is simulated (only the choice is under test): no torch_npu,
    and CUDA available or not."""
    monkeypatch.setattr(npu, "torch_npu_installed", lambda: False)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: cuda)
    code, out, err = npuperf("kernels")
    assert code == 0, err
    here = "cuda" if cuda else "cpu"
    assert any(line.endswith(f" replayable here ({here})") for line in out.splitlines())
    assert f"yes, {here}: portable path" in _by_type(out)["InterleaveRope"]
    # The implementations of each kernel type on that device, the absent ones named: vendor
    # libraries are CUDA's (none is installed here), a GEMM has only its portable path.
    norm = _by_type(out)["RmsNorm"]
    assert "eager, compiled" in norm or (cuda and "eager" in norm and "compiled" in norm)
    if cuda:
        assert "(absent: " in norm and "vllm" in norm and "liger" in norm
        assert any(line.startswith("  absent here: vllm: not installed: vllm")
                   for line in out.splitlines())
    else:
        assert "vllm" not in norm
    matmul = _by_type(out)["MatMulV2"]
    assert " eager " in matmul and "compiled" not in matmul


def test_on_an_npu_custom_op_kernels_need_their_environment():
    missing = ["ASCEND_CUSTOM_OPP_PATH: set it to /x/vendors/vllm-ascend"]
    infos = {i.kernel_type: i for i in describe("npu", custom_env=lambda: missing)}
    norm = infos["AddRmsNormBias"]
    assert not norm.replayable_here
    assert norm.why == "custom-op environment: ASCEND_CUSTOM_OPP_PATH: set it to /x/vendors/vllm-ascend"
    rope = infos["InterleaveRope"]
    assert rope.replayable_here and rope.why == "npu: torch_npu.npu_interleave_rope(x, cos, sin)"
    assert all(i.replayable_here for i in describe("npu", custom_env=list) if i.replay)


def test_a_device_this_machine_lacks_is_a_one_line_error(npuperf, monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    code, out, err = npuperf("kernels", "--device", "cuda")
    assert code == 2 and out == ""
    assert err.strip().splitlines() == ["npuperf kernels: error: --device cuda: no CUDA device "
                                        "is available"]


def test_grid_warns_once_per_kernel_type_it_writes_without_a_replay(npuperf, tmp_path,
                                                                    monkeypatch):
    monkeypatch.setattr(catalog, "_BY_TYPE", dict(catalog._BY_TYPE))
    monkeypatch.setattr(registry, "REGISTRY", dict(registry.REGISTRY))
    catalog.add(KernelEntry(("NoReplayDemo",), "elementwise", catalog.VECTOR,
                            (SlotLayout("x"),), (SlotLayout("y"),), "my_ops.demo(x)"))
    config = tmp_path / "grid.yaml"
    config.write_text(textwrap.dedent("""\
        patterns:
          rows:
            iterators: {T: [1, 2, 4], H: [64]}
            inputs: ["(T, H)"]
            outputs: ["(T, H)"]
        assignments: {NoReplayDemo: rows, TensorMove: rows}
        """))
    db = tmp_path / "db"
    db.mkdir()
    code, out, err = npuperf("grid", "--config", config, "--db", db, "--quiet")
    assert code == 0, err
    warnings = err.strip().splitlines()
    assert warnings == ["npuperf grid: warning: NoReplayDemo: 3 row(s) got no replay spec: their "
                        "cases are skipped until one is added (docs/kernels.md: adding a kernel type)"]
    assert "added 6 row(s)" in out
    code, out, err = npuperf("grid", "--config", config, "--db", db, "--quiet")
    assert code == 0 and err == ""  # nothing written, nothing to warn about


def test_the_documented_example_kernel_registers_and_replays(monkeypatch, tmp_path):
    import re
    import sys
    from pathlib import Path

    from pytest_npuperf.devices import CpuBackend
    from pytest_npuperf.kernels.case import case_from_row
    from pytest_npuperf.kernels.extensions import register

    page = (Path(__file__).resolve().parents[1] / "docs" / "kernels.md").read_text()
    code = re.search(r"```python\n# my_kernels.py\n(.*?)```", page, re.S).group(1)
    (tmp_path / "my_kernels.py").write_text(code)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(catalog, "_BY_TYPE", dict(catalog._BY_TYPE))
    monkeypatch.setattr(registry, "REGISTRY", dict(registry.REGISTRY))
    monkeypatch.delitem(sys.modules, "my_kernels", raising=False)
    import my_kernels

    register(my_kernels.MyFusedNorm)
    assert catalog.replayable("MyFusedNorm")
    case = case_from_row("MyFusedNorm", {"Input Shapes": "4,32;32", "Input Data Types":
                                         "DT_FLOAT;DT_FLOAT", "Output Shapes": "4,32",
                                         "Output Data Types": "DT_FLOAT"})
    prepared = registry.spec_for("MyFusedNorm").prepare(case, CpuBackend())
    x, gamma = prepared.tensors["x"], prepared.tensors["gamma"]
    torch.testing.assert_close(prepared.call(), x / x.pow(2).mean(-1, keepdim=True).sqrt() * gamma)
