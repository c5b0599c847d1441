"""The regression check on a real selection: A-A and an injected slowdown, each session a fresh
process, at the default minimum effect (5 %).

Two baseline runs of the same build are recorded in a history, a third run is compared with
them (`--npuperf-baseline last`): its verdicts should be SAME or UNCERTAIN for >= 95 % of the
cases. Then one kernel (the first GEMM of the selection, chosen by its case id) is made 1.5x
slower by a plugin that spins for half the call's own median time after it, and the run
against the same baseline must call it SLOWER.

    python benchmarks/bench_regression.py                  # -k MatMul, embedded database
    python benchmarks/bench_regression.py -k RmsNorm --device cuda
    python benchmarks/bench_regression.py -- --npuperf-threads 1   # after --: more pytest args

On a GPU run it as is (`--device cuda`): the figures there are the ones to quote.
"""

from __future__ import annotations

import collections
import os
import shutil
import sys
import tempfile
from pathlib import Path

from replay_runs import run_bench, selection_args

GOAL_QUIET = 0.95
SLOWDOWN_PLUGIN = '''
import time

from pytest_npuperf.kernels.matmul import MatMul, _layout

VICTIM = {victim!r}  # (M, K, N)
_portable_call = MatMul.portable_call


def slowed_call(self, tensors, case):
    call = _portable_call(self, tensors, case)
    layout = _layout(case)  # the canonical GEMM, as the case id names it
    if (layout.m, layout.k, layout.n) != VICTIM:
        return call
    device = next(iter(tensors.values())).device
    if device.type == "cuda":
        return _slowed_on_the_gpu(call, device)
    times = []
    for _ in range(30):
        start = time.perf_counter_ns()
        call()
        times.append(time.perf_counter_ns() - start)
    extra = sorted(times)[len(times) // 2] // 2

    def slow():
        out = call()
        end = time.perf_counter_ns() + extra
        while time.perf_counter_ns() < end:
            pass
        return out
    return slow


def _slowed_on_the_gpu(call, device):
    # Device time is what the GPU methods measure (a host spin would not be captured in a
    # graph): a spin kernel of half the call's own device time runs after it.
    import torch

    events = [torch.cuda.Event(enable_timing=True) for _ in range(2)]
    for _ in range(3):
        call()
    events[0].record()
    for _ in range(30):
        call()
    events[1].record()
    torch.cuda.synchronize()
    extra_us = events[0].elapsed_time(events[1]) * 1e3 / 30 / 2
    # The spin's cycles per microsecond, measured (the SM clock moves with load).
    probe = 100_000
    events[0].record()
    torch.cuda._sleep(probe)
    events[1].record()
    torch.cuda.synchronize()
    per_us = probe / max(events[0].elapsed_time(events[1]) * 1e3, 1e-3)
    cycles = max(1, int(extra_us * per_us))

    def slow():
        out = call()
        torch.cuda._sleep(cycles)
        return out
    return slow


def pytest_configure(config):
    MatMul.portable_call = slowed_call
'''


def verdicts(run) -> dict[str, dict]:
    return {cid: case["regression"] for cid, case in run.cases.items() if case.get("regression")}


def main(argv: list[str] | None = None) -> int:
    args = selection_args(__doc__, argv)
    work = Path(tempfile.mkdtemp(prefix="bench_regression_"))
    out = work / "out"
    common = ["-k", args.keyword, "--npuperf-device", args.device, "--npuperf-no-figures",
              *args.pytest_args]
    try:
        for label in ("A1", "A2"):
            run_bench(label, out, *common)
        again = run_bench("B", out, *common, "--npuperf-baseline", "last")
        found = verdicts(again)
        counts = collections.Counter(v["verdict"] for v in found.values())
        quiet = counts["SAME"] + counts["UNCERTAIN"]
        judged = sum(counts[v] for v in ("SAME", "UNCERTAIN", "SLOWER", "FASTER"))
        share = quiet / judged if judged else float("nan")
        print(f"A-A, -k {args.keyword!r}: {dict(counts)}; SAME or UNCERTAIN {quiet}/{judged} "
              f"= {100 * share:.1f} % (goal >= {100 * GOAL_QUIET:.0f} %: "
              f"{'met' if share >= GOAL_QUIET else 'NOT met'})")
        reasons = collections.Counter(v["reason"].split(" (")[0].split(":")[0]
                                      for v in found.values() if v["verdict"] == "UNCERTAIN")
        print(f"  UNCERTAIN because: {dict(reasons)}")
        for cid, v in sorted(found.items(), key=lambda kv: -abs((kv[1]["ratio"] or 1) - 1)):
            if v["verdict"] in ("SLOWER", "FASTER"):
                print(f"  {v['verdict']:<7} {v['ratio']:.3f}x p={v['p_value']:.2g}  {cid}")

        gemms = sorted(cid for cid in again.cases if cid.startswith(("MatMulV2-", "MatMulV3-"))
                       and again.cases[cid]["status"] == "ok")
        if not gemms:
            print("no measured GEMM in the selection: no slowdown injected")
            return 0
        victim = gemms[0]
        m, k, n = (int(x) for x in victim.split("-")[1].split("x"))
        plugin_dir = work / "plugin"
        plugin_dir.mkdir()
        (plugin_dir / "npuperf_slowdown.py").write_text(SLOWDOWN_PLUGIN.format(victim=(m, k, n)))
        os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(plugin_dir),
                                                                 os.environ.get("PYTHONPATH")]))
        slowed = run_bench("C", out, *common, "-p", "npuperf_slowdown",
                           "--npuperf-baseline", "last-good")
        found = verdicts(slowed)
        v = found.get(victim) or {}
        print(f"injected 1.5x slowdown of {victim}: {v.get('verdict')} "
              f"{(v.get('ratio') or 0):.3f}x p={v.get('p_value')} {v.get('reason') or ''}")
        others = collections.Counter(x["verdict"] for cid, x in found.items() if cid != victim)
        print(f"  the other cases of that run: {dict(others)}")
        return 0 if share >= GOAL_QUIET and v.get("verdict") == "SLOWER" else 1
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
