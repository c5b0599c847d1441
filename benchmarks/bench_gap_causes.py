"""Why a replay and the same kernel inside the model differ on a CPU: each candidate cause
measured on its own, in one process, so every figure shares the host's conditions.

bench_model_loop.py compares a replay (its preempted samples dropped, median of the rest)
with in-model times (every call of the profile, its waits for a CPU included), taken minutes
apart. On a shared host that comparison mixes the kernels with the host. This script takes
them apart, for a transformers Llama forward (random weights, fp32, one thread):

- (a) the profiler's own cost: the forward's thread CPU time (immune to preemption) with
  torch.profiler and npuperf's module ranges on, over the same without them;
- (b) the host's: per traced step its wall, its thread CPU time, the run-queue delay Linux
  counts for the thread, and the operator time the trace holds: wall - wait is the CPU time
  (one thread), and the trace's operator time holds the wait;
- (c) the implementation, strides and cache state: SwiGlu (act(gate) * up) and the up
  projection's GEMM as the replay runs them (the product's kernel specs, from the rows the
  parse made) against the same work inside the model (its MLP timed call by call, no
  profiler), as thread CPU time, interleaved so that both see the same host. The replay's
  SwiGlu reads a (1, T, 2I) tensor chunked in halves (strided views); the model's gate and
  up are two contiguous tensors: both are timed in the replay too.

    python benchmarks/bench_gap_causes.py [--tokens 256] [--hidden 1024] [--layers 2]
        [--rounds 5]

Run it with OMP_NUM_THREADS=1 (the script sets one intra-op thread itself). Every figure is
printed with the host's load.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))


def _load() -> str:
    try:
        return f"{os.getloadavg()[0]:.2f}"
    except OSError:
        return "?"


def _model(tokens: int, hidden: int, layers: int):
    import torch
    import transformers

    config = transformers.LlamaConfig(
        hidden_size=hidden, num_hidden_layers=layers, num_attention_heads=hidden // 64,
        num_key_value_heads=hidden // 64, intermediate_size=hidden * 43 // 4,
        vocab_size=32000, max_position_embeddings=max(512, tokens))
    torch.manual_seed(0)
    model = transformers.LlamaForCausalLM(config).eval()
    return model, torch.randint(0, config.vocab_size, (1, tokens)), config


class _Clock:
    """Wall, thread CPU time and the run-queue delay of the process's threads, around a call."""

    def __init__(self) -> None:
        from pytest_npuperf.devices.preemption import RunQueueDelay

        self.queue = RunQueueDelay() if RunQueueDelay.available() else None
        if self.queue is not None:
            self.queue.refresh()

    def __call__(self, call) -> tuple[float, float, float]:
        waited = self.queue.waited_ns(main_first=False) if self.queue is not None else 0
        wall, cpu = time.perf_counter_ns(), time.thread_time_ns()
        call()
        cpu, wall = time.thread_time_ns() - cpu, time.perf_counter_ns() - wall
        waited = (self.queue.waited_ns(main_first=True) - waited) if self.queue is not None \
            else float("nan")
        return wall / 1e3, cpu / 1e3, waited / 1e3


def profiler_cost(model, ids, rounds: int, clock: _Clock, work: Path):
    """(a) and (b): the forward without and with the profiler; the trace's operator time."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    from pytest_npuperf.ingest.trace_rows import trace_rows
    from pytest_npuperf.kernels.module_kinds import STEP_RANGE, load_kinds
    from pytest_npuperf.kernels.torch_ops import TorchOperators
    from pytest_npuperf.profiling.module_ranges import module_ranges

    def forward():
        with torch.no_grad():
            model(ids)
    forward()
    plain, traced = [], []
    kinds = load_kinds()
    # Interleaved, a profiler session per round (its start and export outside the clock), so
    # that a host whose load drifts weighs on both sides alike.
    for index in range(rounds):
        plain.append(clock(forward))
        with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof, \
                module_ranges(kinds):
            def step(index=index):
                with torch.autograd.profiler.record_function(f"{STEP_RANGE}{index}"):
                    forward()
            traced.append(clock(step))
    path = work / "trace.json"
    prof.export_chrome_trace(str(path))
    _, summary = trace_rows(path, TorchOperators(), kinds)
    return plain, traced, summary.total_us, path  # the last round's step


def _median(rows, i):
    return statistics.median(r[i] for r in rows)


def kernels(model, ids, config, rounds: int, clock: _Clock, trace: Path):
    """(c): in-model SwiGlu and up-projection GEMM against the replay's calls of their rows."""
    import torch

    from pytest_npuperf.devices.cpu import CpuBackend
    from pytest_npuperf.ingest.trace_rows import trace_rows
    from pytest_npuperf.kernels.cache_state import RotationArena
    from pytest_npuperf.kernels.case import case_from_row
    from pytest_npuperf.kernels.registry import spec_for
    from pytest_npuperf.kernels.torch_ops import TorchOperators

    rows, _ = trace_rows(trace, TorchOperators())
    tokens, inter, hidden = ids.shape[1], config.intermediate_size, config.hidden_size

    backend = CpuBackend()
    arena = RotationArena()

    def replay_call(kernel_type: str, shapes: str):
        """The call as the replay prepares it: the row's inputs, strides and cache state
        (`--npuperf-cache model`: a GEMM's weight rotated cold), the device's default
        implementation."""
        found = rows[(rows["Type"] == kernel_type) & (rows["Input Shapes"] == shapes)]
        if not len(found):
            raise SystemExit(f"no {kernel_type} row of {shapes} in the trace")
        row = {k: v for k, v in found.iloc[0].to_dict().items() if isinstance(v, str)}
        prepared = spec_for(kernel_type).prepare(case_from_row(kernel_type, row), backend,
                                                 cache="model", arena=arena)
        print(f"    replay of {kernel_type} {shapes}: {prepared.implementation}, cache "
              f"{prepared.rotation.describe()}")
        return prepared.call

    swiglu = replay_call("SwiGlu", f"1,{tokens},{2 * inter}")
    gemm = replay_call("MatMulV2", f"{tokens},{hidden};{inter},{hidden}")
    gate = torch.randn(1, tokens, inter)
    up = torch.randn(1, tokens, inter)
    act = torch.nn.functional.silu

    mlp_class = type(model.model.layers[0].mlp)
    original = mlp_class.forward
    seen: dict[str, list] = {"swiglu": [], "gemm": []}

    def timed(self, x):
        g = self.gate_proj(x)
        u = None

        def up_call():
            nonlocal u
            u = self.up_proj(x)
        a = None
        m = None

        def act_call():
            nonlocal a
            a = self.act_fn(g)

        def mul_call():
            nonlocal m
            m = a * u
        seen["gemm"].append(clock(up_call))
        first, second = clock(act_call), clock(mul_call)
        seen["swiglu"].append(tuple(f + s for f, s in zip(first, second)))
        return self.down_proj(m)

    replayed: dict[str, list] = {"swiglu": [], "pair": [], "gemm": []}
    mlp_class.forward = timed
    try:
        for _ in range(rounds):
            with torch.no_grad():
                model(ids)
            for _ in range(config.num_hidden_layers):
                replayed["swiglu"].append(clock(swiglu))
                replayed["pair"].append(clock(lambda: act(gate) * up))
                replayed["gemm"].append(clock(gemm))
    finally:
        mlp_class.forward = original
    return seen, replayed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, default=256)
    parser.add_argument("--hidden", type=int, default=1024)
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args(argv)
    try:
        import transformers  # noqa: F401
    except ImportError:
        print("transformers is not installed (pip install -e .[test]): nothing to measure")
        return 0
    import torch

    torch.set_num_threads(1)
    clock = _Clock()
    model, ids, config = _model(args.tokens, args.hidden, args.layers)
    print(f"Llama forward, {args.layers} layers, hidden {args.hidden}, {args.tokens} tokens, "
          f"fp32, 1 thread; load {_load()}")
    with tempfile.TemporaryDirectory(prefix="bench_gap_causes_") as work:
        plain, traced, op_us, trace = profiler_cost(model, ids, args.rounds, clock, Path(work))
        print(f"(a) the profiler's cost: thread CPU time of a forward with the profiler and "
              f"module ranges / without {_median(traced, 1) / _median(plain, 1):.3f} "
              f"({_median(plain, 1) / 1e3:,.1f} ms without); load {_load()}")
        print("(b) the host's: per traced step (ms)")
        for wall, cpu, waited in traced:
            print(f"      wall {wall / 1e3:9.1f}  thread CPU {cpu / 1e3:9.1f}  waited for a CPU "
                  f"{waited / 1e3:9.1f}  wall - waited {(wall - waited) / 1e3:9.1f}")
        wall, _, waited = traced[-1]
        print(f"    the last step's operator time in its trace {op_us / 1e3:,.1f} ms: / wall "
              f"{op_us / wall:.3f}, / (wall - waited) {op_us / (wall - waited):.3f}; its wait "
              f"is {waited / wall:.1%} of its wall; load {_load()}")
        seen, replayed = kernels(model, ids, config, args.rounds, clock, trace)
    print("(c) thread CPU time, median us (wall in brackets), interleaved model / replay")
    for what, model_key, replay_key in (
            ("SwiGlu, replay of the row (chunked x)", "swiglu", "swiglu"),
            ("SwiGlu, two contiguous tensors", "swiglu", "pair"),
            ("GEMM up projection", "gemm", "gemm")):
        m_cpu, r_cpu = _median(seen[model_key], 1), _median(replayed[replay_key], 1)
        m_wall, r_wall = _median(seen[model_key], 0), _median(replayed[replay_key], 0)
        print(f"    {what:<38} in model {m_cpu:9.1f} ({m_wall:9.1f})  replay {r_cpu:9.1f} "
              f"({r_wall:9.1f})  replay / in-model CPU {r_cpu / m_cpu:.3f}, wall "
              f"{r_wall / m_wall:.3f}")
    print(f"load at the end {_load()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
