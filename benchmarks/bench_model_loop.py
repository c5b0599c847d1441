"""Your model, predicted: the whole loop on a transformers model, as a user runs it.

For each architecture (a Llama and a Qwen3, random weights, nothing downloaded): a script
that builds the model and marks its forward as the step is profiled with `npuperf profile`
(a fresh process; on a CPU with the thread count the replay gets), parsed into a fresh flat
database (`npuperf parse --db`), replayed on the same device with `pytest --pyargs
pytest_npuperf.suite --npuperf-db` (into this device's copy), and then:

- mapped: the share of the step's operator (device) time that maps to kernel-type rows
  (goal >= 95 %); initialisation in the trace (goal: none);
- gap: median |replay / in-model - 1| over the rows holding >= 1 % of the step's time
  (goal <= 5 %), each row's ratio printed;
- prediction: `npuperf predict` of the trace against the replayed database, predicted /
  measured for the whole step (goal within 5 %; on a GPU in bf16 within 3 %);
- plain: the same model traced by torch.profiler alone (record_shapes, no module ranges, no
  step marks): the mapped share through the eager decompositions (goal >= 90 %);
- competing (CPU): the profile taken again beside busy processes, one per core, with the
  profile's threads on every core: no in-model value may be stored as trusted (goal), and the
  parse says why.

Every figure is printed with the host's load; the verdict of each goal ends the run. `--json
FILE` writes them too (what a GPU acceptance script reads: `run_model()` is its entry).

    python benchmarks/bench_model_loop.py [--device auto|cpu|cuda] [--dtype float32|bfloat16]
        [--models llama,qwen3] [--tokens 256] [--batch 1] [--hidden 1024] [--layers 2]
        [--threads 1]
        [--no-competing] [--keep DIR] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT))

SCRIPT = '''
import os, sys
import torch
import transformers
from pytest_npuperf.profiling import step

name, device, dtype, tokens, hidden, layers, plain, batch = sys.argv[1:9]
tokens, hidden, layers, batch = int(tokens), int(hidden), int(layers), int(batch)
dtype = getattr(torch, dtype)
common = dict(hidden_size=hidden, num_hidden_layers=layers, num_attention_heads=hidden // 64,
              vocab_size=32000, max_position_embeddings=max(512, tokens))
if name == "llama":
    config = transformers.LlamaConfig(intermediate_size=hidden * 43 // 4,
                                      num_key_value_heads=hidden // 64, **common)
    cls = transformers.LlamaForCausalLM
else:
    config = transformers.Qwen3Config(intermediate_size=hidden * 3, head_dim=64,
                                      num_key_value_heads=max(1, hidden // 128), **common)
    cls = transformers.Qwen3ForCausalLM
torch.manual_seed(0)
model = cls(config).to(device=device, dtype=dtype).eval()
ids = torch.randint(0, config.vocab_size, (batch, tokens), device=device)


def forward():
    with torch.no_grad():
        model(ids)


if plain != "-":  # a user's own trace: torch.profiler alone, record_shapes, no marks
    from torch.profiler import ProfilerActivity, profile
    forward()
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device == "cuda" else [])
    with profile(activities=activities, record_shapes=True) as prof:
        for _ in range(3):
            forward()
        if device == "cuda":
            torch.cuda.synchronize()
    prof.export_chrome_trace(plain)
else:
    for _ in range(4):
        with step():
            forward()
'''

GOAL_MAPPED, GOAL_PLAIN, GOAL_GAP, GOAL_PREDICTION, GOAL_PREDICTION_GPU = 0.95, 0.90, 0.05, \
    0.05, 0.03
SIGNIFICANT = 0.01  # rows holding at least this share of the step's time


@dataclass
class Figures:
    model: str
    device: str
    dtype: str
    threads: int | None
    mapped: float = float("nan")
    init_in_trace: bool = False
    plain_mapped: float = float("nan")
    gap_median: float = float("nan")
    gap_rows: list = field(default_factory=list)  # (type, shape, share, ratio)
    predicted_over_measured: float = float("nan")
    waited_share: float = 0.0  # of the measured step: the profile's threads waiting for a CPU
    on_cpu_ratio: float = float("nan")  # predicted / (measured - that wait)
    gap_median_on_cpu: float = float("nan")  # in-model values less their share of the wait
    covered_ratio: float = float("nan")
    unmapped_share: float = float("nan")
    missed_share: float = float("nan")
    trust: str = ""
    competing_trust: str = ""
    competing_rows_trusted: int | None = None
    loads: list = field(default_factory=list)  # (what, 1-minute load)


def _load() -> float:
    try:
        return os.getloadavg()[0]
    except OSError:
        return float("nan")


def _env(threads: int | None) -> dict:
    env = dict(os.environ)
    if threads:
        env["OMP_NUM_THREADS"] = str(threads)
        env["MKL_NUM_THREADS"] = str(threads)
    return env


def _run(command: list[str], *, env: dict, cwd: Path, what: str) -> subprocess.CompletedProcess:
    done = subprocess.run(command, capture_output=True, text=True, env=env, cwd=cwd)
    if done.returncode != 0:
        raise SystemExit(f"{what} failed ({done.returncode}):\n{done.stdout[-2000:]}\n"
                         f"{done.stderr[-3000:]}")
    return done


def profile(name: str, args, work: Path, out: Path, *, threads: int | None) -> Path:
    script = work / f"run_{name}.py"
    script.write_text(SCRIPT)
    _run([sys.executable, "-m", "pytest_npuperf.cli", "profile", "--device", args.device,
          "--warmup", "1", "--steps", "3", "--out", str(out), "--", "python", str(script), name,
          args.device, args.dtype, str(args.tokens), str(args.hidden), str(args.layers), "-",
          str(getattr(args, "batch", 1))],
         env=_env(threads), cwd=work, what=f"npuperf profile of {name}")
    return out


def plain_trace(name: str, args, work: Path) -> Path:
    out = work / f"{name}_plain.json"
    _run([sys.executable, str(work / f"run_{name}.py"), name, args.device, args.dtype,
          str(args.tokens), str(args.hidden), str(args.layers), str(out),
         str(getattr(args, "batch", 1))],
         env=_env(args.threads if args.device == "cpu" else None), cwd=work,
         what=f"the plain trace of {name}")
    return out


def replay(database: Path, args, work: Path) -> Path:
    """Replays the database on this device; returns this device's copy, where they went."""
    out = work / "out"
    command = [sys.executable, "-m", "pytest", "--pyargs", "pytest_npuperf.suite", "-q",
               "-p", "no:cacheprovider", "--npuperf-db", str(database), "--npuperf-device",
               args.device, "--npuperf-out", str(out), "--npuperf-model-profile", "off",
               "--npuperf-history", "none"]
    if args.device == "cpu" and args.threads:
        command += ["--npuperf-threads", str(args.threads)]
    done = subprocess.run(command, capture_output=True, text=True, cwd=work,
                          env=_env(args.threads if args.device == "cpu" else None))
    if done.returncode not in (0, 1):
        raise SystemExit(f"the replay failed ({done.returncode}):\n{done.stdout[-3000:]}")
    [copy] = out.glob(f"*/vllm_ascend/{database.name}")
    return copy


def gaps(copy: Path, step_us: float) -> list[tuple[str, str, float, float]]:
    """(kernel type, shape, share of the step, replay / in-model) of every row with both."""
    from pytest_npuperf.db.columns import parse_duration
    from pytest_npuperf.db.table import read_table

    found = []
    for path in sorted(copy.glob("*.csv")):
        frame = read_table(path)
        for _, row in frame.iterrows():
            replayed = parse_duration(row.get("Average Duration(us)"))
            profiled = parse_duration(row.get("Profiling Average Duration(us)"))
            if replayed is None or profiled is None:
                continue
            calls = float(row.get("Profiling Count") or 1)
            found.append((path.stem, row["Input Shapes"], profiled * calls / step_us,
                          replayed / profiled))
    return found


def competing(name: str, args, work: Path, figures: Figures) -> None:
    """The profile beside one busy process per core, the profile's threads on every core."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else 1
    busy = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(cores)]
    try:
        trace = profile(name, args, work, work / f"{name}_competing.json", threads=cores)
    finally:
        for process in busy:
            process.kill()
            process.wait()
    from pytest_npuperf.db.columns import PROFILING_TRUST, trusted_profile
    from pytest_npuperf.db.table import read_table
    from pytest_npuperf.ingest.parse import parse_profiling

    database = work / f"{name}_competing_db"
    summary = parse_profiling(trace, database, show_progress=False)
    figures.competing_trust = summary.traces[0].trust
    figures.competing_rows_trusted = sum(
        trusted_profile(mark) for path in database.glob("*.csv")
        for mark in read_table(path).get(PROFILING_TRUST, []))


def run_model(name: str, args, work: Path) -> Figures:
    """Profile, parse, replay and predict one architecture (what a GPU script calls)."""
    from pytest_npuperf.ingest.parse import parse_profiling
    from pytest_npuperf.ingest.prediction import predict

    threads = args.threads if args.device == "cpu" else None
    figures = Figures(name, args.device, args.dtype, threads)
    figures.loads.append(("start", _load()))
    trace = profile(name, args, work, work / f"{name}.json", threads=threads)
    figures.loads.append(("after the profile", _load()))
    database = work / f"{name}_db"
    summary = parse_profiling(trace, database, show_progress=False)
    traced = summary.traces[0]
    figures.mapped = traced.mapped_us / traced.total_us
    figures.trust = traced.trust
    names = {e.get("name") for e in json.loads(trace.read_text())["traceEvents"]
             if e.get("cat") == "cpu_op"}
    figures.init_in_trace = bool(names & {"aten::normal_", "aten::uniform_"})
    copy = replay(database, args, work)
    figures.loads.append(("after the replay", _load()))
    rows = gaps(copy, traced.total_us)
    figures.gap_rows = rows
    significant = [abs(r - 1) for _, _, share, r in rows if share >= SIGNIFICANT]
    figures.gap_median = statistics.median(significant) if significant else float("nan")
    prediction = predict(trace, copy)
    figures.predicted_over_measured = prediction.ratio
    figures.waited_share = prediction.share(prediction.waited_us)
    figures.on_cpu_ratio = prediction.on_cpu_ratio
    # An estimate per row: each call waited its share of its step's wait (preemption lands
    # in proportion to time); the whole step's figure above is exact.
    on_cpu = [abs(r / (1 - figures.waited_share) - 1) for _, _, share, r in rows
              if share >= SIGNIFICANT] if figures.waited_share < 1 else []
    figures.gap_median_on_cpu = statistics.median(on_cpu) if on_cpu else float("nan")
    figures.covered_ratio = prediction.covered_ratio
    figures.unmapped_share = prediction.share(prediction.unmapped_us)
    figures.missed_share = prediction.share(prediction.missed_us)
    print("\n".join(prediction.lines()))
    if getattr(args, "plain", True):  # a GPU acceptance run leaves it out (its minutes)
        plain = plain_trace(name, args, work)
        from pytest_npuperf.ingest.trace_rows import trace_rows
        from pytest_npuperf.kernels.torch_ops import TorchOperators

        _, plain_summary = trace_rows(plain, TorchOperators())
        forward_us = plain_summary.total_us - plain_summary.init_us
        figures.plain_mapped = (plain_summary.mapped_us / forward_us if forward_us
                                else float("nan"))
    if args.device == "cpu" and args.competing:
        competing(name, args, work, figures)
        figures.loads.append(("after the competing profile", _load()))
    return figures


def _verdict(ok: bool) -> str:
    return "ok" if ok else "MISSED"


def report(f: Figures) -> list[tuple[str, bool]]:
    print(f"\n{f.model} on {f.device} ({f.dtype}, threads {f.threads or 'default'}); load "
          + ", ".join(f"{what} {load:.2f}" for what, load in f.loads))
    print(f"  profile trust: {f.trust or '(not recorded)'}; the profile's threads waited "
          f"{f.waited_share:.1%} of the step for a CPU (run-queue delay)")
    for kind, shape, share, ratio in sorted(f.gap_rows, key=lambda r: -r[2]):
        print(f"    {kind:<26} {share:7.2%}  replay / in-model {ratio:6.3f}  {shape}")
    goal_prediction = GOAL_PREDICTION_GPU if f.device == "cuda" else GOAL_PREDICTION
    goals = [
        (f"mapped share of the step {f.mapped:.1%} (goal >= {GOAL_MAPPED:.0%})",
         f.mapped >= GOAL_MAPPED),
        (f"initialisation in the trace: {'yes' if f.init_in_trace else 'no'} (goal: no)",
         not f.init_in_trace),
        (f"median |replay / in-model - 1| over rows >= {SIGNIFICANT:.0%} of the time "
         f"{f.gap_median:.1%} (goal <= {GOAL_GAP:.0%})", f.gap_median <= GOAL_GAP),
        (f"predicted / measured for the whole step {f.predicted_over_measured:.3f} (goal within "
         f"{goal_prediction:.0%}; {f.covered_ratio:.3f} over the calls with a row, unmapped "
         f"{f.unmapped_share:.1%}, no row {f.missed_share:.1%})",
         abs(f.predicted_over_measured - 1) <= goal_prediction),
    ]
    if f.waited_share > 0:  # a busy host: the same goals, the host's wait left out
        goals += [
            (f"  without the {f.waited_share:.1%} waited for a CPU: gap median "
             f"{f.gap_median_on_cpu:.1%} (estimate; goal <= {GOAL_GAP:.0%})",
             f.gap_median_on_cpu <= GOAL_GAP),
            (f"  without the {f.waited_share:.1%} waited for a CPU: predicted / measured "
             f"{f.on_cpu_ratio:.3f} over the calls a replay costed (goal within "
             f"{goal_prediction:.0%})",
             abs(f.on_cpu_ratio - 1) <= goal_prediction)]
    goals += [
        (f"plain trace (no module ranges) mapped {f.plain_mapped:.1%} of the forward (goal >= "
         f"{GOAL_PLAIN:.0%})", f.plain_mapped >= GOAL_PLAIN),
    ]
    if f.competing_rows_trusted is not None:
        goals.append((f"beside busy processes: {f.competing_rows_trusted} row(s) stored as "
                      f"trusted (goal 0); the parse says: {f.competing_trust or '(nothing)'}",
                      f.competing_rows_trusted == 0))
    for text, ok in goals:
        print(f"  [{_verdict(ok)}] {text}")
    return goals


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="auto", choices=("auto", "cpu", "cuda"))
    parser.add_argument("--dtype", default=None, choices=("float32", "bfloat16", "float16"),
                        help="default: float32 on a CPU, bfloat16 on a GPU")
    parser.add_argument("--models", default="llama,qwen3")
    parser.add_argument("--tokens", type=int, default=256)
    parser.add_argument("--batch", type=int, default=1,
                        help="sequences per forward (16 with --tokens 1: a decode-shaped step "
                        "of 16 sequences, without a KV cache)")
    parser.add_argument("--hidden", type=int, default=1024)
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--threads", type=int, default=1,
                        help="CPU: intra-op threads of the profile and of the replay")
    parser.add_argument("--no-competing", dest="competing", action="store_false")
    parser.add_argument("--keep", type=Path, help="keep the work directory here")
    parser.add_argument("--json", type=Path, help="write the figures here too")
    args = parser.parse_args(argv)
    try:
        import transformers  # noqa: F401
    except ImportError:
        print("transformers is not installed (pip install -e .[test]): nothing to measure")
        return 0
    from pytest_npuperf.profiling.workload import resolve_kind

    args.device = resolve_kind(args.device)
    args.dtype = args.dtype or ("float32" if args.device == "cpu" else "bfloat16")
    work = args.keep or Path(tempfile.mkdtemp(prefix="bench_model_loop_"))
    work.mkdir(parents=True, exist_ok=True)
    results, missed = [], 0
    try:
        for name in args.models.split(","):
            figures = run_model(name, args, work)
            goals = report(figures)
            missed += sum(not ok for _, ok in goals)
            results.append(asdict(figures))
    finally:
        if args.keep is None:
            shutil.rmtree(work, ignore_errors=True)
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))
    print(f"\n{missed} goal(s) missed" if missed else "\nevery goal met")
    return 0


if __name__ == "__main__":
    sys.exit(main())
