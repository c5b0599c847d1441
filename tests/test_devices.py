"""Device backends. The NPU backend is exercised against a stand-in torch_npu that records the
calls the backend makes (the real one needs CANN and an NPU)."""

from __future__ import annotations

import sys
import types

import pytest
import torch

from pytest_npuperf.devices import BackendError, CpuBackend, select_backend
from pytest_npuperf.devices import npu as npu_module
from pytest_npuperf.devices.base import HostClockTimer, Peak
from pytest_npuperf.devices.names import sanitize_device_name
from pytest_npuperf.kernels.case import case_from_row
from pytest_npuperf.kernels.registry import spec_for


class FakeEvent:
    clock = 0.0

    def __init__(self, enable_timing=False):
        self.enable_timing = enable_timing
        self.t = None

    def record(self):
        FakeEvent.clock += 0.5
        self.t = FakeEvent.clock

    def elapsed_time(self, other):
        return other.t - self.t  # milliseconds, as torch events report


def fake_torch_npu(monkeypatch, calls: list, available: bool = True):
    """Install stand-ins for `torch_npu` and `torch.npu` that log every call."""
    mod = types.ModuleType("torch_npu")
    mod.__version__ = "2.9.0.post1"
    npu = types.SimpleNamespace()
    npu.config = types.SimpleNamespace(allow_internal_format=False)
    npu.current_stream = lambda: "stream0"

    def range_start(message, stream=None):
        calls.append(("range_start", message, stream))
        return 7

    npu.mstx = types.SimpleNamespace(range_start=range_start,
                                     range_end=lambda rid: calls.append(("range_end", rid)))
    mod.npu = npu

    def npu_format_cast(tensor, fmt):
        calls.append(("npu_format_cast", tuple(tensor.shape), fmt))
        return tensor

    def npu_rms_norm(x, gamma, epsilon=None):
        calls.append(("npu_rms_norm", tuple(x.shape), tuple(gamma.shape), epsilon))
        return x, x

    def npu_swiglu(x, dim=None):
        calls.append(("npu_swiglu", tuple(x.shape), dim))
        return x

    mod.npu_format_cast = npu_format_cast
    mod.npu_rms_norm = npu_rms_norm
    mod.npu_swiglu = npu_swiglu
    torch_npu_ns = types.SimpleNamespace(
        is_available=lambda: available, set_device=lambda i: calls.append(("set_device", i)),
        synchronize=lambda: calls.append(("synchronize",)), get_device_name=lambda i: "Ascend910_9382",
        Event=FakeEvent, empty_cache=lambda: None, device_count=lambda: 2)
    monkeypatch.setitem(sys.modules, "torch_npu", mod)
    monkeypatch.setattr(torch, "npu", torch_npu_ns, raising=False)
    monkeypatch.setattr(npu_module, "torch_npu_installed", lambda: True)
    return mod


class HostTensorNpu(npu_module.NpuBackend):
    """The real NPU backend, with tensors kept on the host so its calls can be checked."""

    @property
    def device(self):
        return torch.device("cpu")


def test_cpu_backend_basics():
    backend = CpuBackend()
    assert backend.device == torch.device("cpu")
    assert backend.database_device().startswith("CPU_")
    assert "torch" in backend.stack()
    assert isinstance(backend.timer(), HostClockTimer)
    assert backend.describe()["kind"] == "cpu"
    assert backend.to_format(torch.ones(2), "FRACTAL_NZ").shape == (2,)


def test_host_clock_timer_measures_microseconds():
    import time

    samples = HostClockTimer(lambda: None).time_calls(lambda: time.sleep(0.002), 3)
    assert len(samples) == 3 and all(1_500 < s < 200_000 for s in samples)


def test_sanitize_device_name():
    assert sanitize_device_name("CPU_Intel(R) Xeon(R) Gold 6348") == "CPU_Intel_R_Xeon_R_Gold_6348"
    assert sanitize_device_name("///") == "UNKNOWN"


def test_peak_bound_is_the_slower_of_compute_and_memory():
    peak = Peak(flops=1e12, bytes_per_s=1e9)
    assert peak.bound_us(2e12, 1e3) == pytest.approx(2e6)
    assert peak.bound_us(0, 5e9) == pytest.approx(5e6)


def test_select_backend_auto_without_accelerators_is_cpu(monkeypatch):
    monkeypatch.setattr(npu_module, "torch_npu_installed", lambda: False)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert select_backend("auto").kind == "cpu"


def test_select_backend_rejects_unknown_and_missing(monkeypatch):
    with pytest.raises(BackendError, match="unknown device"):
        select_backend("tpu")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(BackendError, match="no CUDA device"):
        select_backend("cuda")


def test_auto_prefers_npu_and_npu_backend_sets_up_the_device(monkeypatch):
    calls: list = []
    mod = fake_torch_npu(monkeypatch, calls)
    backend = select_backend("auto", index=3, database_device="ATLAS_800_A3_752T_128G_DIE")
    assert backend.kind == "npu"
    assert not any(c[0] == "set_device" for c in calls)  # naming a device claims nothing
    assert mod.npu.config.allow_internal_format is False
    backend.activate()
    assert ("set_device", 1) in calls  # worker 3 on a 2-device host
    assert mod.npu.config.allow_internal_format is True
    assert backend.database_device() == "ATLAS_800_A3_752T_128G_DIE"
    assert backend.device_name() == "Ascend910_9382"
    assert backend.stack()["torch_npu"] == "2.9.0.post1"
    peak = backend.peak()
    # A `_DIE` database names the chip (752T, two dies); torch_npu shows each die as a device.
    assert peak is not None and peak.flops == pytest.approx(376e12)


def test_auto_falls_back_when_no_npu_is_visible(monkeypatch):
    calls: list = []
    fake_torch_npu(monkeypatch, calls, available=False)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.warns(UserWarning, match="npu not usable"):
        assert select_backend("auto").kind == "cpu"
    with pytest.raises(BackendError, match="no NPU is visible"):
        select_backend("npu")


def test_npu_named_range_is_an_mstx_range_with_a_short_message(monkeypatch):
    calls: list = []
    fake_torch_npu(monkeypatch, calls)
    backend = npu_module.NpuBackend(0)
    long_id = "MatMulV2-" + "x" * 300
    with backend.named_range(long_id):
        calls.append(("body",))
    start = next(c for c in calls if c[0] == "range_start")
    assert len(start[1].encode()) <= npu_module.MSTX_MESSAGE_LIMIT
    assert start[1] == long_id[:npu_module.MSTX_MESSAGE_LIMIT]
    assert start[2] == "stream0"  # device-side range on the current stream
    names = [c[0] for c in calls]
    assert names.index("range_start") < names.index("body") < names.index("range_end")
    assert ("range_end", 7) in calls


def test_npu_event_timer_reads_device_events(monkeypatch):
    calls: list = []
    fake_torch_npu(monkeypatch, calls)
    backend = npu_module.NpuBackend(0)
    samples = backend.timer().time_calls(lambda: None, 4)
    assert samples == [500.0] * 4  # 0.5 ms between start and end events, in microseconds
    assert ("synchronize",) in calls


def _row(shapes, dtypes, formats, out_shapes, out_dtypes):
    return {"Input Shapes": shapes, "Input Data Types": dtypes, "Input Formats": formats,
            "Output Shapes": out_shapes, "Output Data Types": out_dtypes}


def test_npu_kernels_call_the_torch_npu_apis(monkeypatch):
    calls: list = []
    fake_torch_npu(monkeypatch, calls)
    backend = HostTensorNpu(0)
    rms = case_from_row("RmsNorm", _row("4,64;64", "DT_BF16;DT_BF16", "ND;ND", "4,64;4,1",
                                        "DT_BF16;DT_FLOAT"))
    spec_for("RmsNorm").prepare(rms, backend).call()
    assert ("npu_rms_norm", (4, 64), (64,), 1e-6) in calls
    swiglu = case_from_row("SwiGlu", _row("4,64", "DT_BF16", "ND", "4,32", "DT_BF16"))
    spec_for("SwiGlu").prepare(swiglu, backend).call()
    assert ("npu_swiglu", (4, 64), -1) in calls


def test_npu_matmul_casts_a_fractal_nz_weight_with_format_29(monkeypatch):
    calls: list = []
    fake_torch_npu(monkeypatch, calls)
    backend = HostTensorNpu(0)
    # (N/16, K/16, 16, 16) blocked weight of an ND (K, N) = (64, 32)... stored as (a, b, c, d)
    case = case_from_row("MatMulV2", _row("8,64;2,4,16,16", "DT_BF16;DT_BF16", "ND;FRACTAL_NZ",
                                          "8,32", "DT_BF16"))
    out = spec_for("MatMulV2").prepare(case, backend).call()
    assert ("npu_format_cast", (64, 32), npu_module.FRACTAL_NZ_FORMAT_ID) in calls
    assert tuple(out.shape) == (8, 32)


def test_a_custom_op_kernel_on_an_npu_says_which_variable_to_set(monkeypatch, tmp_path):
    from pytest_npuperf.kernels.vector import SwiGlu

    class CustomSwiGlu(SwiGlu):  # stands for a vllm-ascend custom operator
        custom_op = True

    calls: list = []
    fake_torch_npu(monkeypatch, calls)
    monkeypatch.setenv("ASCEND_CUSTOM_OPP_PATH", "")
    case = case_from_row("SwiGlu", _row("4,64", "DT_BF16", "ND", "4,32", "DT_BF16"),
                         file="db/SwiGlu.csv", row_number=2)
    from pytest_npuperf.db.errors import CellError

    with pytest.raises(CellError) as err:
        CustomSwiGlu().prepare(case, HostTensorNpu(0))
    assert "db/SwiGlu.csv" in str(err.value) and "custom operators" in str(err.value)
    assert "vllm_ascend is not installed" in str(err.value) or "ASCEND_CUSTOM_OPP_PATH" in str(err.value)
    CustomSwiGlu().prepare(case, CpuBackend())  # off the NPU the portable call needs nothing
