"""Profiler traces for the tests: real CPU traces made with torch.profiler here, and CUDA and
NPU traces built event by event in the formats the real profilers write.

- CUDA (kineto, libkineto/src/output_json.cpp and CuptiActivity.h): the trace is an object
  whose `deviceProperties` (id, name, ...) come before `traceEvents`; a `cpu_op` carries
  `External id`, `Input Dims`, `Input type`, `Input Strides`; a `cuda_runtime` launch and the
  `kernel` it launched share `correlation` (args), and the kernel names its operator's
  `External id` when it has one (kineto leaves it out otherwise); `ac2g` flows join runtime
  and kernel; `gpu_memcpy` / `gpu_memset` activities carry the same ids.
- NPU (torch_npu's trace_view.json, as in the real samples' trace_view/): a bare array; the
  device tasks are `X` events without a category in the process named "Ascend Hardware"
  (thread = stream); an `async_npu` flow starts on the host thread inside the launching
  operator and ends at the task's timestamp; timestamps are strings.
"""

from __future__ import annotations

import json
from pathlib import Path

GPU = "NVIDIA H200"


def cpu_trace(path: Path, *, record_shapes: bool = True) -> Path:
    """A real torch.profiler trace of a few ops a model runs (after one warm-up pass)."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    torch.manual_seed(0)
    x, w = torch.randn(16, 64), torch.randn(32, 64)
    linear = torch.nn.Linear(64, 32)
    a, b = torch.randn(4, 8, 16), torch.randn(4, 16, 8)
    table, ids = torch.randn(100, 32), torch.tensor([1, 5, 7])

    def step():
        y = x @ w.t()
        z = linear(x)
        torch.softmax(z, dim=-1)
        torch.bmm(a, b)
        torch.nn.functional.embedding(ids, table)
        return y + z
    step()
    with profile(activities=[ProfilerActivity.CPU], record_shapes=record_shapes) as prof:
        for _ in range(3):
            step()
    prof.export_chrome_trace(str(path))
    return path


class KinetoTrace:
    """A CUDA trace built the way kineto writes one."""

    def __init__(self, device_name: str = GPU) -> None:
        self.meta = {"schemaVersion": 1, "deviceProperties": [
            {"id": 0, "name": device_name, "totalGlobalMem": 150_000_000_000,
             "computeMajor": 9, "computeMinor": 0, "numSms": 132}]}
        self.events: list[dict] = []
        self.ts = 1_000_000.0
        self.external = 0
        self.correlation = 0
        self.kernel_ts = 2_000_000.0

    def op(self, name: str, dims: list, types: list, strides: list | None = None,
           dur: float = 50.0, start: float | None = None) -> dict:
        self.external += 1
        start = self.ts if start is None else start
        self.ts = max(self.ts, start + dur + 5.0)
        event = {"ph": "X", "cat": "cpu_op", "name": name, "pid": 7, "tid": 7, "ts": start,
                 "dur": dur, "args": {"External id": self.external, "Input Dims": dims,
                                      "Input type": types, "Input Strides": strides or [
                                          [] for _ in dims]}}
        self.events.append(event)
        return event

    def launch(self, op: dict, kernel_dur: float, *, category: str = "kernel",
               name: str = "sm90_xmma_gemm_bf16bf16", external: bool = True) -> dict:
        """A runtime launch inside `op` and the device activity it launched."""
        self.correlation += 1
        inside = op["ts"] + 1.0 + 0.1 * self.correlation % op["dur"]
        self.events.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel",
                            "pid": 7, "tid": 7, "ts": inside, "dur": 0.5,
                            "args": {"External id": op["args"]["External id"],
                                     "correlation": self.correlation}})
        args = {"device": 0, "stream": 7, "correlation": self.correlation}
        if external:
            args = {"External id": op["args"]["External id"], **args}
        activity = {"ph": "X", "cat": category, "name": name, "pid": 0, "tid": 7,
                    "ts": self.kernel_ts, "dur": kernel_dur, "args": args}
        self.kernel_ts += kernel_dur + 1.0
        self.events.append(activity)
        for phase, pid, ts in (("s", 7, inside), ("f", 0, activity["ts"])):
            self.events.append({"ph": phase, "id": self.correlation, "pid": pid, "tid": 7,
                                "ts": ts, "cat": "ac2g", "name": "ac2g", "bp": "e"})
        return activity

    def write(self, path: Path) -> Path:
        path.write_text(json.dumps({**self.meta, "traceEvents": self.events}, indent=1))
        return path


BF16 = "c10::BFloat16"


def transformer_gpu_trace(path: Path) -> tuple[Path, dict[tuple, list[float]]]:
    """A Llama-style decoder layer's forward as a CUDA trace: per GEMM call, the kernels it
    launched (a GEMM, and for some a split-K reduction). Returns the trace and, per GEMM
    shape (M, K, N), the sum of its kernels for each call: what parse must find."""
    trace = KinetoTrace()
    tokens, hidden, kv, ffn = 16, 4096, 1024, 14336
    expected: dict[tuple, list[float]] = {}

    def linear(k: int, n: int, kernels: list[float], *, reduce_by_correlation=False):
        outer = trace.op("aten::linear", [[tokens, k], [n, k], []], [BF16, BF16, ""],
                         dur=80.0)
        trace.op("aten::t", [[n, k]], [BF16], dur=2.0, start=outer["ts"] + 1.0)
        mm = trace.op("aten::mm", [[tokens, k], [k, n]], [BF16, BF16],
                      strides=[[k, 1], [1, k]], dur=60.0, start=outer["ts"] + 5.0)
        for index, dur in enumerate(kernels):
            trace.launch(mm, dur, external=not (reduce_by_correlation and index == 1),
                         name="sm90_xmma_gemm_bf16" if index == 0 else "splitKreduce_kernel")
        expected.setdefault((tokens, k, n), []).append(sum(kernels))

    for layer in range(2):
        norm = trace.op("aten::rms_norm", [[tokens, hidden], [], [hidden], []],
                        [BF16, "", BF16, ""], dur=30.0)
        trace.launch(norm, 4.0 + layer, name="rms_norm_kernel")
        linear(hidden, hidden, [21.0 + layer, 3.0])  # q
        linear(hidden, kv, [9.0 + layer])  # k
        linear(hidden, kv, [9.5 + layer])  # v
        sdpa = trace.op("aten::scaled_dot_product_attention",
                        [[1, 32, tokens, 128], [1, 8, tokens, 128], [1, 8, tokens, 128]],
                        [BF16, BF16, BF16], dur=40.0)
        trace.launch(sdpa, 12.0, name="flash_fwd_kernel")
        linear(hidden, hidden, [20.0 + layer, 2.5], reduce_by_correlation=True)  # o
        add = trace.op("aten::add", [[tokens, hidden], [tokens, hidden], []], [BF16, BF16,
                                                                               "Scalar"])
        trace.launch(add, 2.0, name="elementwise_kernel")
        linear(hidden, ffn, [60.0 + layer])  # gate
        linear(hidden, ffn, [61.0 + layer])  # up
        mul = trace.op("aten::mul", [[tokens, ffn], [tokens, ffn]], [BF16, BF16])
        trace.launch(mul, 3.0, name="elementwise_kernel")
        linear(ffn, hidden, [58.0 + layer, 4.0])  # down
    copy = trace.op("aten::copy_", [[tokens, hidden], [tokens, hidden], []], [BF16, BF16, ""])
    trace.launch(copy, 5.0, category="gpu_memcpy", name="Memcpy DtoD (Device -> Device)")
    return trace.write(path), expected


def npu_trace_with_shapes(sample: Path, path: Path) -> tuple[Path, float]:
    """The real trace_view.json sample with a launching operator (shapes recorded) placed
    around each `async_npu` flow's start, as a run with record_shapes writes them. Returns
    the trace and the sum of the device tasks those flows lead to."""
    events = json.loads(sample.read_text())
    starts = {e["id"]: e for e in events if e.get("cat") == "async_npu" and e["ph"] == "s"}
    ends = {(e["pid"], e["tid"], e["ts"]): e["id"] for e in events
            if e.get("cat") == "async_npu" and e["ph"] == "f"}
    device_pids = {e["pid"] for e in events if e.get("ph") == "M"
                   and e.get("name") == "process_name"
                   and (e.get("args") or {}).get("name") == "Ascend Hardware"}
    linked = 0.0
    for task in [e for e in events if e.get("ph") == "X" and e.get("cat") is None
                 and e.get("pid") in device_pids]:
        flow = ends.get((task["pid"], task["tid"], task["ts"]))
        if flow is None or flow not in starts:
            continue
        start = starts[flow]
        linked += float(task["dur"])
        events.append({"ph": "X", "cat": "cpu_op", "name": "aten::add", "pid": start["pid"],
                       "tid": start["tid"], "ts": f"{float(start['ts']) - 1.0:.3f}",
                       "dur": 2.0, "args": {"Input Dims": [[4, 8], [4, 8], []],
                                            "Input type": ["float", "float", "Scalar"]}})
    path.write_text(json.dumps(events))
    return path, linked
