"""--npuperf-verify: the device output against the portable path in float64 on the CPU."""

from __future__ import annotations

import pytest
import torch

from pytest_npuperf.devices import CpuBackend
from pytest_npuperf.kernels.case import case_from_row
from pytest_npuperf.kernels.registry import spec_for
from pytest_npuperf.kernels.spec import KernelSpec, SlotLayout
from pytest_npuperf.measure.verify import Verifier, VerifyError, compare, tolerance
from tests.test_devices import HostTensorNpu, fake_torch_npu
from tests.test_kernels_specs import row

RMS = row("4,64;64", "DT_BF16;DT_BF16", "ND;ND", "4,64;4,1", "DT_BF16;DT_FLOAT")


def verifier() -> Verifier:
    return Verifier(0, lambda: None)


def test_tolerances_follow_the_output_dtype():
    assert tolerance(torch.bfloat16) > tolerance(torch.float16) > tolerance(torch.float32)
    reference = torch.linspace(-4, 4, 101, dtype=torch.float64)
    compare(0, reference.to(torch.bfloat16), reference)  # bf16 rounding is within bf16's
    with pytest.raises(VerifyError, match="beyond rtol"):
        compare(0, reference.float(), reference + 1e-2)  # ... but not within float32's


def test_a_wrong_element_is_reported_with_where_and_by_how_much():
    reference = torch.ones(3, 5, dtype=torch.float64)
    got = reference.to(torch.bfloat16).clone()
    got[1, 3] = 1.5
    with pytest.raises(VerifyError) as err:
        compare(2, got, reference)
    assert "output 2 (torch.bfloat16): 1 of 15 elements" in str(err.value)
    assert "(1, 3): 1.5 vs 1" in str(err.value)


def test_infinities_must_match_and_nans_never_pass():
    reference = torch.tensor([1.0, float("-inf"), 2.0], dtype=torch.float64)
    compare(0, reference.float(), reference)
    with pytest.raises(VerifyError):
        compare(0, torch.tensor([1.0, float("nan"), 2.0]), reference)
    with pytest.raises(VerifyError):
        compare(0, torch.tensor([1.0, float("-inf"), float("inf")]), reference)


def test_integer_outputs_and_shapes_compare_exactly():
    compare(0, torch.tensor([3, 1], dtype=torch.int32), torch.tensor([3, 1]))
    with pytest.raises(VerifyError, match="1 of 2 elements differ"):
        compare(0, torch.tensor([3, 2]), torch.tensor([3, 1]))
    with pytest.raises(VerifyError, match="shape"):
        compare(0, torch.zeros(2, 3), torch.zeros(3, 2, dtype=torch.float64))


def test_quantised_int8_outputs_may_land_one_step_either_side_of_a_rounding_boundary():
    # Seen on an H100: DynamicQuant's bf16 GPU path rounded 6 of 20480 values to the other
    # side of a .5 boundary from the float64 reference.
    want = torch.tensor([3, -7, 127], dtype=torch.int64)
    compare(0, torch.tensor([4, -8, 127], dtype=torch.int8), want)
    with pytest.raises(VerifyError, match="1 of 3 elements differ by more than 1 step"):
        compare(0, torch.tensor([5, -7, 127], dtype=torch.int8), want)
    with pytest.raises(VerifyError):  # other integer outputs (indices, counts) stay exact
        compare(0, torch.tensor([4, -7, 127], dtype=torch.int32), want)


def test_unordered_outputs_compare_as_sets_per_row():
    # Top-k indices: on an H100 LightningIndexer chose the same keys as the reference in
    # another order (ties and near-ties of bf16 scores).
    want = torch.tensor([[5, 1, 9], [0, 2, 4]])
    got = torch.tensor([[1, 9, 5], [4, 0, 2]], dtype=torch.int32)
    compare(0, got, want, unordered=True)
    with pytest.raises(VerifyError):
        compare(0, got, want)
    with pytest.raises(VerifyError, match="1 of 6"):
        compare(0, torch.tensor([[1, 9, 6], [4, 0, 2]], dtype=torch.int32), want, unordered=True)


def test_the_first_case_of_each_kernel_type_and_every_nth_are_sampled():
    every_third = Verifier(3, lambda: None)
    picks = [every_third.wanted("A") for _ in range(7)]
    assert picks == [True, False, False, True, False, False, True]
    first_only = verifier()
    assert [first_only.wanted(t) for t in "AABAB"] == [True, False, True, False, False]


def test_on_a_cpu_the_portable_path_is_checked_against_itself_in_float64():
    case = case_from_row("RmsNorm", RMS)
    spec = spec_for("RmsNorm")
    note = verifier().check(spec, case, spec.prepare(case, CpuBackend()))
    assert note.startswith("verified: 2 output(s) within tolerance of the float64 CPU reference")


def test_in_place_kernels_are_compared_from_their_inputs_before_the_call():
    cells = row("4,8;4,8", "DT_BF16;BOOL", "ND;ND", "4,8", "DT_BF16")
    case = case_from_row("MaskedFill", cells)
    spec = spec_for("MaskedFill")
    assert verifier().check(spec, case, spec.prepare(case, CpuBackend())).startswith("verified")


class Overflowing(KernelSpec):
    """x * x * 1e38 in the input dtype: inf in bfloat16, finite in float64."""

    kernel_type = "OverflowForTest"
    inputs = (SlotLayout("x"),)
    outputs = (SlotLayout("y"),)
    npu_api = "-"

    def build_inputs(self, case, backend, generator):
        return {"x": self.tensor(case, 0, backend, generator)}

    def portable_call(self, tensors, case):
        x = tensors["x"]
        return lambda: x * x * 1e38

    def npu_call(self, tensors, case, backend):
        return self.portable_call(tensors, case)


def test_on_a_cpu_overflow_in_the_row_dtype_fails_verification():
    case = case_from_row("OverflowForTest", row("64", "DT_BF16", "ND", "64", "DT_BF16"))
    spec = Overflowing()
    with pytest.raises(VerifyError, match="differ from the float64 CPU reference"):
        verifier().check(spec, case, spec.prepare(case, CpuBackend()))


def test_on_an_npu_the_operator_output_is_checked_against_the_portable_math(monkeypatch):
    module = fake_torch_npu(monkeypatch, [])
    case = case_from_row("RmsNorm", RMS)
    spec = spec_for("RmsNorm")

    def right(x, gamma, epsilon=None):
        rstd = torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + epsilon)
        return (x.float() * rstd * gamma.float()).to(x.dtype), rstd

    monkeypatch.setattr(module, "npu_rms_norm", right)
    assert verifier().check(spec, case, spec.prepare(case, HostTensorNpu(0))).startswith(
        "verified")

    def unnormalised(x, gamma, epsilon=None):
        return x * gamma, right(x, gamma, epsilon)[1]

    monkeypatch.setattr(module, "npu_rms_norm", unnormalised)
    with pytest.raises(VerifyError, match="output 0 .* differ"):
        verifier().check(spec, case, spec.prepare(case, HostTensorNpu(0)))
