"""Cost of running a collective sweep as pytest cases (issue 12, item 8).

Runs, in the same invocation, on gloo with 2 ranks under torchrun:
(a) the sweep as pytest cases: `torchrun --nproc-per-node 2 -m pytest test_collectives.py`
    with the default sampling rule; its run JSON says, per case, how many calls each rank made
    (the support call, warmup, samples x calls per sample, the check) and the sweep's wall
    time (first case start to last case end, on rank 0);
(b) a plain torch.distributed loop over the same sizes making the same number of calls per size
    (allocation, then the calls back to back, no barriers, no stop rule, no check), timed from
    its first allocation to its last call on rank 0.
Prints both and their ratio. Goal: the sweep within 1.2x of the plain loop.
Whole-process times (torchrun start-up, torch import, rendezvous) are printed beside them:
they are the same fixed cost in both and not part of the goal.

    python benchmarks/bench_comm.py [--sizes 1K,...] [--ops all_reduce,all_gather] [--repeat N]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from pytest_npuperf.comm.ops import parse_size  # noqa: E402

BENCH = (ROOT / "pytest_npuperf" / "bench" / "test_collectives.py").read_text()
DEFAULT_SIZES = "1K,2K,4K,8K,16K,32K,64K,128K,256K,512K,1M,2M,4M"
TORCHRUN = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2"]

# The plain loop: the same calls the cases made, nothing else.
PLAIN = r'''
import json, sys, time
import torch
import torch.distributed as dist

plan = json.loads(sys.argv[1])
dist.init_process_group("gloo")
rank, n = dist.get_rank(), dist.get_world_size()
dist.barrier()
start = time.perf_counter()
for case in plan:
    elements = case["message_bytes"] // 4
    op = case["op"]
    inp = torch.zeros(elements if op != "reduce_scatter" else elements * n)
    out = torch.zeros(elements * n if op == "all_gather" else elements)
    if op == "all_reduce":
        call = lambda: dist.all_reduce(inp)
    elif op == "all_gather":
        call = lambda: dist.all_gather_into_tensor(out, inp)
    elif op == "reduce_scatter":
        call = lambda: dist.reduce_scatter_tensor(out, inp)
    elif op == "all_to_all":
        call = lambda: dist.all_to_all_single(out, inp)
    else:
        call = lambda: dist.broadcast(inp, 0)
    for _ in range(case["calls"]):
        call()
dist.barrier()
if rank == 0:
    print("PLAIN", time.perf_counter() - start, flush=True)
dist.destroy_process_group()
'''


def run_sweep(workdir: Path, ops: str, sizes: str) -> tuple[float, dict]:
    (workdir / "test_collectives.py").write_text(BENCH)
    out = workdir / "out"
    command = [*TORCHRUN, "-m", "pytest", "test_collectives.py", "-q", "-p", "no:cacheprovider",
               "--npuperf-comm-ops", ops, "--npuperf-comm-sizes", sizes,
               "--npuperf-comm-dtypes", "FLOAT", "--npuperf-device", "cpu",
               "--npuperf-device-name", "BENCHCPU", "--npuperf-out", str(out)]
    start = time.perf_counter()
    done = subprocess.run(command, cwd=workdir, capture_output=True, text=True)
    wall = time.perf_counter() - start
    if done.returncode != 0:
        raise SystemExit(f"the sweep failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
    runs = sorted(out.glob("BENCHCPU/hccl/*/reports/comm_run_*.json"))
    return wall, json.loads(runs[-1].read_text())


def calls_per_case(run: dict) -> list[dict]:
    plan = []
    for case in run["cases"]:
        # warmup counts the support call; + the check's call
        calls = case["warmup"] + case["timed_calls"] + 1
        plan.append({"op": case["point"]["op"], "message_bytes": case["point"]["message_bytes"],
                     "calls": calls})
    return plan


def run_plain(workdir: Path, plan: list[dict]) -> tuple[float, float]:
    script = workdir / "plain.py"
    script.write_text(PLAIN)
    start = time.perf_counter()
    done = subprocess.run([*TORCHRUN, str(script), json.dumps(plan)], cwd=workdir,
                          capture_output=True, text=True)
    wall = time.perf_counter() - start
    if done.returncode != 0:
        raise SystemExit(f"the plain loop failed:\n{done.stderr[-3000:]}")
    line = next(x for x in done.stdout.splitlines() if x.startswith("PLAIN"))
    return wall, float(line.split()[1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default=DEFAULT_SIZES)
    parser.add_argument("--ops", default="all_reduce")
    parser.add_argument("--repeat", type=int, default=1, help="pairs of runs (sweep, loop)")
    args = parser.parse_args()
    sizes = [parse_size(s) for s in args.sizes.split(",")]
    print(f"gloo, 2 ranks, ops {args.ops}, {len(sizes)} sizes {args.sizes}")
    ratios = []
    for index in range(args.repeat):
        with tempfile.TemporaryDirectory(prefix="npuperf-bench-comm-") as tmp:
            workdir = Path(tmp)
            sweep_process, run = run_sweep(workdir, args.ops, args.sizes)
            plan = calls_per_case(run)
            plain_process, plain = run_plain(workdir, plan)
        sweep = run["sweep_wall_s"]
        ratios.append(sweep / plain)
        print(f"run {index + 1}: {len(plan)} cases, {sum(c['calls'] for c in plan)} calls per "
              f"rank; sweep as pytest cases {sweep:.2f} s (process {sweep_process:.2f} s), "
              f"plain loop {plain:.2f} s (process {plain_process:.2f} s): ratio "
              f"{sweep / plain:.2f}x (goal <= 1.2x)")
    if len(ratios) > 1:
        print(f"ratio median {sorted(ratios)[len(ratios) // 2]:.2f}x, min {min(ratios):.2f}x, "
              f"max {max(ratios):.2f}x")


if __name__ == "__main__":
    main()
