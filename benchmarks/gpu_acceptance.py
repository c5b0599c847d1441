"""Every GPU claim of the project in one prepared run: the GPU acceptance table.

One command for a lent H100 or H200 (the GPU image, this project installed with --no-deps):

    python3 benchmarks/gpu_acceptance.py --out DIR

It runs five stages, each one by calling the benchmark that owns the claim, each in a child
process of its own with its own time limit (a stage that fails or runs out of time is
reported, and the next one runs):

- reference: `pytest bench` with the graph method over the embedded database's MatMul rows
  and a few grid rows no test has seen (Llama-3-70B shapes), each case timed again by triton's
  `do_bench_cudagraph` (bench_gpu_method): median ratio, goal within [0.99, 1.01];
- session: the whole embedded database as users replay it: wall time, duty cycle (goal >= 0.9),
  per-case overhead beyond the timed calls (bench_harness (g), goal <= 10 ms), and the wall time
  against a plain `do_bench_cudagraph` loop over the same rows (bench_vs_loop, goal <= 1.0x);
- impls: memory-bound kernel types at >= 64 MiB, eager against the best implementation, and
  the share of the HBM bound reached (goal >= 60 %); FusedInferAttentionScore prefill of
  >= 8k tokens, share of peak FLOP/s (goal >= 45 %); valid rows flagged suspect (goal 0)
  (bench_implementations);
- fidelity: a transformers Llama (random weights, 2 layers, bf16, eager), prefill 1x1024 and a
  decode-shaped step of 16x1, profiled with `npuperf profile`, parsed, replayed in the default
  cache state and predicted with `npuperf predict` (bench_model_loop): GEMM median |gap| <= 3 %,
  every GEMM <= 10 %, predicted / measured within 3 %, the mapped share as measured;
- tests: `pytest tests -n 8` on the GPU host (quick tests, then the slow ones if time is
  left): failures listed, goal 0.

After each stage DIR/gpu_acceptance.md (the table) and DIR/gpu_acceptance.json are written
again: a run cut short keeps what it measured. Every figure has a goal and a verdict (pass,
fail, or n/a / reported with the reason). The whole run is sized for 8 minutes on one GPU.

`--smoke` runs every stage on this machine's CPU at tiny sizes with CPU references (a plain
timed loop instead of do_bench_cudagraph, the CPU's measured peaks), the test-suite stage
skipped, in under a minute: its verdicts say nothing about a GPU; it keeps the script working.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import resource
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from argparse import Namespace
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from xml.etree import ElementTree

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(ROOT))

SCHEMA = "npuperf-gpu-acceptance/1"
STAGES = ("reference", "session", "impls", "fidelity", "tests")
# Seconds per stage on a GPU and for the whole run (the 8 minutes, less the margin
# the last stage's clean-up needs); a stage gets at most what the run has left.
LIMITS_S = {"reference": 80, "session": 130, "impls": 100, "fidelity": 90, "tests": 150}
TOTAL_S = 470.0
SMOKE_LIMITS_S = {"reference": 25, "session": 25, "impls": 25, "fidelity": 40, "tests": 5}
SMOKE_TOTAL_S = 58.0

# Goals (the issues that made each claim).
REFERENCE_RANGE = (0.99, 1.01)
GOAL_DUTY, GOAL_OVERHEAD_S, GOAL_WALL_RATIO = 0.9, 0.010, 1.0
GOAL_HBM_SHARE, GOAL_FIA_MFU, LARGE_BYTES, FIA_TOKENS = 0.60, 0.45, 64 << 20, 8192
GOAL_GEMM_MEDIAN, GOAL_GEMM_WORST, GOAL_PREDICTION = 0.03, 0.10, 0.03

MEMORY_TYPES = ("Add", "RmsNorm", "AddRmsNormBias", "SwiGlu", "SoftmaxV2", "DynamicQuant",
                "AscendQuantV2", "InterleaveRope")
FIA = "FusedInferAttentionScore"
UNSEEN_MODELS, UNSEEN_SEED = "llama-3-70b", 31  # grid rows no test replays
# Smoke runs: a tiny sampling policy (the stages check plumbing, not precision).
SMOKE_POLICY = ("--npuperf-min-time", "0.002", "--npuperf-budget", "0.03",
                "--npuperf-min-samples", "3", "--npuperf-warmup", "1",
                "--npuperf-warmup-time", "0", "--npuperf-threads", "1",
                "--npuperf-preempted", "keep")
SMOKE_IMPLS = "not compiled"
SMOKE_SESSION_TYPES = ("MatMulV2", "RmsNorm", "SwiGlu", "Add", "SoftmaxV2")
QUIET = ("--npuperf-table", "none", "--npuperf-model-profile", "off")


# -- figures and the stage's record --------------------------------------------------------------
class Recorder:
    """One stage's figures, written to its file after each one (a killed stage keeps them)."""

    def __init__(self, path: Path, stage: str) -> None:
        self.path = path
        self.data: dict = {"stage": stage, "figures": [], "details": {}, "device": None}
        self.save()

    def save(self) -> None:
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(_json(self.data))
        tmp.replace(self.path)

    def figure(self, name: str, value, unit: str, goal: str, ok: bool | None,
               reason: str | None = None) -> None:
        """A figure and its verdict: pass/fail when `ok` is known, else n/a (no value) or
        reported (no goal), each with its reason."""
        finite = isinstance(value, (int, float)) and math.isfinite(value)
        if ok is not None and finite:
            verdict = "pass" if ok else "fail"
        elif not finite:
            verdict, reason = "n/a", reason or "not measured"
        else:
            verdict, reason = "reported", reason or "no goal"
        self.data["figures"].append({"figure": name, "value": value if finite else None,
                                     "unit": unit, "goal": goal, "verdict": verdict,
                                     "reason": reason})
        self.save()

    def step(self, text: str) -> None:
        """A progress line in the stage's log (the last ones explain a stage that timed out)."""
        print(f"{time.strftime('%H:%M:%S')} {text}", flush=True)

    def detail(self, key: str, value) -> None:
        self.data["details"][key] = value
        self.save()


def _finite(value):
    """`value` with every NaN or infinity made null (strict JSON, readable by any tool)."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {str(k): _finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    return value


def _json(data: dict) -> str:
    return json.dumps(_finite(data), indent=1, default=str, allow_nan=False)


@dataclass
class Context:
    smoke: bool
    device: str  # cpu or cuda
    work: Path
    deadline: float  # time.monotonic() by which the stage must end

    def left(self) -> float:
        return max(1.0, self.deadline - time.monotonic())

    @property
    def policy(self) -> tuple[str, ...]:
        return SMOKE_POLICY if self.smoke else ()


def _ratio_goal(lo: float, hi: float) -> tuple[str, object]:
    return f"in [{lo:g}, {hi:g}]", lambda v: lo <= v <= hi


def _median(values) -> float:
    values = [v for v in values if v is not None and math.isfinite(v)]
    return statistics.median(values) if values else math.nan


# -- scratch databases built from the embedded one and the grid ----------------------------------
def embedded_subset(dest: Path, wanted, keep: int | None = None) -> list[str]:
    """Copies the embedded database's tables whose kernel type `wanted(name)` accepts into
    `dest`; with `keep`, only each table's `keep` smallest rows (by bytes touched)."""
    from pytest_npuperf.harness.options import DEFAULT_DB

    dest.mkdir(parents=True, exist_ok=True)
    names = []
    for table in sorted(Path(DEFAULT_DB).glob("*.csv")):
        if wanted(table.stem):
            shutil.copy2(table, dest / table.name)
            names.append(table.stem)
    if keep is not None:
        select_rows(dest, lambda kind, case: True, keep)
    return names


def add_grid_rows(db: Path, kernels: str, rows: int, *, seed: int, max_hbm_gb: float,
                  models: str) -> None:
    """`npuperf grid` rows of `models` added to `db`: up to `rows` per kernel type (0: every
    candidate within `max_hbm_gb`), none whose signature `db` already holds."""
    from pytest_npuperf.grid import run_grid

    run_grid(db, kernels, target_models=models, rows=rows, seed=seed, max_hbm_gb=max_hbm_gb,
             show_progress=False)


def select_rows(db: Path, keep_row, limit: int | None) -> dict:
    """Rewrites each table of the scratch database `db` to the rows `keep_row(kernel type,
    case)` accepts, at most `limit` of them, the smallest by bytes touched (the quickest to
    build): kernel type -> rows kept."""
    from pytest_npuperf.db.table import read_table, write_table
    from pytest_npuperf.kernels.case import case_from_row

    kept = {}
    for path in sorted(db.glob("*.csv")):
        frame = read_table(path)
        sizes = {}
        for index, row in frame.iterrows():
            try:
                case = case_from_row(path.stem, row.to_dict())
            except Exception:  # a row the replay could not read either: not one to keep
                continue
            if keep_row(path.stem, case):
                sizes[index] = case.io_bytes
        chosen = sorted(sizes, key=sizes.get)[:limit]
        write_table(frame.loc[sorted(chosen)], path)
        kept[path.stem] = len(chosen)
    return kept


def _db_dir(root: Path) -> Path:
    from replay_runs import DEVICE_DIR

    return root / DEVICE_DIR


def _case_ids(db: Path) -> set[str]:
    from pytest_npuperf.replay.cases import CaseCatalog

    return {ref.case_id for ref in CaseCatalog(db).cases()}


def _bench(label: str, ctx: Context, out: Path, db: Path, *extra: str):
    from replay_runs import run_bench

    return run_bench(label, out, "--npuperf-db", str(db), "--npuperf-device", ctx.device,
                     *QUIET, *ctx.policy, *extra, timeout_s=ctx.left())


# -- the stages -----------------------------------------------------------------------------------
def stage_reference(rec: Recorder, ctx: Context) -> None:
    """The graph method (CPU: the session's default) against an independent reference."""
    import bench_gpu_method

    db = _db_dir(ctx.work / "reference")
    embedded_subset(db, lambda name: "MatMul" in name, keep=1 if ctx.smoke else None)
    embedded = _case_ids(db)
    rows = len(embedded)
    # Unseen rows: MatMulV2 shapes of a model the embedded database does not hold.
    add_grid_rows(db, "MatMulV2", 2 if ctx.smoke else 6, seed=UNSEEN_SEED,
                  max_hbm_gb=0.01 if ctx.smoke else 2.0, models=UNSEEN_MODELS)
    unseen = _case_ids(db) - embedded
    rec.detail("rows", {"embedded": rows, "unseen_grid": len(unseen)})
    rec.step(f"pytest bench: {rows} embedded MatMul rows, {len(unseen)} unseen grid rows")
    method = () if ctx.device == "cpu" else ("--npuperf-method", "graph")
    run = _bench("reference", ctx, ctx.work / "reference_out", db, *method)
    values = run.values()
    rec.step(f"{len(values)} cases measured in {run.external_wall_s:.1f} s; the reference")
    if ctx.device == "cuda":
        found = bench_gpu_method.references(run)
    else:
        from bench_vs_loop import _cpu_timer

        from pytest_npuperf.devices.cpu import CpuBackend

        threads = run.report["session"].get("threads") or 1
        backend = CpuBackend(0)
        backend.share(threads)
        label, timed = _cpu_timer(threads, 0.02 if ctx.smoke else 0.5, "wall")
        found = bench_gpu_method.references(run, backend=backend,
                                            reference=(label, lambda call: timed(call)[0]))
    label, reference, failures = found
    ratios = {cid: values[cid] / reference[cid] for cid in values.keys() & reference.keys()
              if reference[cid] > 0}
    rec.data["device"] = run.report["session"]["device"]
    rec.detail("reference", label)
    methods = sorted({c.get("method") or "" for c in run.cases.values()} - {""})
    rec.detail("methods", methods)
    rec.detail("not_timed_by_reference", failures)
    rec.detail("ratios", ratios)
    goal, ok = _ratio_goal(*REFERENCE_RANGE)
    every = _median(ratios.values())
    rec.figure(f"{'+'.join(methods) or 'method'} / reference, median over {len(ratios)} cases "
               f"({label})", every, "x",
               goal, ok(every) if ratios else None, None if ratios else "no case compared")
    fresh = _median(r for cid, r in ratios.items() if cid in unseen)
    rec.figure(f"the same over the {sum(c in ratios for c in unseen)} unseen grid rows", fresh,
               "x", goal, ok(fresh) if math.isfinite(fresh) else None,
               None if math.isfinite(fresh) else "no unseen row measured by both")
    rec.figure("cases the reference could not time", len(failures), "cases", "0",
               not failures)


def stage_session(rec: Recorder, ctx: Context) -> None:
    """The whole embedded database as users replay it (smoke: the 2 smallest rows of a few
    kernel types)."""
    from bench_harness import per_case_overhead_s
    from bench_vs_loop import loop_plan, run_loop

    from pytest_npuperf.harness.options import DEFAULT_DB

    if ctx.smoke:  # kernel types whose inputs build in milliseconds on a CPU
        db = _db_dir(ctx.work / "session")
        embedded_subset(db, lambda name: name in SMOKE_SESSION_TYPES, keep=2)
    else:
        db = Path(DEFAULT_DB)
    rec.step(f"pytest bench on {db.name}")
    run = _bench("session", ctx, ctx.work / "session_out", db)
    rec.data["device"] = run.report["session"]["device"]
    s = run.summary()
    rec.detail("summary", s)
    rec.figure(f"wall time, {s['cases']} cases ({s['measured']} measured)",
               s["external_wall_s"], "s", "reported", None)
    rec.figure("duty cycle (time in calls / session wall)", s["duty_cycle"], "",
               f">= {GOAL_DUTY:g}", s["duty_cycle"] >= GOAL_DUTY)
    each = per_case_overhead_s(s)
    rec.figure("overhead per case beyond the timed calls", 1e3 * each, "ms",
               f"<= {1e3 * GOAL_OVERHEAD_S:g} ms", each <= GOAL_OVERHEAD_S)
    rec.figure("session overhead in all (measure/overhead.py)", s["overhead_s"], "s",
               "reported", None)
    plan = loop_plan(run, ctx.device, db, loop_time=0.02 if ctx.smoke else 0.5)
    rec.step(f"{s['cases']} cases in {run.external_wall_s:.1f} s; the plain loop")
    loop_wall, loop = run_loop(ctx.work, plan)
    rec.detail("loop", {"label": loop["label"], "wall_s": loop_wall, "errors": loop["errors"],
                        "timing_s": loop["timing_s"], "inputs_s": loop["inputs_s"]})
    ratio = run.external_wall_s / loop_wall
    rec.figure(f"wall vs a plain loop over the same rows ({loop['label']})", ratio, "x",
               f"<= {GOAL_WALL_RATIO:g}", ratio <= GOAL_WALL_RATIO)


def _fia_tokens(case) -> int:
    """Query tokens of a FusedInferAttentionScore row: T of a TND query, B x S of BSH/BSND,
    0 for other layouts (BNSD: decode in the grid)."""
    query = case.input(0).dims
    layout = str(case.runtime.get("input_layout") or "").upper()
    if query and (layout.startswith("TND") or (not layout and len(query) == 3)):
        return int(query[0])
    if layout.startswith(("BSH", "BSND")) and len(query) >= 2:
        return int(query[0]) * int(query[1])
    return 0


def stage_impls(rec: Recorder, ctx: Context) -> None:
    """Memory-bound kernel types at large sizes and FIA prefill, every implementation."""
    import bench_implementations

    large = (4 << 20) if ctx.smoke else LARGE_BYTES
    tokens = 64 if ctx.smoke else FIA_TOKENS
    db = _db_dir(ctx.work / "impls")
    add_grid_rows(db, ",".join(MEMORY_TYPES + (FIA,)), 0, seed=0,
                  max_hbm_gb=0.25 if ctx.smoke else 4.0, models="llama-3-70b,deepseek-v3")
    kept = select_rows(db, lambda kind, case: (_fia_tokens(case) >= tokens if kind == FIA
                                               else case.io_bytes >= large),
                       1)
    rec.detail("rows", kept)
    rec.detail("large_bytes", large)
    rec.step(f"pytest bench --npuperf-impl all on {sum(kept.values())} rows")
    with tempfile.TemporaryDirectory(dir=ctx.work) as out:
        # Smoke: torch.compile left out (its first compile of a shape takes 2-20 s on a CPU).
        cases = bench_implementations.replay(str(db), SMOKE_IMPLS if ctx.smoke else "",
                                             ctx.device, Path(out), (*QUIET[:2], *ctx.policy))
    rec.data["device"] = {"name": next((c.get("device") for c in cases if c.get("device")),
                                       ctx.device)}
    summary = {t["kernel_type"]: t for t in bench_implementations.summarise(cases, large)}
    rec.detail("kernel_types", summary)
    mib = large >> 20

    def statuses(kind: str) -> str:
        found = Counter(c["status"] for c in cases if c["kernel_type"] == kind)
        return ", ".join(f"{n} {status}" for status, n in sorted(found.items())) or "no case"

    for kind in MEMORY_TYPES:
        t = summary.get(kind)
        if t is None:
            reason = ("no row of this size from the grid" if not kept.get(kind) else
                      f"no valid eager value (cases: {statuses(kind)})")
            rec.figure(f"{kind}: best / eager", math.nan, "x", "reported", None, reason)
            rec.figure(f"{kind}: best's share of the HBM bound, rows >= {mib} MiB", math.nan,
                       "%", f">= {100 * GOAL_HBM_SHARE:g} %", None, reason)
            continue
        rec.figure(f"{kind}: best ({'/'.join(t['implementations'])}) / eager", t["best_over_eager"],
                   "x", "reported", None)
        share = t["of_hbm_bound_large"]
        rec.figure(f"{kind}: best's share of the HBM bound, rows >= {mib} MiB",
                   100 * share if share is not None else math.nan, "%",
                   f">= {100 * GOAL_HBM_SHARE:g} %",
                   share >= GOAL_HBM_SHARE if share is not None else None,
                   None if share is not None else "no HBM (main memory) bound for these rows")
    fia = [c for c in cases if c["kernel_type"] == FIA and c["status"] in ("ok", "suspect")]
    best = {}
    for case in fia:
        row = case["case_id"].rsplit("-", 1)[0]
        if row not in best or case["value"] < best[row]["value"]:
            best[row] = case
    mfu = _median(c.get("mfu") for c in best.values())
    rec.figure(f"{FIA} prefill >= {tokens} tokens: share of peak FLOP/s ({len(best)} rows)",
               100 * mfu, "%", f">= {100 * GOAL_FIA_MFU:g} %",
               mfu >= GOAL_FIA_MFU if math.isfinite(mfu) else None,
               None if best else f"no valid value (cases: {statuses(FIA)})")
    suspect = sum(c["status"] == "suspect" for c in cases)
    rec.figure(f"valid rows flagged suspect (of {sum(c['status'] in ('ok', 'suspect') for c in cases)})",
               suspect, "rows", "0", suspect == 0)
    rec.detail("failed", {c["case_id"]: (c.get("error") or "")[:200] for c in cases
                          if c["status"] not in ("ok", "suspect", "noisy", "skipped")})


def _is_gemm(kernel_type: str) -> bool:
    return "matmul" in kernel_type.lower() or "gemm" in kernel_type.lower()


def stage_fidelity(rec: Recorder, ctx: Context) -> None:
    """A transformers Llama profiled, parsed, replayed and predicted (bench_model_loop)."""
    try:
        import transformers  # noqa: F401
    except ImportError:
        rec.detail("skipped", "transformers is not installed")
        raise StageSkipped("transformers is not installed") from None
    from bench_model_loop import run_model

    hidden, layers = (128, 2) if ctx.smoke else (2048, 2)
    # Smoke: one small step of 2 sequences (the same code path, a third of the minute).
    workloads = ((("prefill", 2, 8),) if ctx.smoke else
                 (("prefill", 1, 1024), ("decode", 16, 1)))
    for label, batch, tokens in workloads:
        args = Namespace(device=ctx.device, dtype="float32" if ctx.smoke else "bfloat16",
                         tokens=tokens, batch=batch, hidden=hidden, layers=layers, threads=1,
                         competing=False, plain=False)
        work = ctx.work / f"fidelity_{label}"
        work.mkdir(parents=True, exist_ok=True)
        rec.step(f"{label}: profile, parse, replay, predict")
        f = run_model("llama", args, work)
        rec.data["device"] = {"kind": ctx.device}
        what = f"{label} {batch}x{tokens}"
        gemm = [abs(r - 1) for kind, _, _, r in f.gap_rows if _is_gemm(kind)]
        rec.detail(label, {"gap_rows": f.gap_rows, "trust": f.trust, "loads": f.loads,
                           "covered_ratio": f.covered_ratio, "unmapped": f.unmapped_share,
                           "no_row": f.missed_share, "median_gap_rows_1pct": f.gap_median})
        median = _median(gemm)
        worst = max(gemm) if gemm else math.nan
        # The parse keeps no in-model value from a profile it does not trust (a busy host).
        none = None if gemm else (f"no GEMM row with a replay and an in-model value "
                                  f"(profile: {f.trust or 'trusted'})")
        rec.figure(f"{what}: GEMM median |replay / in-model - 1| ({len(gemm)} rows)",
                   100 * median, "%", f"<= {100 * GOAL_GEMM_MEDIAN:g} %",
                   median <= GOAL_GEMM_MEDIAN if gemm else None, none)
        rec.figure(f"{what}: worst GEMM |gap|", 100 * worst, "%",
                   f"<= {100 * GOAL_GEMM_WORST:g} %", worst <= GOAL_GEMM_WORST if gemm else None,
                   none)
        ratio = f.predicted_over_measured
        rec.figure(f"{what}: predicted / measured (npuperf predict)", ratio, "x",
                   f"within {100 * GOAL_PREDICTION:g} %", abs(ratio - 1) <= GOAL_PREDICTION)
        rec.figure(f"{what}: mapped share of the step", 100 * f.mapped, "%", "as measured", None)


def _junit_failures(path: Path) -> tuple[int, list[str]]:
    """(tests run, node ids failed or errored) from a junit XML file."""
    tree = ElementTree.parse(path)
    ran, failed = 0, []
    for case in tree.iter("testcase"):
        ran += 1
        if case.find("failure") is not None or case.find("error") is not None:
            failed.append(f"{case.get('classname')}::{case.get('name')}")
    return ran, failed


def stage_tests(rec: Recorder, ctx: Context) -> None:
    """`pytest tests -n 8`: the quick tests, then the slow ones while time is left."""
    import importlib.util

    if ctx.smoke:
        raise StageSkipped("smoke mode: the test suite runs on its own on a CPU "
                           "(pytest tests -n 2; -m slow)")
    missing = [m for m in ("pytest_html", "pytest_metadata", "xdist")
               if importlib.util.find_spec(m) is None]
    rec.detail("missing_plugins", missing)
    parallel = [] if "xdist" in missing else ["-n", "8"]
    timeout = ["--timeout", "120"] if importlib.util.find_spec("pytest_timeout") else []
    for label, marks in (("quick", "not slow"), ("slow", "slow")):
        left = ctx.left()
        if left < 20:
            rec.figure(f"failures, {label} tests", math.nan, "tests", "0", None,
                       f"did not fit: {left:.0f} s left of the stage's limit")
            continue
        junit = ctx.work / f"tests_{label}.xml"
        command = [sys.executable, "-m", "pytest", "tests", "-q", "-p", "no:cacheprovider",
                   *parallel, *timeout, "-m", marks, f"--junitxml={junit}"]
        start = time.monotonic()
        try:
            done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True,
                                  timeout=left - 5, start_new_session=True)
        except subprocess.TimeoutExpired:
            rec.figure(f"failures, {label} tests", math.nan, "tests", "0", None,
                       f"ran out of time after {time.monotonic() - start:.0f} s")
            continue
        if not junit.is_file():
            rec.figure(f"failures, {label} tests", math.nan, "tests", "0", None,
                       f"pytest exited {done.returncode} without a report: "
                       f"{done.stdout.strip()[-300:]}")
            continue
        ran, failed = _junit_failures(junit)
        rec.detail(f"{label}_failed", failed)
        rec.detail(f"{label}_summary", done.stdout.strip().splitlines()[-1:])
        reason = (None if not failed or not missing else
                  f"{', '.join(missing)} missing: carry their wheels (docs/development.md)")
        rec.figure(f"failures, {label} tests ({ran} run, {time.monotonic() - start:.0f} s)",
                   len(failed), "tests", "0", not failed, reason)


class StageSkipped(Exception):
    """A stage that cannot run here; its message is the reason."""


STAGE_FUNCTIONS = {"reference": stage_reference, "session": stage_session,
                   "impls": stage_impls, "fidelity": stage_fidelity, "tests": stage_tests}


def run_stage_child(args) -> int:
    """In the child process: one stage, its figures written as they come."""
    rec = Recorder(args.stage_file, args.stage)
    device = "cpu" if args.smoke else _cuda_or_cpu()
    ctx = Context(args.smoke, device, args.work, time.monotonic() + args.stage_limit)
    try:
        STAGE_FUNCTIONS[args.stage](rec, ctx)
    except StageSkipped as skipped:
        rec.data["skipped"] = str(skipped)
        rec.save()
    return 0


def _cuda_or_cpu() -> str:
    try:
        import torch
        return "cuda" if torch.cuda.is_available() else "cpu"
    except Exception:
        return "cpu"


# -- the run: one child per stage, the table after each ----------------------------------------
def run_stage(stage: str, limit: float, args, work: Path) -> dict:
    """The stage in a child process of its own session, killed (with its children) at
    `limit`: the figures it wrote, its status and wall time."""
    stage_file = work / f"stage_{stage}.json"
    log = work / f"stage_{stage}.log"
    command = [sys.executable, str(Path(__file__).resolve()), "--stage", stage, "--stage-file",
               str(stage_file), "--stage-limit", str(limit), "--work", str(work / stage)]
    if args.smoke:
        command.append("--smoke")
    (work / stage).mkdir(parents=True, exist_ok=True)
    start, cpu = time.monotonic(), _children_cpu_s()
    with open(log, "w") as handle:
        child = subprocess.Popen(command, cwd=ROOT, stdout=handle, stderr=subprocess.STDOUT,
                                 start_new_session=True, env={**os.environ,
                                                              "PYTHONUNBUFFERED": "1"})
        try:
            code = child.wait(timeout=limit)
            status = "done" if code == 0 else f"failed (exit {code})"
        except subprocess.TimeoutExpired:
            os.killpg(child.pid, signal.SIGKILL)  # its pytest and model processes too
            child.wait()
            status = "timed out"
    found = json.loads(stage_file.read_text()) if stage_file.is_file() else {"figures": []}
    found.update({"status": status, "wall_s": round(time.monotonic() - start, 2),
                  "cpu_s": round(_children_cpu_s() - cpu, 1), "limit_s": round(limit, 1)})
    if found.pop("skipped", None) is not None:
        found["status"], found["reason"] = "skipped", _last_skip(stage_file)
    if status != "done":
        found["reason"] = _tail(log)
        if status == "timed out":
            found["reason"] = f"ran out of its {limit:.0f} s; last output: {found['reason']}"
    return found


def _last_skip(stage_file: Path) -> str:
    return json.loads(stage_file.read_text()).get("skipped") or "skipped"


def _tail(log: Path, lines: int = 3) -> str:
    text = log.read_text(errors="replace").strip().splitlines() if log.is_file() else []
    return " | ".join(line.strip() for line in text[-lines:])[-600:] or "(no output)"


# What the GPU image may lack: the tests stage needs the first two (carried as wheels, see
# docs/development.md); the other stages run without them.
CARRIED = ("pytest_html", "pytest_metadata")
USED = ("torch", "triton", "transformers", "pandas", "yaml", "xdist", "pytest_benchmark")


def environment() -> dict:
    """The packages the stages use, found or not (without importing them: torch is slow)."""
    import importlib.util

    found = {name: importlib.util.find_spec(name) is not None for name in CARRIED + USED}
    return {"found": sorted(n for n, ok in found.items() if ok),
            "missing": sorted(n for n, ok in found.items() if not ok)}


def _children_cpu_s() -> float:
    """CPU seconds the stages and their processes used (on a busy host the wall time is
    mostly waiting for a core; this says what the run itself costs)."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return round(usage.ru_utime + usage.ru_stime, 1)


def _load() -> str:
    try:
        return " ".join(f"{v:.2f}" for v in os.getloadavg())
    except OSError:
        return "?"


def _fmt(value, unit: str) -> str:
    if value is None:
        return "-"
    if unit in ("cases", "rows", "tests"):  # counts
        return f"{int(value)} {unit}"
    text = f"{value:.3f}" if abs(value) < 10 else f"{value:.1f}"
    return f"{text} {unit}".strip()


def _cell(text: str) -> str:
    """Text for a markdown table cell (a bare | would end the cell)."""
    return text.replace("|", "\\|").replace("\n", " ")


def markdown(result: dict) -> str:
    mode = ("SMOKE (CPU at tiny sizes: the verdicts are against the GPU goals and say nothing "
            "about a GPU)" if result["smoke"] else "GPU")
    lines = [f"# GPU acceptance: {mode}", "",
             f"device: {result.get('device_name') or '?'}; started {result['started']}; "
             f"wall {result['wall_s']:.0f} s of {result['total_limit_s']:.0f} s "
             f"(CPU time of its processes {result.get('cpu_s', 0):.0f} s); "
             f"load {result['load']}; not installed: "
             f"{', '.join(result['environment']['missing']) or 'none'}", "",
             "| stage | figure | value | goal | verdict |", "| --- | --- | --- | --- | --- |"]
    for name, stage in result["stages"].items():
        head = (f"{name} ({stage['status']}, {stage['wall_s']:.0f} s of {stage['limit_s']:.0f} s"
                f", CPU {stage.get('cpu_s', 0):.0f} s)")
        if stage.get("reason"):
            lines.append(f"| {head} | - | - | - | {_cell(stage['reason'])} |")
            head = name
        for fig in stage["figures"]:
            verdict = fig["verdict"] + (f": {fig['reason']}" if fig.get("reason") else "")
            lines.append(f"| {head} | {_cell(fig['figure'])} | {_fmt(fig['value'], fig['unit'])}"
                         f" | {fig['goal']} | {_cell(verdict)} |")
            head = name
    counts = {v: sum(f["verdict"] == v for s in result["stages"].values() for f in s["figures"])
              for v in ("pass", "fail", "n/a", "reported")}
    lines += ["", "verdicts: " + ", ".join(f"{n} {v}" for v, n in counts.items())]
    return "\n".join(lines) + "\n"


def write_results(out: Path, result: dict) -> None:
    for name, text in (("gpu_acceptance.json", _json(result)),
                       ("gpu_acceptance.md", markdown(result))):
        tmp = out / f".{name}.tmp"
        tmp.write_text(text)
        tmp.replace(out / name)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        epilog="On a GPU host: python3 benchmarks/gpu_acceptance.py --out DIR (see "
               "docs/development.md). Writes DIR/gpu_acceptance.md and .json after each stage.")
    parser.add_argument("--out", type=Path, help="directory for the table and the JSON")
    parser.add_argument("--smoke", action="store_true",
                        help="every stage on this CPU at tiny sizes, the test suite skipped "
                        "(under a minute): checks the script, measures nothing of a GPU")
    parser.add_argument("--stages", default=",".join(STAGES),
                        help=f"comma-separated, in this order: {','.join(STAGES)}")
    parser.add_argument("--total", type=float, help="seconds for the whole run (default "
                        f"{TOTAL_S:g}, smoke {SMOKE_TOTAL_S:g})")
    parser.add_argument("--limits", default="", help="NAME=SECONDS,...: other stage limits "
                        f"(default {','.join(f'{k}={v}' for k, v in LIMITS_S.items())}; smoke "
                        f"{','.join(f'{k}={v}' for k, v in SMOKE_LIMITS_S.items())})")
    parser.add_argument("--keep", action="store_true", help="keep the work directory (the "
                        "stages' logs and databases) under --out")
    parser.add_argument("--stage", choices=STAGES, help=argparse.SUPPRESS)
    parser.add_argument("--stage-file", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--stage-limit", type=float, help=argparse.SUPPRESS)
    parser.add_argument("--work", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.stage:
        return run_stage_child(args)
    if args.out is None:
        parser.error("--out DIR is required")
    stages = [s for s in args.stages.split(",") if s]
    unknown = set(stages) - set(STAGES)
    if unknown:
        parser.error(f"unknown stage(s) {', '.join(sorted(unknown))}; known: {', '.join(STAGES)}")
    args.out.mkdir(parents=True, exist_ok=True)
    limits = dict(SMOKE_LIMITS_S if args.smoke else LIMITS_S)
    try:
        for item in filter(None, args.limits.split(",")):
            name, seconds = item.split("=")
            if name not in limits:
                raise ValueError(name)
            limits[name] = float(seconds)
    except ValueError:
        parser.error(f"--limits {args.limits!r}: expected NAME=SECONDS,... with NAME one of "
                     f"{', '.join(STAGES)}")
    total = args.total or (SMOKE_TOTAL_S if args.smoke else TOTAL_S)
    work = (args.out / "work") if args.keep else Path(tempfile.mkdtemp(prefix="gpu_acceptance_"))
    work.mkdir(parents=True, exist_ok=True)
    start = time.monotonic()
    result = {"schema": SCHEMA, "smoke": args.smoke, "started": time.strftime(
        "%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "device_name": None, "wall_s": 0.0,
        "total_limit_s": total, "cpu_s": 0.0, "load": _load(), "python": sys.version.split()[0],
        "environment": environment(), "stages": {}}
    if result["environment"]["missing"]:
        print("not installed: " + ", ".join(result["environment"]["missing"])
              + " (the stages that need them say so; docs/development.md: which wheels to "
              "carry)", flush=True)
    try:
        for stage in STAGES:
            if stage not in stages:
                result["stages"][stage] = {"status": "skipped", "reason": "not asked for "
                                           "(--stages)", "figures": [], "wall_s": 0.0,
                                           "limit_s": 0.0}
                continue
            left = total - (time.monotonic() - start)
            if left < 3:
                result["stages"][stage] = {"status": "skipped", "figures": [], "wall_s": 0.0,
                                           "limit_s": 0.0, "reason": "no time left of the "
                                           f"run's {total:g} s"}
                continue
            limit = min(limits[stage], left)
            print(f"[{time.monotonic() - start:5.0f} s] {stage} (limit {limit:.0f} s) ...",
                  flush=True)
            found = run_stage(stage, limit, args, work)
            result["stages"][stage] = found
            device = found.pop("device", None) or {}
            if not result["device_name"] and isinstance(device, dict):
                result["device_name"] = device.get("name") or device.get("kind")
            result["wall_s"] = time.monotonic() - start
            result["cpu_s"] = _children_cpu_s()
            result["load"] = _load()
            write_results(args.out, result)
            print(f"[{result['wall_s']:5.0f} s] {stage}: {found['status']}; "
                  + ", ".join(f"{f['verdict']}" for f in found["figures"]), flush=True)
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    result["wall_s"] = time.monotonic() - start
    write_results(args.out, result)
    print(markdown(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
