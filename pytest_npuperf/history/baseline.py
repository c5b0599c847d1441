"""What a case is compared with: `--npuperf-baseline REF` and `npuperf compare BASE NEW`.

REF is one of:
- `last`: per case, its newest measurements in the history on the same device, before this
  run (per case, so that a history merged from several shard hosts, or runs of different `-k`
  selections, give every case its own latest baseline): the fastest (by median) of its
  newest DEPTH (3) trusted measurements. Noise only ever slows a measurement down: a night
  on a busy machine must not make the next one look faster, nor hide a slowdown behind a
  slow baseline;
- `last-good`: the same among runs that passed (exit status 0): a nightly job compares with
  the last good night, so a regression keeps failing until it is fixed (or accepted by a
  passing run without the baseline);
- a run id (or a unique prefix of one) in the history: that run;
- a history file (`*.sqlite`): `last` in that file;
- a run JSON (`run_<stamp>.json`, its cases carry their samples): that run.

Whichever it is, the case's session-to-session spread comes from the history (its recent
good runs, history/spread.py): a change within it is not called SLOWER or FASTER, and with
no history to take it from, no change is.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

from ..db.errors import NpuperfError
from ..measure.result import CaseResult
from .compare import NEW, Comparison, Probes, compare_many, compare_samples
from .convert import read_run_json, records_from_run_json
from .records import KIND_KERNEL, MEASURED_STATUSES, CaseRecord, RunRecord
from .spread import READ_RUNS, Spread, SpreadSource
from .store import SPREAD_EXTRA, HistoryStore, Prefetched, is_history_file

LAST, LAST_GOOD = "last", "last-good"
DEPTH = 3  # `last`: the fastest of a case's newest DEPTH measurements
TOKENS = (LAST, LAST_GOOD)


class Baseline:
    """Where baseline samples come from; `case` gives one case's, or None."""

    ref: str = ""
    label: str = ""  # says what it is, for reports

    def case(self, kind: str, key: str) -> CaseRecord | None:
        raise NotImplementedError

    def prefetch(self, kind: str, keys: list[str]) -> None:
        """Find the baselines of these cases at once (a large run's verdicts: `judge_many`);
        `case` then answers them from memory until the next prefetch. The default finds each
        when it is asked for."""
        return None

    def close(self) -> None:
        return None


class EmptyBaseline(Baseline):
    """`last` with no history yet (the first night): every case is NEW."""

    def __init__(self, ref: str, why: str) -> None:
        self.ref, self.label = ref, why

    def case(self, kind: str, key: str) -> CaseRecord | None:
        return None


# What a verdict reads of a baseline record besides its samples and run (`case`,
# `_baseline_of`, `_compared`, `probes_of`), and of its `extra`: the rest of a prefetched
# record stays unread (10^5 verdicts: 40 columns converted per record, and its `extra` parsed,
# cost seconds).
VERDICT_COLUMNS = ("status", "median_us", "stack", "bound_by")
VERDICT_EXTRA = ("cache", "impl", "reference_us", "reference_memory_us")


class HistoryBaseline(Baseline):
    """Per case, its newest measurement in a history (optionally in passed runs only)."""

    def __init__(self, ref: str, store: HistoryStore, *, device: str | None, passed_only: bool,
                 before: float | None, exclude: Iterable[str] = ()) -> None:
        self.ref, self.store = ref, store
        self.device, self.passed_only, self.before = device, passed_only, before
        self.exclude = tuple(exclude)
        self.spreads = SpreadSource(store, device=device, before=before,
                                    passed_only=passed_only, exclude=self.exclude)
        self._newest: Prefetched[CaseRecord] = Prefetched()
        which = "passed runs" if passed_only else "runs"
        where = f" on {device}" if device else ""
        self.label = (f"{ref}: per case the fastest of its {DEPTH} newest measurements in the "
                      f"{which}{where} of {store.path}")

    def prefetch(self, kind: str, keys: list[str]) -> None:
        """The baselines of these cases and their spreads' values read at once, as far as
        their verdicts need them (VERDICT_COLUMNS, VERDICT_EXTRA): a batch's records are then
        answered from memory by `case`."""
        found = self.store.verdict_reads(
            kind, keys, device=self.device, before=self.before, passed_only=self.passed_only,
            exclude=self.exclude, depth=DEPTH, values=READ_RUNS, columns=VERDICT_COLUMNS,
            extra_keys=SPREAD_EXTRA, candidate_extra=VERDICT_EXTRA) if keys else {}
        self._newest.load(kind, keys, lambda *_: {k: base for k, (base, _) in found.items()})
        self.spreads.preload(kind, keys, {k: values for k, (_, values) in found.items()})

    def case(self, kind: str, key: str) -> CaseRecord | None:
        found = self._newest.get(kind, key, lambda kind, key: self.store.latest_cases(
            kind, key, device=self.device, before=self.before, passed_only=self.passed_only,
            exclude=self.exclude, limit=DEPTH))
        trusted = [c for c in found if c.status == "ok" and c.samples and c.median_us]
        if not trusted:
            return found[0] if found else None
        best = min(trusted, key=lambda c: c.median_us)
        with_spread(best, self.spreads.of(kind, key, best))
        return best

    def close(self) -> None:
        self._newest = Prefetched()
        self.store.close()


def with_spread(record: CaseRecord, spread: Spread | None) -> CaseRecord:
    """The baseline record carries the case's spread to its verdict (and to `npuperf compare`)."""
    for name in ("run_to_run", "spread_runs", "host_spread", "own_spread"):
        record.extra.pop(name, None)
    if spread is not None:
        record.extra.update(spread.to_extra())
    return record


class RunBaseline(Baseline):
    """The cases of one run (from the history or a run JSON); their spreads from `spreads`,
    a history, when there is one."""

    def __init__(self, ref: str, run: RunRecord, cases: list[CaseRecord], where: str,
                 spreads: SpreadSource | None = None) -> None:
        self.ref, self.run = ref, run
        self.cases = {(c.kind, c.key): c for c in cases}
        self.spreads = spreads
        self.label = f"run {run.run_id} ({run.started_iso or '?'}, {run.device or '?'}) from {where}"

    def case(self, kind: str, key: str) -> CaseRecord | None:
        found = self.cases.get((kind, key))
        if found is None or found.status not in MEASURED_STATUSES:
            return None
        if not found.run_id:
            found.run_id = self.run.run_id
        return with_spread(found, self.spreads.of(kind, key, found)
                           if self.spreads is not None else None)

    def prefetch(self, kind: str, keys: list[str]) -> None:
        if self.spreads is not None:
            self.spreads.prefetch(kind, keys)

    def close(self) -> None:
        if self.spreads is not None:
            self.spreads.store.close()


def looks_like_path(ref: str) -> bool:
    return "/" in ref or "\\" in ref or ref.endswith((".json", ".sqlite", ".db"))


def resolve_baseline(ref: str, *, history: Path | None, device: str | None = None,
                     before: float | None = None, exclude: Iterable[str] = ()) -> Baseline:
    """The baseline REF names (see the module docstring); NpuperfError when it names
    nothing (an unknown run id, a missing file)."""
    ref = ref.strip()
    if not ref:
        raise NpuperfError("empty baseline reference")
    if ref in TOKENS:
        if history is None:
            raise NpuperfError(f"baseline {ref!r} needs a history (--npuperf-history is none)")
        if not Path(history).is_file():
            return EmptyBaseline(ref, f"{ref}: no history yet at {history}: every case is new")
        return HistoryBaseline(ref, HistoryStore(history, readonly=True), device=device,
                               passed_only=ref == LAST_GOOD, before=before, exclude=exclude)
    path = Path(ref)

    def spreads(store_path: Path | None) -> SpreadSource | None:
        if store_path is None or not Path(store_path).is_file():
            return None
        return SpreadSource(HistoryStore(store_path, readonly=True), device=device,
                            before=before, passed_only=False, exclude=exclude)

    if path.exists() or looks_like_path(ref):
        if not path.is_file():
            raise NpuperfError(f"baseline {ref}: no such file" if not path.exists()
                               else f"baseline {ref}: not a file")
        if is_history_file(path):
            return HistoryBaseline(ref, HistoryStore(path, readonly=True), device=device,
                                   passed_only=False, before=before, exclude=exclude)
        run, cases = records_from_run_json(read_run_json(path), path)
        return RunBaseline(ref, run, cases, str(path), spreads(history))
    if history is None or not Path(history).is_file():
        raise NpuperfError(f"baseline {ref!r}: not a file, and no history to find a run of "
                           f"that id in ({history or 'history disabled'})")
    with HistoryStore(history, readonly=True) as store:
        run = store.run(ref)
        cases = store.run_cases(run.run_id)
    return RunBaseline(ref, run, cases, str(history), spreads(history))


def resolve_run(ref: str, *, history: Path | None) -> tuple[RunRecord, list[CaseRecord]]:
    """A single run for `npuperf compare`'s NEW side: a run JSON, a run id, `last` (the
    newest run of the history), or a history file (its newest run)."""
    path = Path(ref)
    if path.exists() or looks_like_path(ref):
        if not path.is_file():
            raise NpuperfError(f"{ref}: no such file" if not path.exists() else f"{ref}: not a file")
        if not is_history_file(path):
            return records_from_run_json(read_run_json(path), path)
        history, ref = path, LAST
    if history is None or not Path(history).is_file():
        raise NpuperfError(f"{ref!r}: not a file, and no history file to look it up in "
                           f"({history or 'none given'})")
    with HistoryStore(history, readonly=True) as store:
        if ref in TOKENS:
            run = store.latest(passed_only=ref == LAST_GOOD)
            if run is None:
                raise NpuperfError(f"{history}: no {'passed ' if ref == LAST_GOOD else ''}run "
                                   f"recorded yet")
        else:
            run = store.run(ref)
        return run, store.run_cases(run.run_id)


def judge(result: CaseResult, baseline: Baseline, threshold: float,
          run_shift: tuple[float, int] | None = None) -> Comparison | None:
    """The verdict of a measured case against its baseline (None: nothing was measured);
    `run_shift`: how the session's cases judged before it moved (history/compare.py)."""
    if not result.measured or not result.samples:
        return None
    return judge_samples(KIND_KERNEL, result.case_id, result.samples, baseline, threshold,
                         run_shift=run_shift, **_judged(result))


def _judged(result: CaseResult) -> dict[str, Any]:
    """What `judge_samples` is told of a case besides its samples."""
    return {"status": result.status, "reference": result.reference_us,
            "memory": result.reference_memory_us, "bound_by": result.bound_by,
            "median": result.stats.median if result.stats else None,
            "condition": cache_mode(result.cache), "impl": result.impl or None,
            "stack": result.stack, "co_tenant": co_tenant_share(
                result.preempted, result.stats.samples if result.stats else len(result.samples))}


def co_tenant_share(preempted: int | None, kept: int) -> float:
    """The share of a measurement's samples that other processes preempted (and that were
    left out, or kept with --npuperf-preempted keep); `kept`: the samples its statistics
    count (a result keeps at most MAX_KEPT_SAMPLES of them for plots)."""
    preempted = preempted or 0
    return preempted / (preempted + kept) if preempted + kept else 0.0


JUDGED_AT_ONCE = 20_000  # `judge_many`: cases whose baselines are held in memory at once


def judge_many(results: list[CaseResult], baseline: Baseline, threshold: float
               ) -> list[Comparison | None]:
    """`[judge(r, baseline, threshold) for r in results]`, the same verdicts, with the
    baselines found and the samples compared a batch of cases at a time (10^5 cases judged at
    the end of an msprof run or a backfill: one query and one comparison at a time took most
    of a minute)."""
    found: list[Comparison | None] = [None] * len(results)
    for first in range(0, len(results), JUDGED_AT_ONCE):
        batch = [(first + i, r) for i, r in enumerate(results[first:first + JUDGED_AT_ONCE])
                 if r.measured and r.samples]
        baseline.prefetch(KIND_KERNEL, [r.case_id for _, r in batch])
        pending: list[tuple[int, tuple[list[float], list[float], dict[str, Any]]]] = []
        for index, result in batch:
            options = _judged(result)
            base = _baseline_of(KIND_KERNEL, result.case_id, result.samples, baseline,
                                threshold, options["median"], options["condition"],
                                options["impl"])
            if isinstance(base, Comparison):
                found[index] = base
            else:
                pending.append((index, (base.samples, result.samples,
                                        _compared(base, threshold, **options))))
        for (index, _), comparison in zip(pending, compare_many([p for _, p in pending])):
            found[index] = comparison
    baseline.prefetch(KIND_KERNEL, [])
    return found


def cache_mode(text: str | None) -> str:
    """The cache mode of a recorded `cache` (measurements before it was recorded ran warm)."""
    return (text or "warm").split(" ", 1)[0]


# Measurements recorded before implementations were an axis ran the device's default.
_DEFAULT_IMPLS = ("eager", "npu")


def other_impl(base: CaseRecord, impl: str | None) -> str:
    """The baseline's implementation when it is not `impl` ("" when comparable)."""
    if impl is None:
        return ""
    recorded = base.extra.get("impl")
    if recorded is None:
        return "" if impl in _DEFAULT_IMPLS else "the device's default"
    return "" if recorded == impl else str(recorded)


def judge_samples(kind: str, key: str, samples: list[float], baseline: Baseline,
                  threshold: float, *, status: str = "ok", reference: float | None = None,
                  memory: float | None = None, bound_by: str = "",
                  median: float | None = None, condition: str | None = None,
                  impl: str | None = None, run_shift: tuple[float, int] | None = None,
                  stack: str = "", co_tenant: float = 0.0) -> Comparison:
    """The verdict of a case (`kind`, `key`: a kernel replay or a collective point) whose
    `samples` were just measured; `condition`: the cache mode a kernel replay ran in, which a
    baseline measured in another one cannot judge (a cold weight is slower by design); `impl`:
    likewise the implementation that ran (a compiled kernel is faster by design);
    `reference`/`memory`: the host's probes around it; `stack`: the software stack that ran
    it (a whole run that moved on another stack than the baseline's moved with the stack);
    `co_tenant`: the share of its samples other processes preempted (`co_tenant_share`)."""
    base = _baseline_of(kind, key, samples, baseline, threshold, median, condition, impl)
    if isinstance(base, Comparison):
        return base
    return compare_samples(base.samples, samples, **_compared(
        base, threshold, status=status, reference=reference, memory=memory,
        bound_by=bound_by, run_shift=run_shift, stack=stack, co_tenant=co_tenant))


def _compared(base: CaseRecord, threshold: float, *, status: str, reference: float | None,
              memory: float | None, bound_by: str, stack: str,
              run_shift: tuple[float, int] | None = None, co_tenant: float = 0.0,
              **_: Any) -> dict[str, Any]:
    """`compare_samples`' options for a case against its baseline record."""
    if stack and base.stack and stack != base.stack:
        run_shift = None  # the stack changed: what moved every kernel is what is under test
    return {"threshold": threshold, "base_status": base.status, "new_status": status,
            "base_run": base.run_id, "spread": Spread.from_extra(base.extra),
            "probes": probes_of(base, reference, memory, bound_by), "run_shift": run_shift,
            "co_tenant": co_tenant}


def _baseline_of(kind: str, key: str, samples: list[float], baseline: Baseline,
                 threshold: float, median: float | None, condition: str | None,
                 impl: str | None) -> CaseRecord | Comparison:
    """The baseline record a case's samples are compared with, or the verdict without a
    comparison (NEW: none, or one measured under other conditions)."""
    base = baseline.case(kind, key)
    if base is None:
        return Comparison(NEW, reason=f"not measured in the baseline ({baseline.ref})",
                          new_samples=len(samples), threshold=threshold,
                          new_median_us=median)
    if condition is not None and cache_mode(base.extra.get("cache")) != condition:
        return Comparison(NEW, reason=f"the baseline run {base.run_id} measured it with the "
                                      f"cache {cache_mode(base.extra.get('cache'))}, this run "
                                      f"{condition}: not comparable",
                          new_samples=len(samples), threshold=threshold, base_run=base.run_id,
                          new_median_us=median)
    other = other_impl(base, impl)
    if other:
        return Comparison(NEW, reason=f"the baseline run {base.run_id} measured it with "
                                      f"{other}, this run {impl}: not comparable",
                          new_samples=len(samples), threshold=threshold, base_run=base.run_id,
                          new_median_us=median)
    if not base.samples:
        return Comparison(NEW, reason=f"the baseline run {base.run_id} kept no samples of it",
                          new_samples=len(samples), threshold=threshold,
                          base_run=base.run_id)
    return base


def probes_of(base: CaseRecord, reference: float | None, memory: float | None,
              bound_by: str) -> Probes:
    """The host's probes around the baseline's measurement (its record) and the new one."""
    return Probes(base.extra.get("reference_us"), reference,
                  base.extra.get("reference_memory_us"), memory, bound_by or base.bound_by)
