"""The timing methods on a CUDA GPU, against an independent CUDA-graph reference.

Runs `pytest bench -k MatMul` once per method (graph, profiler, events) and the graph method
a second time (A-A), each in a fresh process with its own output directory; then, in this
process, times every MatMul case again with an independent reference on inputs built the
same way (the row's dims): triton's `do_bench_cudagraph` (median of its replays), or, without
triton, a plain torch CUDA-graph loop of the same design (a batch of ~20 ms captured once,
replayed 10 times, one synchronisation per replay). Last, a self-check on the GPU: a call that
cannot be captured (a host synchronisation inside) must fall back to the profiler and say so,
and the next case must be graph-timed again.

Prints per method: wall time (this script's clock, and the session's from its run JSON),
duty cycle and per-case overhead (from the run JSON), the median ratio of the method's values
to the reference and their spread; the graph method's A-A drift; a compact table at the end.
Goals (issue 7): graph median ratio within [0.95, 1.05], duty cycle >= 0.8, A-A <= 1 %.
Full results go to $OUT/bench_gpu_method.json when OUT is set.

    python benchmarks/bench_gpu_method.py [-k MatMul] [--methods graph,profiler,events]

About 3-5 minutes on an H100 (the profiler run alone is about 1.5 minutes). On a machine
without a CUDA GPU it says so and exits 0.
"""

from __future__ import annotations

import argparse
import math
import shutil
import statistics
import sys
import tempfile
from pathlib import Path

from replay_runs import ROOT, drifts, fmt_pct, median, quantile, run_bench, write_out

sys.path.insert(0, str(ROOT))

REP_MS = 20  # reference: length of one replayed batch
RETRIES = 10  # reference: replays per case


def _torch_graph_reference_us(call) -> float:
    """A batch of calls of about REP_MS captured once, replayed RETRIES times, each replay
    timed with events and a synchronisation: per-call median (us)."""
    import torch

    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        call()
        torch.cuda.synchronize()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            call()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        graph.replay()
        end.record()
        torch.cuda.synchronize()
        calls = max(1, int(REP_MS / max(start.elapsed_time(end), 1e-3)))
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            for _ in range(calls):
                call()
        torch.cuda.synchronize()
        times = []
        for _ in range(RETRIES):
            start.record()
            graph.replay()
            end.record()
            torch.cuda.synchronize()
            times.append(start.elapsed_time(end) / calls)
    torch.cuda.current_stream().wait_stream(stream)
    return statistics.median(times) * 1e3


def reference_timer():
    try:
        import triton.testing as tt
    except Exception:
        return "torch CUDA-graph loop (triton not installed)", _torch_graph_reference_us

    import torch

    def triton_us(call) -> float:
        with torch.cuda.stream(torch.cuda.Stream()):  # older triton refuses the default one
            try:
                ms = tt.do_bench_cudagraph(call, rep=REP_MS, return_mode="median")
            except TypeError:  # a triton without return_mode: its mean
                ms = tt.do_bench_cudagraph(call, rep=REP_MS)
        return float(ms) * 1e3

    return "triton do_bench_cudagraph (median)", triton_us


def references(run, keyword: str = "", *, backend=None, reference=None
               ) -> tuple[str, dict[str, float], dict[str, str]]:
    """case id -> reference per-call time (us) of every measured case of `run`: on the GPU
    with `reference_timer()` unless `reference` gives another (label, timer) and `backend`
    another device (a CPU smoke run's plain loop)."""
    from pytest_npuperf.kernels.case import case_from_row
    from pytest_npuperf.kernels.registry import spec_for
    from pytest_npuperf.replay.cases import CaseCatalog

    label, timer = reference or reference_timer()
    catalog = CaseCatalog(Path(run.report["database"]["source"]))
    refs = {ref.case_id: ref for ref in catalog.cases()}
    cache = run.report["session"]["options"].get("cache") or "model"
    if backend is None:
        from pytest_npuperf.devices.cuda import CudaBackend
        backend = CudaBackend(0)
    backend.activate()
    values, errors = {}, {}
    for case_id in run.values():
        ref = refs.get(case_id)
        if ref is None:
            errors[case_id] = "not in the database any more"
            continue
        try:
            case = case_from_row(ref.kernel_type, catalog.row(ref), file=ref.file,
                                 row_number=ref.row_number)
            # The call the run timed: its cache state (the inputs it rotates) and
            # implementation, or the two timers would time different work.
            prepared = spec_for(ref.kernel_type).prepare(
                case, backend, cache=cache, impl=run.cases[case_id].get("impl") or None)
            values[case_id] = timer(prepared.call)
        except Exception as exc:  # report it, go on with the other cases
            errors[case_id] = f"{type(exc).__name__}: {exc}"
        finally:
            prepared = None
            backend.empty_cache()
    return label, values, errors


def fallback_check() -> dict:
    """On the GPU: a call with a host synchronisation cannot be captured; it must be measured
    by the profiler with the reason recorded, and the next call graph-timed again."""
    import torch

    from pytest_npuperf.devices.cuda import CudaBackend
    from pytest_npuperf.measure.sampler import SamplingPolicy
    from pytest_npuperf.replay.runner import CaseRunner, RunnerOptions

    runner = CaseRunner(CudaBackend(0), RunnerOptions(policy=SamplingPolicy(),
                                                      method="graph"))
    x = torch.randn(4096, device="cuda")
    synced = runner.measure_call("fallback-check", lambda: torch.nonzero(x))
    # What the runner does after every case: torch dies here if the failed capture left its
    # allocator believing a capture is still under way.
    runner.backend.empty_cache()
    a = torch.randn(512, 512, device="cuda", dtype=torch.bfloat16)
    after = runner.measure_call("after-fallback", lambda: torch.mm(a, a))
    runner.backend.empty_cache()
    broken = runner.backend.graphs().broken
    runner.close()
    ok = (synced.method == "profiler" and bool(synced.fallback) and after.method == "graph"
          and not broken)
    return {"ok": ok, "uncapturable_method": synced.method, "fallback": synced.fallback,
            "next_case_method": after.method, "graphs_broken": broken,
            "next_case_median_us": statistics.median(after.samples) if after.samples else None}


def ratios(run, reference: dict[str, float]) -> dict[str, float]:
    values = run.values()
    return {cid: values[cid] / reference[cid] for cid in sorted(values.keys() & reference.keys())
            if reference[cid] > 0}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-k", dest="keyword", default="MatMul")
    parser.add_argument("--methods", default="graph,profiler,events")
    args = parser.parse_args(argv)
    try:
        import torch
        has_cuda = torch.cuda.is_available()
    except Exception:
        has_cuda = False
    if not has_cuda:
        print("bench_gpu_method: no CUDA GPU on this machine; nothing measured (run it on a "
              "CUDA host).")
        return 0
    methods = [m for m in args.methods.split(",") if m]
    work = Path(tempfile.mkdtemp(prefix="bench_gpu_method_"))
    runs = {}
    try:
        common = ["-k", args.keyword, "--npuperf-device", "cuda"]
        for method in methods:
            runs[method] = run_bench(method, work / method, *common, "--npuperf-method", method)
            print(f"ran {method}: {runs[method].external_wall_s:.1f} s", flush=True)
        second = None
        if "graph" in runs:
            second = run_bench("graph (A-A)", work / "graph-2", *common, "--npuperf-method",
                               "graph")
            print(f"ran graph again: {second.external_wall_s:.1f} s", flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    basis = runs.get("graph") or next(iter(runs.values()))
    label, reference, failures = references(basis, args.keyword)
    print(f"reference ({label}): {len(reference)} cases, {len(failures)} not timed", flush=True)
    try:
        check = fallback_check()
    except Exception as exc:  # the check's own finding: report it with the rest
        check = {"ok": False, "uncapturable_method": "-", "next_case_method": "-",
                 "fallback": f"{type(exc).__name__}: {exc}"}
    return report(runs, second, label, reference, failures, check, args.keyword)


def report(runs, second, label, reference, failures, check, keyword) -> int:
    device = next(iter(runs.values())).report["session"]["device"]
    rows, per_case = [], {}
    for method, run in runs.items():
        found = ratios(run, reference)
        values = list(found.values())
        summary = run.summary()
        summary.update({"ratio_median": median(values), "ratio_p10": quantile(values, 0.1),
                        "ratio_p90": quantile(values, 0.9),
                        "ratio_min": min(values) if values else math.nan,
                        "ratio_max": max(values) if values else math.nan,
                        "compared": len(values)})
        rows.append(summary)
        per_case[method] = found
        print(f"\n{method}: {summary['measured']} measured ({summary['noisy']} noisy, "
              f"{summary['fallbacks']} fallback(s), methods {', '.join(summary['methods'])})")
        print(f"  wall {summary['external_wall_s']:.1f} s by this script, "
              f"{summary['wall_s']:.1f} s in the run JSON; {summary['in_calls_s']:.1f} s in "
              f"calls; duty cycle {summary['duty_cycle']:.2f}; overhead "
              f"{1e3 * summary['per_case_overhead_s']:.0f} ms per case = "
              f"{summary['outside_cases_s']:.1f} s outside the cases (start-up, collection, "
              f"pytest, backfill) + {1e3 * summary['in_case_overhead_s']:.0f} ms per case "
              f"inside them beyond the calls")
        if values:
            print(f"  value / reference over {len(values)} cases: median "
                  f"{summary['ratio_median']:.3f}, p10-p90 {summary['ratio_p10']:.3f}-"
                  f"{summary['ratio_p90']:.3f}, min-max {summary['ratio_min']:.3f}-"
                  f"{summary['ratio_max']:.3f}")
    aa = None
    if second is not None:
        drift = drifts(runs["graph"].values(), second.values())
        absolute = [abs(v) for v in drift.values()]
        aa = {"cases": len(drift), "median_abs_drift": median(absolute),
              "p90_abs_drift": quantile(absolute, 0.9),
              "max_abs_drift": max(absolute) if absolute else math.nan,
              "second_run": second.summary()}
    print(f"\n== {device.get('name')} ({device.get('stack')}), -k {keyword!r}; reference: "
          f"{label} ==")
    head = (f"{'method':<9} {'cases':>5} {'fallbk':>6} {'noisy':>5} {'wall ext':>9} "
            f"{'wall json':>9} {'in calls':>8} {'duty':>5} {'ovh/case':>9} {'ratio':>6} "
            f"{'p10-p90':>12}")
    print(head)
    for s in rows:
        print(f"{s['label']:<9} {s['measured']:>5} {s['fallbacks']:>6} {s['noisy']:>5} "
              f"{s['external_wall_s']:>8.1f}s {s['wall_s']:>8.1f}s {s['in_calls_s']:>7.1f}s "
              f"{s['duty_cycle']:>5.2f} {1e3 * s['per_case_overhead_s']:>7.0f}ms "
              f"{s['ratio_median']:>6.3f} {s['ratio_p10']:>5.3f}-{s['ratio_p90']:<6.3f}")
    if aa is not None:
        print(f"graph A-A: median |drift| {100 * aa['median_abs_drift']:.2f} % (goal <= 1 %), "
              f"p90 {100 * aa['p90_abs_drift']:.2f} %, max {100 * aa['max_abs_drift']:.2f} % "
              f"over {aa['cases']} cases")
    print(f"fallback check: {'ok' if check['ok'] else 'FAILED'} (uncapturable call measured "
          f"by {check['uncapturable_method']}: {check['fallback'] or '-'}; next case by "
          f"{check['next_case_method']})")
    if failures:
        print(f"reference not taken for {len(failures)} case(s): "
              + "; ".join(f"{k}: {v}" for k, v in list(failures.items())[:3]))
    path = write_out("bench_gpu_method.json", {
        "device": device, "keyword": keyword, "reference": label, "methods": rows,
        "graph_aa": aa, "fallback_check": check, "reference_failures": failures,
        "cases": {cid: {"reference_us": ref,
                        **{m: {"value_us": runs[m].values().get(cid),
                               "ratio": per_case[m].get(cid),
                               "method": runs[m].cases.get(cid, {}).get("method"),
                               "status": runs[m].cases.get(cid, {}).get("status")}
                           for m in runs}}
                  for cid, ref in reference.items()}})
    if path:
        print(f"full results: {path}")
    ratio_line = {s["label"]: fmt_pct(s["ratio_median"] - 1) for s in rows}
    print("median ratio - 1 by method: " + ", ".join(f"{k} {v}" for k, v in ratio_line.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
