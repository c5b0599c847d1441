"""Does the host reference loop (measure/reference.py) see the machine's slow stretches?

On a shared CPU the same small GEMM, same buffers, same process, switches between speeds
(1.5x and more on the 2-core VM of issue 13) for a second or more at a time: a sibling
hyperthread, a neighbour, the clock. Every sample of a case measured in such a stretch shifts,
so the verdict against a baseline relies on the reference loop timed around each case to tell
a slow machine from a slow kernel. This script times, interleaved over `--seconds`, the
MatMulV2 replay of one small GEMM (`torch.mm(a, b.t(), out=o)`, one thread; median of 100
calls), the product's reference loop (median of its samples), and an independent reference
in the same run: a numpy float32 matmul of the same size (another BLAS, no torch).

The loop is compute-bound; a GEMM whose weights stream from main memory (`--npuperf-cache
model`) slows down with the memory bandwidth co-tenants leave, which the loop does not see
(issue 29). So a second GEMM, small-M bf16 (`--streamed`, 2x5120x320) cycling through enough
copies of its weight to leave the caches, is timed too, with the product's memory probe (a
copy from main memory) and an independent one (numpy copying arrays of the same size).

A GEMM point is slow when it is over 1.15x the run's median; a reference flags a point when
it is over 1.10x its own median (the verdict's HOST_TOLERANCE). Printed per reference: the
share of slow GEMM points it flags (recall), the share of its flags on points that were not
slow, and the correlation.

    python benchmarks/bench_reference.py [--seconds 40] [--shape 32x128x128]
                                         [--streamed 2x5120x320] [--stream-mib 256]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from pytest_npuperf.history.compare import HOST_TOLERANCE
from pytest_npuperf.measure.reference import MEMORY_BYTES, memory_sample, reference_samples

SLOW = 0.15


def median_us(call, n: int = 100) -> float:
    times = []
    for _ in range(n):
        start = time.perf_counter_ns()
        call()
        times.append(time.perf_counter_ns() - start)
    return statistics.median(times) / 1e3


def stretches(slow: np.ndarray) -> list[int]:
    """Lengths of the runs of consecutive slow points."""
    found, length = [], 0
    for flag in slow:
        if flag:
            length += 1
        elif length:
            found.append(length)
            length = 0
    return found + ([length] if length else [])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=40.0)
    parser.add_argument("--shape", default="32x128x128", help="MxKxN of the GEMM")
    parser.add_argument("--streamed", default="2x5120x320",
                        help="MxKxN of the bf16 GEMM whose weight streams from memory")
    parser.add_argument("--stream-mib", type=int, default=256,
                        help="MiB of weight copies it cycles through")
    args = parser.parse_args()
    m, k, n = (int(v) for v in args.shape.split("x"))
    torch.set_num_threads(1)
    a, b, out = torch.randn(m, k), torch.randn(n, k), torch.empty(m, n)
    na = np.random.default_rng(0).random((m, k), dtype=np.float32)
    nb = np.random.default_rng(1).random((k, n), dtype=np.float32)
    nout = np.empty((m, n), dtype=np.float32)
    sm, sk, sn = (int(v) for v in args.streamed.split("x"))
    sa = torch.randn(sm, sk, dtype=torch.bfloat16)
    weight = torch.randn(sn, sk, dtype=torch.bfloat16)
    copies = [weight.clone() for _ in range(max(2, (args.stream_mib << 20)
                                                // (weight.numel() * 2)))]
    turn = iter(range(1 << 62))

    def streamed():
        torch.mm(sa, copies[next(turn) % len(copies)].t())

    source = np.ones(MEMORY_BYTES // 4, dtype=np.float32)
    target = np.empty_like(source)

    def numpy_copy_us() -> float:
        begin = time.perf_counter_ns()
        np.copyto(target, source)
        return (time.perf_counter_ns() - begin) / 1e3

    rows = []
    start = time.perf_counter()
    end = start + args.seconds
    while time.perf_counter() < end:
        rows.append((median_us(lambda: torch.mm(a, b.t(), out=out)),
                     median_us(streamed, 20),
                     statistics.median(reference_samples()),
                     statistics.median(memory_sample() for _ in range(2)),
                     median_us(lambda: np.matmul(na, nb, out=nout)),
                     statistics.median(numpy_copy_us() for _ in range(2))))
    points = np.array(rows)
    period_ms = 1e3 * (time.perf_counter() - start) / len(points)
    print(f"torch {torch.__version__}, numpy {np.__version__}, 1 thread; {len(points)} points "
          f"of {period_ms:.1f} ms over {args.seconds:g} s; memory probes copy "
          f"{MEMORY_BYTES >> 20} MiB; streamed GEMM cycles {len(copies)} weight copies")
    for label, gemm_column, columns in (
            (f"GEMM {args.shape} fp32 (warm)", 0,
             (("product reference loop", 2), ("numpy matmul (independent)", 4))),
            (f"GEMM {args.streamed} bf16 (weight streamed)", 1,
             (("product memory copy", 3), ("numpy copy (independent)", 5),
              ("product reference loop", 2)))):
        gemm = points[:, gemm_column]
        slow = gemm > (1 + SLOW) * np.median(gemm)
        runs = stretches(slow)
        print(f"{label}: median {np.median(gemm):.1f} us, p95/p5 "
              f"{np.percentile(gemm, 95) / np.percentile(gemm, 5):.2f}x; slow points "
              f"(> {1 + SLOW:.2f}x the median): {100 * slow.mean():.1f} %, in {len(runs)} "
              f"stretch(es), longest {max(runs, default=0) * period_ms:.0f} ms")
        for name, column in columns:
            values = points[:, column]
            flagged = values > (1 + HOST_TOLERANCE) * np.median(values)
            recall = (flagged & slow).sum() / max(1, slow.sum())
            false = (flagged & ~slow).sum() / max(1, flagged.sum())
            corr = float(np.corrcoef(gemm, values)[0, 1])
            print(f"  {name:>28}: flags {100 * recall:5.1f} % of the slow points; "
                  f"{100 * false:5.1f} % of its flags on points that were not slow; "
                  f"correlation {corr:.2f}")


if __name__ == "__main__":
    main()
