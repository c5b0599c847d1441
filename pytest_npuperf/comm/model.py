"""The analytic model that sanity-checks collective measurements (docs/format.md §7).

A3 constants per topology tier (bandwidth in GB/s, latency per step), link efficiency 0.7:
tier 0 196 GB/s 5.5 us, tier 1 196 GB/s 0.5 us, tier 2 224 GB/s 0.2 us. With n ranks, m bytes,
latency a and effective bandwidth b (bandwidth x efficiency):

    all_reduce      min(2(n-1)a + 2(n-1)m/(n b), 2 log2(n) a + 2m/b)
    all_gather      min((n-1)a, log2(n) a) + (n-1)m/b
    reduce_scatter  min((n-1)a, log2(n) a) + (n-1)M/(n b)
    all_to_all      min((n-1)a, log2(n) a) + m/b

`m` is the table's message_bytes, except for reduce_scatter: the model's M is the whole input
that is scattered (msmodeling's CommAnalyticModel takes the input tensor, and its simulator
divides it by n to look the table up, whose message_bytes is the per-rank output), so
M = n x message_bytes. Taking M = message_bytes would predict n times too little transfer.

A measurement passes when measured / predicted lies in [1/t, t] (t defaults to 2), warns
within [1/(2t), 2t], fails beyond. Broadcast has no model in the contract: not judged.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

EFFICIENCY = 0.7
DEFAULT_TOLERANCE = 2.0
PASS, WARN, FAIL = "PASS", "WARN", "FAIL"


@dataclass(frozen=True)
class Link:
    bandwidth_gbps: float
    latency_us: float


A3_LINKS: dict[int, Link] = {0: Link(196.0, 5.5), 1: Link(196.0, 0.5), 2: Link(224.0, 0.2)}
MODELLED_OPS = ("all_reduce", "all_gather", "reduce_scatter", "all_to_all")


def predict_us(op: str, message_bytes: float, n: int, tier: int,
               links: dict[int, Link] | None = None) -> float:
    """Predicted duration in microseconds. ValueError for an op, tier or group it cannot
    model (broadcast, a tier without constants, fewer than 2 ranks)."""
    if op not in MODELLED_OPS:
        raise ValueError(f"no analytic model for {op}")
    if n < 2:
        raise ValueError("a group of one rank communicates nothing")
    link = (links or A3_LINKS).get(tier)
    if link is None:
        raise ValueError(f"no link constants for topology tier {tier}")
    a = link.latency_us * 1e-6
    b = link.bandwidth_gbps * 1e9 * EFFICIENCY
    m = float(message_bytes)
    steps = min((n - 1) * a, math.log2(n) * a)
    if op == "all_reduce":
        seconds = min(2 * (n - 1) * a + 2 * (n - 1) * m / (n * b), 2 * math.log2(n) * a + 2 * m / b)
    elif op == "all_gather":
        seconds = steps + (n - 1) * m / b
    elif op == "reduce_scatter":
        seconds = steps + (n - 1) * (n * m) / (n * b)
    else:
        seconds = steps + m / b
    return seconds * 1e6


def verdict(ratio: float, tolerance: float = DEFAULT_TOLERANCE) -> str:
    if tolerance < 1:
        raise ValueError(f"tolerance {tolerance}: must be at least 1")
    if not math.isfinite(ratio) or ratio <= 0:
        return FAIL
    if 1 / tolerance <= ratio <= tolerance:
        return PASS
    if 1 / (2 * tolerance) <= ratio <= 2 * tolerance:
        return WARN
    return FAIL
