"""What drawing the report's figures costs at session finish (issue 7: the duty cycle counts it).

For a realistic run (76 MatMul results, as `pytest bench -k MatMul` on the sample database, and
1,000 results with more (N, K) series than a plot shows) with bounds, baseline verdicts,
duration gaps and two collective tables: the first `draw_figures` in a fresh process (with the
imports of the figures' own modules, as a session pays them; the rest of the report package,
which a session imports anyway to write its reports, is imported before the clock starts),
the median of the next draws, and beside them a plain reference measured in the same run: the
same number of points written as one SVG polyline by a bare loop.
The ratio new / reference says what the chart layer adds over writing the points at all.

    python benchmarks/bench_figures.py [--repeat N] [--cases 76,1000]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from pytest_npuperf.history.compare import compare_samples  # noqa: E402
from pytest_npuperf.measure.result import STATUS_SUSPECT, CaseResult  # noqa: E402
from pytest_npuperf.replay.outcome import GapRow, WriteOutcome  # noqa: E402

M_VALUES = (1, 2, 4, 8, 16, 32, 48, 64, 96, 128, 192, 256, 384, 512, 768, 1024, 2048, 4096, 8192)
HCOM_HEADER = "message_bytes,num_devices,dtype,topology_tier,Duration(us),busbw_gbps\n"
PEAK_FLOPS, BANDWIDTH = 300e12, 1.6e12


def results(count: int, seed: int = 7) -> list[CaseResult]:
    """`count` MatMul cases over (N, K) pairs x M values, with everything the figures read."""
    rng = random.Random(seed)
    pairs_needed = -(-count // len(M_VALUES))
    pairs = [(512 * (1 + i % 14), 1536 * (1 + i // 14)) for i in range(pairs_needed)]
    made = []
    for index in range(count):
        n, k = pairs[index // len(M_VALUES)]
        m = M_VALUES[index % len(M_VALUES)]
        flops, nbytes = 2.0 * m * n * k, 2.0 * (m * k + n * k + m * n)
        compute, memory = flops / PEAK_FLOPS * 1e6, nbytes / BANDWIDTH * 1e6
        median = max(compute, memory) * rng.uniform(1.2, 3.0) + 2.0
        samples = [median * rng.uniform(0.97, 1.05) for _ in range(30)]
        digest = hashlib.sha256(f"{m}{n}{k}".encode()).hexdigest()[:6]
        r = CaseResult(case_id=f"MatMulV2-{m}x{k}x{n}-BF16-{digest}",
                       nodeid=f"bench/test_kernels.py::test_kernel[{index}]",
                       kernel_type="MatMulV2", file="MatMulV2.csv", signature=digest, row=index)
        r.set_samples(samples)
        r.flops, r.bytes = flops, nbytes
        r.compute_bound_us, r.memory_bound_us, r.memory_level = compute, memory, "HBM"
        r.bound_us = max(compute, memory)
        r.bound_by = "compute" if compute >= memory else "memory"
        r.achieved_tflops = flops / (r.stats.median * 1e-6) / 1e12
        r.status = STATUS_SUSPECT if index % 37 == 5 else r.status
        drift = rng.choice((1.0, 1.0, 1.0, 0.8, 1.25))
        base = [s * drift * rng.uniform(0.97, 1.03) for s in samples]
        r.regression = compare_samples(base, samples, base_run="r0").to_dict()
        made.append(r)
    return made


def outcome(cases: list[CaseResult], seed: int = 11) -> WriteOutcome:
    rng = random.Random(seed)
    gaps = [GapRow("MatMulV2", "MatMulV2.csv", r.stats.median,
                   r.stats.median * rng.lognormvariate(0, 0.4), r.case_id) for r in cases]
    return WriteOutcome(source=Path("db"), target=None, native=False, dry_run=False,
                           run_id="bench", stamp="bench", files=[], gaps=gaps)


def write_hccl(directory: Path) -> Path:
    for op in ("allReduce", "allGather"):
        lines = [HCOM_HEADER]
        for ranks in (2, 4, 8):
            for power in range(10, 31, 2):
                size = 2 ** power
                bw = 80.0 * size / (size + 2 ** 20) * ranks / 8
                lines.append(f"{size},{ranks},DT_BF16,1,{size / bw / 1e3:.3f},{bw:.4f}\n")
        (directory / f"hcom_{op}_.csv").write_text("".join(lines))
    return directory


def polyline(points: int) -> str:
    """The reference: `points` points of one series as a bare SVG polyline."""
    coords = " ".join(f"{i * 0.5:.2f},{(i * 7919) % 400 * 0.5:.2f}" for i in range(points))
    return f'<svg viewBox="0 0 750 420"><polyline points="{coords}" fill="none"/></svg>'


def measure(count: int, repeat: int, hccl: Path) -> dict[str, float]:
    """In this (fresh) process: the first draw with its imports, then the median of more."""
    cases = results(count)
    gaps = outcome(cases)
    import pytest_npuperf.report  # noqa: F401  (the reports' own imports: paid anyway)

    start = time.perf_counter()
    from pytest_npuperf.report.figures import draw_figures

    figures = draw_figures(cases, gaps, hccl)
    first = time.perf_counter() - start
    draws, references = [], []
    # Points the figures hold: GEMM lines, two roofline scatters, regression scatter, gaps.
    points = 4 * count + 66
    for _ in range(repeat):
        start = time.perf_counter()
        draw_figures(cases, gaps, hccl)
        draws.append(time.perf_counter() - start)
        start = time.perf_counter()
        polyline(points)
        references.append(time.perf_counter() - start)
    return {"first_s": first, "draw_s": statistics.median(draws),
            "reference_s": statistics.median(references), "figures": len(figures),
            "svg_bytes": sum(len(s) for s in figures.values())}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5, help="draws after the first (default 5)")
    parser.add_argument("--cases", default="76,1000", help="result counts, comma-separated")
    parser.add_argument("--one", type=int, help=argparse.SUPPRESS)  # the measuring child
    parser.add_argument("--hccl", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one is not None:
        print(json.dumps(measure(args.one, args.repeat, args.hccl)))
        return 0
    with tempfile.TemporaryDirectory(prefix="bench_figures_") as tmp:
        hccl = write_hccl(Path(tmp))
        for count in (int(c) for c in args.cases.split(",")):
            # A fresh process per size: the first draw pays the imports, as a session does.
            proc = subprocess.run([sys.executable, __file__, "--one", str(count), "--repeat",
                                   str(args.repeat), "--hccl", str(hccl)],
                                  capture_output=True, text=True)
            if proc.returncode != 0:
                raise SystemExit(f"measuring {count} results failed:\n{proc.stderr[-2000:]}")
            got = json.loads(proc.stdout.splitlines()[-1])
            print(f"{count} results: {got['figures']} figures, {got['svg_bytes'] / 1e3:.0f} kB "
                  f"of SVG; first draw (imports included) {got['first_s'] * 1e3:.1f} ms, "
                  f"next draws median {got['draw_s'] * 1e3:.1f} ms; reference (the same "
                  f"points as one bare polyline) {got['reference_s'] * 1e3:.2f} ms, "
                  f"ratio {got['draw_s'] / got['reference_s']:.1f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
