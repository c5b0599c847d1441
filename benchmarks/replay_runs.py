"""Shared by the benchmarks: run `pytest bench` in a fresh process and read its run JSON.

Every figure comes from the run JSON the session wrote (its one duty-cycle definition), next
to the wall clock this script measured around the process, for comparison.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MEASURED = ("ok", "noisy", "suspect")
# Where a database the benchmarks build lives below its root (the embedded one's names).
DEVICE_DIR = Path("ATLAS_800_A3_752T_128G_DIE") / "vllm_ascend" / "vllm0.18.0_torch2.9.0_cann8.5"


def grid_database(root: Path, kernels: str, rows: int, *, max_hbm_gb: float | None = None
                  ) -> Path:
    """`npuperf grid` rows of `kernels` (Llama-3-70B and DeepSeek-V3) in a new database."""
    db = root / DEVICE_DIR
    budget = ["--max-hbm-gb", str(max_hbm_gb)] if max_hbm_gb is not None else []
    subprocess.run([sys.executable, "-m", "pytest_npuperf.cli", "grid", "--db", str(db),
                    "--kernels", kernels, "--rows", str(rows), *budget, "--target-models",
                    "llama-3-70b,deepseek-v3", "--quiet"], check=True, cwd=ROOT,
                   capture_output=True)
    return db


@dataclass
class BenchRun:
    label: str
    external_wall_s: float  # this script's clock around the whole process
    report: dict  # the run JSON
    cases: dict[str, dict] = field(default_factory=dict)  # case id -> case entry

    @property
    def totals(self) -> dict:
        return self.report["totals"]

    def values(self) -> dict[str, float]:
        """case id -> stored statistic (the chosen one), for every measured case."""
        return {cid: c["value"] for cid, c in self.cases.items()
                if c["status"] in MEASURED and c.get("value")}

    def summary(self) -> dict:
        totals = self.totals
        statuses = totals["by_status"]
        fallbacks = sum(1 for c in self.cases.values() if c.get("fallback"))
        methods = sorted({c["method"] for c in self.cases.values() if c["status"] in MEASURED})
        return {"label": self.label, "cases": totals["cases"],
                "measured": sum(statuses.get(s, 0) for s in MEASURED),
                "noisy": statuses.get("noisy", 0), "fallbacks": fallbacks,
                "methods": methods, "external_wall_s": self.external_wall_s,
                "wall_s": totals["session_wall_s"], "in_calls_s": totals["time_in_calls_s"],
                "duty_cycle": totals["duty_cycle"],
                "per_case_overhead_s": totals["per_case_overhead_s"],
                "cases_wall_s": totals["cases_wall_s"],
                # The one definition of overhead (measure/overhead.py) and where it went.
                "overhead_s": totals.get("overhead_s"),
                "overhead_parts_s": dict(totals.get("overhead_parts_s") or {}),
                # Where the overhead goes: outside the cases (start-up, collection, pytest's
                # own per-test work, backfill, reports), and inside them beyond the calls
                # (inputs, warmup, capture, calibration).
                "outside_cases_s": totals["session_wall_s"] * run_workers(self.report)
                - totals["cases_wall_s"],
                "in_case_overhead_s": (totals["cases_wall_s"] - totals["time_in_calls_s"])
                / max(1, totals["cases"]),
                # Of that, the warmup calls (untimed by definition): estimated as warmup x the
                # case's stored value, so slightly low (the first calls are the slow ones).
                "warmup_s_per_case": self.warmup_estimate_s() / max(1, totals["cases"])}

    def warmup_estimate_s(self) -> float:
        return sum(c.get("warmup", 0) * c["value"] / 1e6 for c in self.cases.values()
                   if c["status"] in MEASURED and c.get("value"))


def run_workers(report: dict) -> int:
    return max(1, int(report["session"].get("workers") or 1))


def run_bench(label: str, out: Path, *args: str, timeout_s: float = 900,
              env: dict[str, str] | None = None) -> BenchRun:
    """`python -m pytest bench ARGS --npuperf-out OUT` in a fresh process (`env`: more
    environment variables)."""
    argv = [sys.executable, "-m", "pytest", "bench", "-q", "-p", "no:cacheprovider",
            "--npuperf-out", str(out), *args]
    start = time.perf_counter()
    proc = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=timeout_s,
                          env={**os.environ, **env} if env else None)
    elapsed = time.perf_counter() - start
    runs = sorted((out / "reports").glob("run_*.json"))
    if proc.returncode not in (0, 1) or not runs:
        raise SystemExit(f"{' '.join(argv)} failed (exit {proc.returncode}):\n"
                         f"{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    report = json.loads(runs[-1].read_text())
    return BenchRun(label, elapsed, report, {c["case_id"]: c for c in report["cases"]})


def drifts(a: dict[str, float], b: dict[str, float]) -> dict[str, float]:
    """case id -> b / a - 1, for cases measured in both."""
    return {cid: b[cid] / a[cid] - 1 for cid in sorted(a.keys() & b.keys()) if a[cid] > 0}


def quantile(values: list[float], q: float) -> float:
    if not values:
        return math.nan
    ordered = sorted(values)
    position = q * (len(ordered) - 1)
    low = math.floor(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def median(values: list[float]) -> float:
    return statistics.median(values) if values else math.nan


def loadavg() -> str:
    """The host's 1, 5 and 15-minute load, to print beside a figure ("?" where unknown)."""
    try:
        return " ".join(Path("/proc/loadavg").read_text().split()[:3])
    except OSError:
        return "?"


def write_out(name: str, data: dict) -> Path | None:
    """Full results as JSON under $OUT (set on the device machine), if set."""
    target = os.environ.get("OUT")
    if not target:
        return None
    path = Path(target) / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=1, default=str))
    return path


def fmt_pct(value: float) -> str:
    return "-" if value is None or not math.isfinite(value) else f"{100 * value:+.2f} %"


def selection_args(doc: str, argv: list[str] | None) -> argparse.Namespace:
    """`-k EXPR --device D [-- PYTEST_ARGS]`: the selection a benchmark runs twice or more."""
    parser = argparse.ArgumentParser(description=doc.splitlines()[0])
    parser.add_argument("-k", dest="keyword", default="MatMul", help="pytest -k expression")
    parser.add_argument("--device", default="auto", help="--npuperf-device (default auto)")
    parser.add_argument("pytest_args", nargs="*", help="more pytest arguments (after --)")
    return parser.parse_args(argv)
