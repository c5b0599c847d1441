"""AddRmsNormBias: rows become the vllm-ascend custom operator's call on the NPU and the same
math on the CPU, checked against a float64 loop."""

from __future__ import annotations

import math

import pytest
import torch

from pytest_npuperf.db.errors import CellError
from pytest_npuperf.kernels.case import case_from_row
from pytest_npuperf.kernels.registry import spec_for
from tests import npu_standin
from tests.test_devices import HostTensorNpu, fake_torch_npu
from tests.test_kernels_specs import prepare, row

# Fixtures: the stand-in NPU operators (tests/npu_standin.py).
npu = npu_standin.npu

WITH_BIAS = row("3,64;3,64;64;64", "DT_FLOAT;DT_FLOAT;DT_FLOAT;DT_FLOAT", "ND;ND;ND;ND",
                "3,64;3,1;3,64", "DT_FLOAT;DT_FLOAT;DT_FLOAT")
# A real call without beta: the slot is kept, empty.
NO_BIAS = row("2,5,32;2,5,32;32;", "DT_BF16;DT_BF16;DT_BF16;DT_UNDEFINED", "ND;ND;ND;NULL",
              "2,5,32;2,5,1;2,5,32", "DT_BF16;DT_FLOAT;DT_BF16")


def loop_reference(x1, x2, gamma, beta, eps=1e-6):
    """Row by row in float64 Python arithmetic."""
    x1, x2 = x1.double().reshape(-1, x1.shape[-1]), x2.double().reshape(-1, x2.shape[-1])
    ys, rstds, xs = [], [], []
    for a, b in zip(x1.tolist(), x2.tolist()):
        x = [u + v for u, v in zip(a, b)]
        rstd = 1 / math.sqrt(sum(v * v for v in x) / len(x) + eps)
        ys.append([v * rstd * g + (beta[i] if beta is not None else 0.0)
                   for i, (v, g) in enumerate(zip(x, gamma))])
        rstds.append([rstd])
        xs.append(x)
    return (torch.tensor(ys, dtype=torch.float64), torch.tensor(rstds, dtype=torch.float64),
            torch.tensor(xs, dtype=torch.float64))


def test_add_rms_norm_bias_matches_a_float64_loop():
    _, prepared = prepare("AddRmsNormBias", WITH_BIAS)
    t = prepared.tensors
    y, rstd, x = prepared.call()
    want_y, want_rstd, want_x = loop_reference(t["x1"], t["x2"], t["gamma"].tolist(),
                                               t["beta"].tolist())
    assert (y.dtype, rstd.dtype, x.dtype) == (torch.float32,) * 3
    assert tuple(rstd.shape) == (3, 1)
    torch.testing.assert_close(x.double(), want_x)
    torch.testing.assert_close(rstd.double(), want_rstd, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(y.double(), want_y, rtol=1e-5, atol=1e-5)
    assert prepared.flops == 6 * 3 * 64


def test_an_empty_beta_slot_is_a_call_without_bias_and_keeps_the_row_dtypes():
    _, prepared = prepare("AddRmsNormBias", NO_BIAS)
    t = prepared.tensors
    assert "beta" not in t
    y, rstd, x = prepared.call()
    assert (y.dtype, rstd.dtype, x.dtype) == (torch.bfloat16, torch.float32, torch.bfloat16)
    assert tuple(rstd.shape) == (2, 5, 1)
    x_bf16 = (t["x1"] + t["x2"]).float()  # the kernel's x output is rounded to bf16
    want_y, want_rstd, _ = loop_reference(x_bf16, torch.zeros_like(x_bf16),
                                          t["gamma"].float().tolist(), None)
    torch.testing.assert_close(rstd.reshape(-1, 1).double(), want_rstd, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(y.reshape(-1, 32).double(), want_y, rtol=2 ** -7, atol=2 ** -6)


@pytest.mark.parametrize("cells, message", [
    (row("3,64;3,32;64;64", "DT_BF16;DT_BF16;DT_BF16;DT_BF16", "ND;ND;ND;ND", "3,64", "DT_BF16"),
     "x2"),
    (row("3,64;3,64;32;64", "DT_BF16;DT_BF16;DT_BF16;DT_BF16", "ND;ND;ND;ND", "3,64", "DT_BF16"),
     "gamma"),
])
def test_inconsistent_rows_are_errors(cells, message):
    with pytest.raises(CellError, match=message):
        prepare("AddRmsNormBias", cells)


def test_on_the_npu_the_custom_operator_gets_its_documented_arguments(npu):
    backend, calls = npu
    for cells, has_beta in ((WITH_BIAS, True), (NO_BIAS, False)):
        case = case_from_row("AddRmsNormBias", cells)
        prepared = spec_for("AddRmsNormBias").prepare(case, backend)
        assert len(prepared.call()) == 3  # (y, rstd, x): torch_binding.cpp's schema
        args = calls.of("_C_ascend::npu_add_rms_norm_bias")
        assert args["x1"] is prepared.tensors["x1"] and args["gamma"] is prepared.tensors["gamma"]
        assert (args["beta"] is not None) == has_beta and args["epsilon"] == pytest.approx(1e-6)


def test_on_an_npu_without_the_custom_op_environment_the_error_names_the_variable(
        monkeypatch, tmp_path):
    # vllm-ascend v0.18.0's layout: vendors/vllm-ascend, the path set by vLLM's platform only
    (tmp_path / "vllm_ascend" / "_cann_ops_custom" / "vendors" / "vllm-ascend").mkdir(
        parents=True)
    (tmp_path / "vllm_ascend" / "__init__.py").write_text("")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delenv("ASCEND_CUSTOM_OPP_PATH", raising=False)
    fake_torch_npu(monkeypatch, [])
    case = case_from_row("AddRmsNormBias", WITH_BIAS, file="db/AddRmsNormBias.csv", row_number=4)
    with pytest.raises(CellError) as err:
        spec_for("AddRmsNormBias").prepare(case, HostTensorNpu(0))
    message = str(err.value)
    assert "row 4" in message and "ASCEND_CUSTOM_OPP_PATH: set it to" in message
    assert "_cann_ops_custom/vendors/vllm-ascend" in message
