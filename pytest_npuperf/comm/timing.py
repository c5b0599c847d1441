"""One collective case, measured in lockstep by every rank of the job.

1. Members of the case's group allocate its buffers (once) and run the collective once. All
   ranks then agree over the control group: if every member's call raised the same error, and
   not a timeout or a closed connection, the backend refuses this op / dtype and the case is
   skipped with its words (the group stays usable: gloo and NCCL check the dtype before any
   data moves); an allocation failure, or any other raised call, fails the case.
2. Warmup calls; each member's time per call and the control barrier's cost go to rank 0,
   which picks the calls per sample k (a sample lasts at least 40 barriers, so the barrier in
   front of each sample costs at most 2.5 % of it) and the samples per round (a round, which
   ends with two control exchanges, lasts about 0.1 s). After each round
   rank 0 picks k again from the measured time per call and what a sample cost beyond its
   calls (warmup estimates are poor on a busy host).
3. Rounds: before each sample every member synchronises its device and all ranks meet at a
   barrier; a sample is k back-to-back calls timed with device events (GPU / NPU) or the host
   clock (CPU), divided by k. After each round every rank's samples go to rank 0, which applies
   the kernel cases' precision rule (measure/sampler.py) to the slowest rank's samples and
   broadcasts whether to stop: all ranks stop together.
4. The correctness check (buffers.py); every rank learns every rank's wrong count.
The case's time is the slowest rank's median (or mean); rank 0 keeps every rank's figures.
Any error of a collective or a control exchange after step 1 is a `CommFault`.
"""

from __future__ import annotations

import datetime as _dt
import math
import re
import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from ..devices.base import Backend
from ..measure.policy import SamplingPolicy
from ..measure.sampler import STOP_BUDGET, STOP_MAX_SAMPLES, STOP_PRECISION
from ..measure.stats import relative_precision
from .buffers import Buffers
from .collective_result import STATUS_FAILED, STATUS_OK, STATUS_SKIPPED, CommResult, RankTimes
from .runtime import CommFault, Fabric
from .sweep import CommPoint

ROUND_S = 0.1  # aim for a stop decision about this often
SAMPLE_MIN_US = 200.0
BARRIERS_PER_SAMPLE = 40  # a sample lasts at least this many barriers
MAX_OPS_PER_SAMPLE = 1000
MAX_ROUND = 64
_STOPS = {0: "", 1: STOP_PRECISION, 2: STOP_BUDGET, 3: STOP_MAX_SAMPLES}
_CODES = {v: k for k, v in _STOPS.items()}
ALLOC, UNSUPPORTED = "A", "U"
_FAULT_WORDS = re.compile(r"time[d ]?out|connection|closed|reset by peer|abort", re.IGNORECASE)


def _one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {text[:300]}"


@dataclass
class Plan:
    ops_per_sample: int
    samples_per_round: int


def plan(per_call_us: float, barrier_us: float, policy: SamplingPolicy) -> Plan:
    """Calls per sample and samples in the first round, from the slowest member's warmup."""
    per_call_us = per_call_us if per_call_us > 0 and math.isfinite(per_call_us) else 1.0
    target = max(SAMPLE_MIN_US, BARRIERS_PER_SAMPLE * max(barrier_us, 0.0))
    k = int(min(MAX_OPS_PER_SAMPLE, max(1, math.ceil(target / per_call_us))))
    r = next_round(k * per_call_us, 0, policy)
    return Plan(k, r)


def next_round(sample_us: float, taken: int, policy: SamplingPolicy) -> int:
    remaining = max(1, policy.max_samples - taken)
    wanted = math.ceil(ROUND_S * 1e6 / max(sample_us, 1e-3))
    return int(max(1, min(MAX_ROUND, remaining, wanted)))


def decide(samples: list[float], spent_s: float, policy: SamplingPolicy) -> tuple[str, float]:
    """The sampler's stopping rule on the slowest rank's per-call samples, `spent_s` seconds
    of timed calls so far: (reason or "", relative precision)."""
    n = len(samples)
    precision = relative_precision(samples, policy.statistic) if n else math.inf
    if n < policy.min_samples:
        return "", precision
    if n >= policy.max_samples:
        return STOP_MAX_SAMPLES, precision
    if spent_s >= policy.budget_s:
        return STOP_BUDGET, precision
    if precision <= policy.precision and spent_s >= policy.min_time_s:
        return STOP_PRECISION, precision
    return "", precision


def rank_times(rank: int, samples: list[float]) -> RankTimes:
    values = np.asarray(samples, dtype=np.float64)
    q1, median, q3 = (float(v) for v in np.percentile(values, (25, 50, 75)))
    return RankTimes(rank, median, float(values.mean()), float(values.min()),
                     float(values.max()), q1, q3, int(values.size))


def _method(device: Backend, k: int, statistic: str) -> str:
    clock = "synchronised host clock" if device.kind == "cpu" else f"{device.kind} events"
    return (f"{clock} around a batch of back-to-back calls ({k} in the last round) after a "
            f"device sync and a barrier of all ranks, per call; the slowest rank's {statistic}")


class CaseMeasurement:
    """One case on this rank. `beat` is called before each sample (the watchdog's heartbeat);
    `interrupted` returns a reason when the session must stop (SIGTERM)."""

    def __init__(self, fabric: Fabric, device: Backend, point: CommPoint,
                 policy: SamplingPolicy, *, beat: Callable[[], None] = lambda: None,
                 interrupted: Callable[[], str | None] = lambda: None) -> None:
        self.fabric, self.device, self.point, self.policy = fabric, device, point, policy
        self.beat, self.interrupted = beat, interrupted
        self.control = fabric.control
        self.channel = None
        self.buffers: Buffers | None = None
        self.result = CommResult(point, backend=fabric.backend_name, statistic=policy.statistic)
        self._spent_s = 0.0  # rank 0: seconds of timed calls of the slowest rank per round

    # -- guarded steps --------------------------------------------------------------------------
    def _control(self, what: str, step: Callable):
        self._check_interrupted()
        try:
            return step()
        except Exception as exc:
            raise CommFault(f"rank {self.fabric.rank}: {what} failed: {_one_line(exc)}") from None

    def _check_interrupted(self) -> None:
        reason = self.interrupted()
        if reason:
            raise CommFault(f"rank {self.fabric.rank}: {reason}")

    def _align(self) -> None:
        self.beat()
        if self.channel is not None:
            self.device.synchronize()
        self.control.barrier()

    # -- the case -------------------------------------------------------------------------------
    def run(self) -> CommResult:
        started = time.perf_counter()
        result = self.result
        try:
            self.channel = self._control("creating the group", lambda: self.fabric.group(
                self.point.ranks))
            if self._agree_on_support():
                # A named range per case (an mstx range on an NPU): a profiler session around
                # the run can tie the hcom_* kernels it records to this case.
                with self.device.named_range(self.point.case_id):
                    k = self._sample()
                self._check(k)
        finally:
            self.buffers = None  # free the case's memory before the next case allocates
            result.wall_s = time.perf_counter() - started
            result.finished = _dt.datetime.now().isoformat(timespec="seconds")
        return result

    def _agree_on_support(self) -> bool:
        status = ""
        if self.channel is not None:
            point = self.point
            try:
                self.buffers = Buffers(point.op, point.elements, point.dtype, self.channel,
                                       self.device.device)
                self.buffers.fill_timing()
            except Exception as exc:  # out of memory, a dtype the device lacks
                status = f"{ALLOC}rank {self.fabric.rank}: cannot allocate the buffers: " \
                         f"{_one_line(exc)}"
            else:
                try:
                    self.buffers.call()
                    self.device.synchronize()
                except Exception as exc:
                    status = f"{UNSUPPORTED}{_one_line(exc)}"
        replies = self._control("agreeing on support", lambda: self.control.all_gather_bytes(
            status.encode()))
        members = [replies[r].decode(errors="replace") for r in self.point.ranks]
        result = self.result
        allocation = [m[1:] for m in members if m.startswith(ALLOC)]
        refused = [m[1:] for m in members if m.startswith(UNSUPPORTED)]
        if allocation:
            result.status, result.error = STATUS_FAILED, "; ".join(allocation)
        elif len(refused) == len(members) and len(set(refused)) == 1 and not _FAULT_WORDS.search(
                refused[0]):
            # A backend refusing an op or dtype does so on every rank with the same words; a
            # dead or hung peer gives timeouts and closed connections (a failure, not a skip).
            result.status = STATUS_SKIPPED
            result.error = (f"{self.fabric.backend_name} does not run {self.point.op} on "
                            f"{self.point.dtype}: {refused[0]}")
        elif refused:
            failed = [f"rank {r}: {m[1:]}" for r, m in zip(self.point.ranks, members) if m]
            result.status = STATUS_FAILED
            result.error = "the first call raised: " + "; ".join(failed)
        return result.status == STATUS_OK

    def _sample(self) -> int:
        """Warmup, plan, rounds until rank 0 says stop; returns the calls per sample."""
        policy, buffers, member = self.policy, self.buffers, self.channel is not None
        warm_us = math.nan
        if member:
            def warm() -> float:
                start = time.perf_counter()
                for _ in range(max(1, policy.warmup)):
                    buffers.call()
                self.device.synchronize()
                return (time.perf_counter() - start) * 1e6 / max(1, policy.warmup)
            warm_us = self._control("warmup", warm)
        barrier_us = self._control("timing the barrier", self._barrier_cost)
        estimates = self._control("gathering warmup times", lambda: self.control.gather_floats(
            [warm_us, barrier_us]))
        first = [0, 0]
        if estimates is not None:
            slowest = max(estimates[r][0] for r in self.point.ranks)
            chosen = plan(slowest, estimates[0][1], policy)
            first = [chosen.ops_per_sample, chosen.samples_per_round]
        k, rounds = self._control("sharing the plan", lambda: self.control.broadcast_ints(first))
        self.result.warmup = max(1, policy.warmup) + 1
        samples: dict[int, list[float]] = {r: [] for r in self.point.ranks}
        timer = self.device.timer()
        while True:
            def batch(calls: int = k) -> None:
                for _ in range(calls):
                    buffers.call()

            start = time.perf_counter()
            if member:
                times = self._control("a timed round", lambda n=rounds: timer.time_calls(
                    batch, n, before_each=self._align))
                self.result.time_in_ops_s += math.fsum(times) / 1e6
                per_call = [t / k for t in times]
            else:
                for _ in range(rounds):
                    self._control("a barrier", self._align)
                times, per_call = [], [math.nan] * rounds
            # What a sample costs beyond its calls (device sync, barrier, timer): the next k
            # keeps it under a fortieth of the sample.
            overhead_us = max(0.0, (time.perf_counter() - start) * 1e6 - math.fsum(times)) / rounds
            self.result.timed_calls += rounds * k
            self.result.ops_per_sample = k
            gathered = self._control("gathering samples", lambda v=per_call: (
                self.control.gather_floats(v)))
            decision = ([0, 0, 0] if gathered is None
                        else self._decide(samples, gathered, k, overhead_us))
            code, rounds, k = self._control("sharing the stop decision", lambda v=decision: (
                self.control.broadcast_ints(v)))
            if code:
                self.result.stop_reason = _STOPS[code]
                return self.result.ops_per_sample

    def _barrier_cost(self) -> float:
        times = []
        for _ in range(3):
            start = time.perf_counter()
            self.control.barrier()
            times.append((time.perf_counter() - start) * 1e6)
        return sorted(times)[1]

    def _decide(self, samples: dict[int, list[float]], gathered: list[list[float]], k: int,
                overhead_us: float) -> list[int]:
        """Rank 0: take the round's samples; [stop code, samples next round, calls per sample]."""
        for rank in samples:
            samples[rank].extend(gathered[rank])
        self._spent_s += max(math.fsum(gathered[r]) for r in samples) * k / 1e6
        statistic = np.mean if self.policy.statistic == "mean" else np.median
        slowest = max(samples, key=lambda r: float(statistic(samples[r])))
        reason, precision = decide(samples[slowest], self._spent_s, self.policy)
        result = self.result
        result.precision = precision
        result.ranks = [rank_times(r, s) for r, s in samples.items()]
        worst = result.slowest()
        result.straggler_rank = worst.rank if worst else None
        result.samples = list(samples[slowest])  # what the history keeps and a baseline compares
        result.duration_us = result.value_of(worst) if worst else math.nan
        if reason:
            return [_CODES[reason], 0, k]
        per_call = worst.median if worst else 0.0
        following = plan(per_call, overhead_us, self.policy).ops_per_sample
        return [0, next_round(following * per_call, len(samples[slowest]), self.policy),
                following]

    def _check(self, k: int) -> None:
        mismatch = [0.0, -1.0, math.nan, math.nan]
        if self.channel is not None:
            def run_check() -> list[float]:
                self.buffers.fill_check()
                self.device.synchronize()
                self._align()
                self.buffers.call()
                self.device.synchronize()
                found = self.buffers.check()
                return [float(found.wrong), float(found.index), found.got, found.expected]
            mismatch = self._control("the correctness check", run_check)
        else:
            self._control("the correctness check", self._align)
        reports = self._control("gathering the check", lambda: self.control.all_gather_floats(
            mismatch))
        result = self.result
        result.method = _method(self.device, k, self.policy.statistic)
        result.wrong = int(sum(reports[r][0] for r in self.point.ranks))
        if not result.wrong:
            result.check = "ok: every element as expected after one more call"
            return
        bad = [(r, reports[r]) for r in self.point.ranks if reports[r][0]]
        rank, (_, index, got, expected) = bad[0]
        result.status = STATUS_FAILED
        result.check = f"{result.wrong} wrong element(s)"
        result.error = (f"wrong result: {result.wrong} element(s) differ on {len(bad)} rank(s); "
                        f"first: rank {rank} element {int(index)} is {got:g}, expected "
                        f"{expected:g}")
