"""Running one case: row -> call -> samples -> result, whatever goes wrong.

Every outcome becomes a result with a status (the row keeps its data and gets the status);
the caller decides how the pytest case ends.
"""

from __future__ import annotations

import contextlib
import math
import os
import signal
import threading
import time
import traceback
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass

import torch

from ..db.errors import CellError
from ..devices.base import Backend, CaptureError
from ..kernels.cache_state import RotationArena
from ..kernels.case import KernelCase, case_from_row
from ..kernels.implementation_options import AUTO, Unsupported, default_name, resolve_mode
from ..kernels.registry import spec_for
from ..kernels.spec import KernelSpec, Prepared, ReplaySkipped
from ..measure.floor import Floor, latency_floor
from ..measure.host import available_cores, host_load
from ..measure.method_events import measure_events
from ..measure.method_graph import measure_graph
from ..measure.method_profiler import (
    ProfilerMismatch,
    ProfilerUnavailable,
    measure_profiler,
    measure_profiler_once,
)
from ..measure.methods import Measured, Timing, first_line
from ..measure.noise import noise_reason
from ..measure.overhead import CAPTURE, INPUTS, REFERENCES, VERIFICATION, WARMUP, PartClock
from ..measure.reference import memory_sample, reference_samples, reference_us
from ..measure.result import (
    METHOD_EVENTS,
    METHOD_GRAPH,
    METHOD_PROFILER,
    PREEMPTED_REASON,
    STATUS_ERROR,
    STATUS_FAILED,
    STATUS_NOISY,
    STATUS_OK,
    STATUS_SKIPPED,
    STATUS_SUSPECT,
    STATUS_TIMEOUT,
    CaseResult,
)
from ..measure.roofline import roofline
from ..measure.sampler import CaseTimeout, SamplingPolicy
from ..measure.stats import relative_precision
from ..measure.verify import Verifier, VerifyError
from .cases import CaseRef
from .choice import choose

# A case this far past its budget says so: the last batch of samples may end a little after
# it, and a scheduler's time slice is no reason to speak.
OVER_BUDGET, OVER_BUDGET_S = 1.25, 0.25
# A case that starts this soon after the previous one ended takes that one's closing loop
# probe as its opening one (measure/reference.py): the host between the two is pytest's step
# from case to case.
PROBES_REUSED_S = 0.5
# The memory probe (a 48 MiB copy: 5-16 ms on a 2-core VM, more than a small case's own time
# beyond its calls) is taken at most this often; a probe sooner after the newest copy takes
# that copy's time: the host's memory bandwidth sampled once a second (co-tenants come and go
# over seconds), the loop probe still right before and after every case. `-k MatMul` on the
# 2-core VM: 5.8 ms of probes per case with a copy at every probe, 1.5 ms at 1 s.
MEMORY_PROBE_EVERY_S = 1.0
# CaseResult fields taken from the roofline.
ROOFLINE_FIELDS = ("bound_us", "compute_bound_us", "memory_bound_us", "memory_level",
                   "hbm_bound_us", "bound_by", "achieved_tflops", "achieved_gbps", "mfu", "mbu")


@dataclass
class RunnerOptions:
    policy: SamplingPolicy
    method: str = METHOD_EVENTS
    case_timeout_s: float | None = None
    verify: int | None = None  # --npuperf-verify: None off, 0 first case per type, N every Nth
    # Under a device profiler: record what attribution needs (result.profile).
    profiled: bool = False
    cache: str = "model"  # the cache state measured in (kernels/cache_state.py)
    impl: str = AUTO  # --npuperf-impl (replay/choice.py); auto: the device's (implementations)


@contextlib.contextmanager
def _alarm(seconds: float | None) -> Iterator[None]:
    """Interrupt a case stuck inside one call (SIGALRM, main thread only); the sampler's
    deadline check covers the rest."""
    usable = (seconds and hasattr(signal, "setitimer")
              and threading.current_thread() is threading.main_thread())
    if not usable:
        yield
        return

    def on_alarm(signum, frame):
        raise CaseTimeout(f"case timeout ({seconds:g} s) inside a call")

    previous = signal.signal(signal.SIGALRM, on_alarm)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


class CaseRunner:
    def __init__(self, backend: Backend, options: RunnerOptions) -> None:
        self.backend = backend
        backend.activate()
        self.options = options
        self.timing = Timing(backend, options.policy)  # the timing methods' tools
        self.last_samples: list[float] = []
        self._operand_dtype = ""  # the case being measured's first input dtype
        self.stack = ", ".join(f"{k} {v}" for k, v in backend.stack().items())
        # The load average is machine-wide; the cores are those this process may use.
        self.cores = len(available_cores()) if backend.kind == "cpu" else None
        self.verifier = (Verifier(options.verify, backend.synchronize)
                         if options.verify is not None else None)
        self._candidates: Verifier | None = None  # best-of checks without --npuperf-verify
        # (kernel type, implementation) that failed verification: out of later best-ofs.
        self.rejected: set[tuple[str, str]] = set()
        self._floor: Floor | None = None
        # When the current case's first measurement started (perf_counter).
        self._first_measured: float | None = None
        self._probed = 0.0  # the current case's host probes before its first measurement (s)
        # The host's newest probes, each with when it ended (time.monotonic()): the loop's
        # samples and a memory copy's time (`_references`).
        self._last_loops: tuple[float, list[float]] | None = None
        self._last_memory: tuple[float, float] | None = None
        # A CPU faults in every page of a fresh copy; device allocators keep their memory.
        self._arena = RotationArena() if backend.kind == "cpu" else None
        self._clock = PartClock()  # where the current case's time beyond its calls goes

    def close(self) -> None:
        self.timing.close()

    # -- one case -----------------------------------------------------------------------------
    def run(self, ref: CaseRef, row: Mapping[str, str], nodeid: str, file_label: str) -> CaseResult:
        """Measure one case. Never raises for the case's own faults: see result.status."""
        started = time.perf_counter()
        self.last_samples = []
        result = CaseResult(case_id=ref.case_id, nodeid=nodeid, kernel_type=ref.kernel_type,
                            file=ref.file, signature=ref.signature, row=ref.row_number,
                            method=self.options.method, device=self.backend.database_device(),
                            stack=self.stack, statistic=self.options.policy.statistic,
                            threads=torch.get_num_threads())
        self._check_load(result)
        self._clock, self._probed = PartClock(), 0.0
        result.overhead_s = self._clock.parts
        spec = spec_for(ref.kernel_type)
        if spec is None:
            result.status, result.error = STATUS_SKIPPED, f"no replay for {ref.kernel_type} yet"
            return result
        try:
            # The host's probes are the tool's time, not the case's: they take none of its
            # budget or timeout (a memory copy takes 0.1 s or more on a busy host).
            before = self._references(opening=True) if self.backend.kind == "cpu" else None
            self._probed = self._clock.parts.get(REFERENCES, 0.0)
            deadline = (time.monotonic() + self.options.case_timeout_s
                        if self.options.case_timeout_s else None)
            with _alarm(self.options.case_timeout_s):
                case = case_from_row(ref.kernel_type, row, file=file_label,
                                     row_number=ref.row_number)
                prepared, measured = self._measure_implementations(
                    ref, spec, case, deadline, result,
                    budget_end=started + self._probed + self.options.policy.budget_s)
                # The roofline's peak depends on the operands (int8/fp8 cores are faster).
                self._operand_dtype = case.input(0).dtype
            if before is not None:
                after = self._references()
                result.reference_us = reference_us(before[0], after[0])
                result.reference_memory_us = (before[1] + after[1]) / 2
            self._record(result, measured)
            self._check_budget(result, started)
            if self.options.profiled and measured.method == METHOD_EVENTS:
                self._record_profile(result, measured)
            if not self._check_preempted(result, measured):
                self._check_bound(result)
                self._check_noise(result, measured.samples)
        except CellError as exc:
            result.status, result.error = STATUS_ERROR, str(exc)
        except ReplaySkipped as exc:  # NpuOnly too: the row cannot run here, it is kept
            result.status, result.error = STATUS_SKIPPED, str(exc)
        except CaseTimeout as exc:
            result.status, result.error = STATUS_TIMEOUT, str(exc)
            self.timing.abandon_profiler_cycle()
        except Exception as exc:  # the kernel raised: the case fails, the session goes on
            result.status, result.error = STATUS_FAILED, first_line(exc)
            result.detail = traceback.format_exc()
            self.timing.abandon_profiler_cycle()
        finally:
            # Free the case's tensors (every implementation's) before the next case allocates.
            prepared = None  # noqa: F841
            self.backend.empty_cache()
        result.wall_s = time.perf_counter() - started
        return result

    def _measure_implementations(self, ref: CaseRef, spec: KernelSpec, case: KernelCase,
                                 deadline: float | None, result: CaseResult, *,
                                 budget_end: float | None = None
                                 ) -> tuple[Prepared, Measured]:
        """The case in the implementations its choice names (replay/choice.py), on one set
        of inputs; the one kept says what it ran in `result`. Each implementation still to
        measure gets an equal share of what is left of the case's budget."""
        device = self.backend.kind
        choice = choose(resolve_mode(self.options.impl, device), ref.kernel_type, device,
                        portable=spec.has_portable_path(), case_impl=ref.impl)
        names, notes = list(choice.names), [choice.note] if choice.note else []
        if choice.fastest and self.options.profiled and len(names) > 1:
            # Attribution ties one profiled range to a case: one implementation per case.
            notes.append(f"best of {len(names)} implementations needs one range per "
                         f"implementation, which the session's profiler cannot attribute: "
                         f"{names[0]} measured")
            names = names[:1]
        compared = choice.fastest and len(names) > 1
        with self._clock.part(INPUTS):
            base = spec.prepare(case, self.backend, cache=self.options.cache,
                                impl=default_name(device), arena=self._arena)
        result.flops, result.bytes = base.flops, base.bytes
        result.cache = base.rotation.describe()
        result.cold_bytes = base.rotation.cold_bytes
        done: list[tuple[Prepared, Measured, str]] = []
        self._first_measured = None
        for position, name in enumerate(names):
            if compared and (ref.kernel_type, name) in self.rejected:
                continue
            try:
                with self._clock.part(INPUTS):
                    prepared = base if name == base.impl else spec.implement(base, name, case,
                                                                             self.backend)
            except Unsupported as exc:
                notes.append(f"{name}: {exc}")
                continue
            if prepared.note:
                notes.append(prepared.note)
            if compared and prepared.impl != name:
                continue  # compiled fell back to eager: measured as itself already
            try:
                with self._clock.part(VERIFICATION):
                    verified = self._verify(spec, case, prepared, compared=compared)
            except VerifyError as exc:
                if not compared:
                    raise
                self.rejected.add((ref.kernel_type, name))
                notes.append(f"{name} left out of the best-of for {ref.kernel_type}: {exc}")
                continue
            share, now = None, time.perf_counter()
            if budget_end is not None:
                share = now + max(0.0, budget_end - now) / (len(names) - position)
            if self._first_measured is None:
                self._first_measured = now
            measured = self.measure_call(ref.case_id, prepared.call, deadline,
                                         cycle=prepared.rotation.copies, budget_end=share)
            self._clock.add(WARMUP, measured.run.warmup_s)
            self._clock.add(CAPTURE, measured.run.capture_s)
            done.append((prepared, measured, verified))
            if not choice.fastest:
                break
        if not done:
            raise ReplaySkipped("; ".join(notes) or f"no implementation of {ref.kernel_type} "
                                                    f"runs here")
        prepared, measured, verified = min(done, key=lambda d: _median(d[1].samples))
        if len(done) > 1:
            notes.append("best of " + ", ".join(f"{p.impl} {_median(m.samples):.4g} us"
                                                for p, m, _ in done))
        result.impl, result.implementation = prepared.impl, prepared.implementation
        result.verified = verified
        result.note = "; ".join(n for n in (result.note, *notes) if n)
        return prepared, measured

    def _verify(self, spec: KernelSpec, case: KernelCase, prepared: Prepared, *,
                compared: bool) -> str:
        """--npuperf-verify's check; in a best-of every implementation other than the
        device's default is checked the first time it runs a kernel type, verify or not."""
        verifier = self.verifier
        if verifier is None and compared and prepared.impl != default_name(self.backend.kind):
            if self._candidates is None:
                self._candidates = Verifier(0, self.backend.synchronize)
            verifier = self._candidates
        return verifier.check(spec, case, prepared) if verifier is not None else ""

    def measure_call(self, name: str, call: Callable[[], object],
                     deadline: float | None = None, cycle: int = 1,
                     budget_end: float | None = None) -> Measured:
        """Samples of a ready call with the session's method (and its fallbacks); the timed
        calls run inside a range named `name`. `cycle`: the call rotates through this many
        sets of inputs, all of which a captured graph must hold; `budget_end`: the
        perf_counter value the sampling stops at (measure/sampler.py). The kernel's own
        exceptions propagate."""
        timing, method = self.timing, self.options.method
        if method == METHOD_PROFILER:
            return measure_profiler(timing, name, call, deadline, timing.profiler, budget_end)
        if method != METHOD_GRAPH:
            return measure_events(timing, name, call, deadline, budget_end)
        try:
            return measure_graph(timing, name, call, deadline, self._clock, cycle, budget_end)
        except CaptureError as exc:
            fallback = f"graph capture failed ({exc})"
        # A call that cannot be captured goes to the profiler, then to events; on an NPU
        # straight to events: torch.profiler records no NPU kernels (msprof's durations
        # replace the events' where msprof wraps the session).
        if self.backend.kind == "npu":
            measured = measure_events(timing, name, call, deadline, budget_end)
        else:
            try:
                measured = measure_profiler_once(timing, name, call, deadline, budget_end)
            except (ProfilerMismatch, ProfilerUnavailable) as exc:
                fallback += f"; profiler: {exc}"
                measured = measure_events(timing, name, call, deadline, budget_end)
        measured.fallback = fallback
        return measured

    def _record_profile(self, result: CaseResult, measured: Measured) -> None:
        """What ties the profiler's kernels to this case: every call inside the range (the
        warmup calls first) launched the spec's kernels once."""
        from ..profiling.profiled import profile_record

        run = measured.run
        result.profile = profile_record(
            result.case_id, result.kernel_type, pid=os.getpid(), device=self.backend.index,
            calls=run.warmup + len(run.samples) + run.preempted, warmup=run.warmup,
            range_us=measured.range_us)

    def _references(self, *, opening: bool = False) -> tuple[list[float], float]:
        """The host's probes: the reference loop's samples and a memory copy's time. A case
        opening within PROBES_REUSED_S of the newest loop samples (the previous case's
        closing ones: only pytest's step lies between) takes them; a memory copy is taken
        at most every MEMORY_PROBE_EVERY_S, the newest one's time otherwise."""
        loops, memory = self._last_loops, self._last_memory
        with self._clock.part(REFERENCES):
            if not (opening and loops is not None
                    and time.monotonic() - loops[0] < PROBES_REUSED_S):
                samples = reference_samples()
                loops = (time.monotonic(), samples)
            if memory is None or time.monotonic() - memory[0] >= MEMORY_PROBE_EVERY_S:
                copied = memory_sample()
                memory = (time.monotonic(), copied)
        self._last_loops, self._last_memory = loops, memory
        return loops[1], memory[1]

    def _record(self, result: CaseResult, measured: Measured) -> None:
        result.method, result.fallback = measured.method, measured.fallback
        result.warmup, result.time_in_calls_s = measured.run.warmup, measured.run.time_in_calls_s
        result.stop_reason = measured.run.stop_reason
        self.last_samples = measured.samples  # all of them, for pytest-benchmark here
        if not measured.samples:  # every one preempted (_check_preempted says so)
            return
        # Of the stored samples: with the profiler they are not the ones the sampler judged.
        precision = relative_precision(measured.samples, result.statistic)
        result.precision = precision if math.isfinite(precision) else None
        result.set_samples(measured.samples)

    def _check_budget(self, result: CaseResult, started: float) -> None:
        """A case that took longer than its budget says where the time went: what it did
        before its first measurement (inputs, verification, compilation) cannot be cut
        short; the sampling stopped at the minimum of samples."""
        budget = self.options.policy.budget_s
        probed = self._clock.parts.get(REFERENCES, 0.0)  # the host's probes: not the case's
        wall = time.perf_counter() - started - probed
        if wall <= max(budget * OVER_BUDGET, budget + OVER_BUDGET_S):
            return
        before = (self._first_measured or started) - started - self._probed
        taken = result.stats.samples if result.stats is not None else 0
        over = (f"over its {budget:g} s budget: {wall:.3g} s, {before:.3g} s of it before "
                f"the first measurement (inputs, checks, compilation); {taken} samples")
        result.note = "; ".join(n for n in (result.note, over) if n)

    def _check_preempted(self, result: CaseResult, measured: Measured) -> bool:
        """Samples the host's other processes took time from are not the kernel's: too few
        undisturbed ones left, and the case is noisy, its value kept out of the database."""
        result.preempted = measured.run.preempted
        kept, needed = len(measured.samples), self.options.policy.min_samples
        if not self.options.policy.reject_preempted:
            result.preempted_kept = bool(result.preempted)
            return False
        if not result.preempted or kept >= needed:
            return False
        result.status = STATUS_NOISY
        result.error = (f"{PREEMPTED_REASON} {result.preempted} of {result.preempted + kept} samples "
                        f"lost CPU time to other processes within the budget, {kept} "
                        f"undisturbed (fewer than {needed})")
        return True

    def _check_load(self, result: CaseResult) -> None:
        if self.cores is None:
            return
        result.host_load = host_load()
        if result.host_load is not None and result.host_load > self.cores:
            result.note = (f"machine oversubscribed: 1-minute load {result.host_load:.1f} "
                           f"above the {self.cores} core(s) available")

    @staticmethod
    def _check_noise(result: CaseResult, samples: list[float]) -> None:
        if result.status != STATUS_OK:
            return
        reason = noise_reason(samples)
        if reason:
            result.status, result.error = STATUS_NOISY, reason

    def _roofline(self, peak, result: CaseResult):
        floor = self.latency_floor()
        spec = spec_for(result.kernel_type)
        return roofline(peak, result.flops, result.bytes, result.stats.median,
                        cache_bytes=self.backend.l2_cache_bytes(),
                        flushed=self.options.policy.flush_l2, operand_dtype=self._operand_dtype,
                        cold_bytes=result.cold_bytes,
                        bytes_exact=bool(spec is not None and spec.bytes_exact),
                        floor_us=floor.us if floor is not None else None,
                        floor_how=floor.how if floor is not None else "")

    def latency_floor(self) -> Floor | None:
        """The device's latency floor with the session's method (measure/floor.py), once;
        None under a profiler (its ranges belong to cases) or where it cannot be measured."""
        if self._floor is None and not self.options.profiled \
                and self.options.method != METHOD_PROFILER:
            try:
                found = latency_floor(self.backend.device, self.timing.timer, self.backend.graphs(),
                                      self.options.method)
            except Exception as exc:  # a device that cannot time a fill: no floor, say why
                found = Floor(math.nan, f"not measured: {first_line(exc)}")
            self._floor = found
        return self._floor if self._floor is not None and math.isfinite(self._floor.us) \
            else None

    def _check_bound(self, result: CaseResult) -> None:
        """The case on the device's roofline (measure/roofline.py); faster than its bound
        (less the slack): `suspect`."""
        peak = self.backend.peak()
        if peak is None or result.stats is None:
            return
        line = self._roofline(peak, result)
        if line.exact_bound_us and result.stats.min < line.slack * line.exact_bound_us \
                and self.backend.remeasure_peak():
            line = self._roofline(self.backend.peak(), result)
        for name in ROOFLINE_FIELDS:
            setattr(result, name, getattr(line, name))
        result.bound_derivation = line.derivation
        if line.exact_bound_us and result.stats.min < line.slack * line.exact_bound_us:
            result.status = STATUS_SUSPECT
            where = (f"{line.memory_level} at {line.level_gbps:.4g} GB/s"
                     if line.bound_by == "memory" and line.level_gbps else
                     f"{line.peak_tflops:.4g} TFLOP/s")
            result.error = (f"faster than the device allows: min {result.stats.min:.3f} us < "
                            f"bound {line.exact_bound_us:.3f} us ({line.bound_by}-bound, {where}) "
                            f"for {result.flops:.3g} FLOP, {result.bytes:.3g} B")
        else:
            result.status = STATUS_OK


def _median(samples: list[float]) -> float:
    """The median of unsorted samples (infinite without any: never the fastest)."""
    if not samples:
        return math.inf
    ordered = sorted(samples)
    return ordered[len(ordered) // 2]
