"""The reports of a collective run: `reports/comm_report_<stamp>.md` and `comm_run_<stamp>.json`
beside the hcom tables, and the terminal summary rank 0 prints."""

from __future__ import annotations

import json
import math
from collections import Counter
from dataclasses import dataclass, field

from ..comm.collective_result import STATUS_OK, CommResult
from ..comm.model import predict_us, verdict
from ..comm.table import UpsertStats, ranks_cell

SCHEMA = "npuperf-comm-run/1"


@dataclass
class RunInfo:
    run_id: str
    stamp: str
    started: str
    device: str  # database <DEVICE>
    device_desc: dict
    backend: str
    world: int
    grid: tuple[int, ...]
    options: dict
    table_dir: str
    sweep_wall_s: float  # from the first collective case's start to the last one's end
    notes: list[str] = field(default_factory=list)
    tables: list[UpsertStats] = field(default_factory=list)


def _num(value: float, fmt: str = ".3f") -> str:
    return format(value, fmt) if isinstance(value, (int, float)) and math.isfinite(value) else ""


def _model(result: CommResult) -> tuple[str, str]:
    """(predicted us, verdict) of the A3 model, or ("", "n/a")."""
    point = result.point
    try:
        predicted = predict_us(point.op, point.message_bytes, point.num_devices,
                               point.topology_tier)
    except ValueError:
        return "", "n/a"
    return _num(predicted, ".2f"), verdict(result.duration_us / predicted)


def status_counts(results: list[CommResult]) -> dict[str, int]:
    return dict(Counter(r.status for r in results))


def render_markdown(results: list[CommResult], info: RunInfo) -> str:
    counts = status_counts(results)
    a3 = info.device.startswith("ATLAS_800_A3")
    lines = [
        f"# Collective run {info.run_id}",
        "",
        f"- started {info.started}; {info.world} rank(s); backend {info.backend}; device "
        f"{info.device} ({info.device_desc.get('name', '')}); grid {' x '.join(map(str, info.grid))}",
        f"- tables: {info.table_dir}",
        f"- cases: {len(results)} ({', '.join(f'{v} {k}' for k, v in sorted(counts.items()))});"
        f" sweep wall time {info.sweep_wall_s:.2f} s",
        "- Duration(us): the slowest rank's per-call statistic; bandwidth_gbps = message_bytes "
        "/ time; busbw_gbps: nccl-tests' bus bandwidth",
    ]
    for stats in info.tables:
        lines.append(f"- {stats.file}: {stats.updated} row(s) replaced, {stats.added} added, "
                     f"{stats.kept} other row(s) kept")
    lines += [f"- note: {n}" for n in info.notes]
    header = ("| case | Duration(us) | algbw GB/s | busbw GB/s | ranks min / median / max (us) "
              "| straggler | samples x calls | precision | status |")
    lines += ["", "## Cases", "", header + (" A3 model (us) | verdict |" if a3 else ""),
              "|---|---:|---:|---:|---|---:|---:|---:|---|" + ("---:|---|" if a3 else "")]
    for r in results:
        low, mid, high = r.rank_spread()
        worst = r.slowest()
        status = r.status + (f": {r.error}" if r.error else "")
        row = (f"| {r.case_id} | {_num(r.duration_us)} | {_num(r.algbw_gbps(), '.4g')} "
               f"| {_num(r.busbw_gbps(), '.4g')} | {_num(low)} / {_num(mid)} / {_num(high)} "
               f"| {'' if r.straggler_rank is None else r.straggler_rank} "
               f"| {worst.samples if worst else 0} x {r.ops_per_sample} "
               f"| {_num(r.precision, '.3f')} | {status.replace('|', '/')} |")
        if a3:
            predicted, judged = _model(r) if r.status == STATUS_OK else ("", "")
            row += f" {predicted} | {judged} |"
        lines.append(row)
    if not a3:
        lines += ["", "The analytic model of docs/format.md §7 has A3 constants: not applied to "
                      f"{info.device} (`npuperf comm-validate` applies it to any table)."]
    return "\n".join(lines) + "\n"


def _jsonable(value):
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    return value


def render_json(results: list[CommResult], info: RunInfo) -> str:
    data = {
        "schema": SCHEMA, "run_id": info.run_id, "stamp": info.stamp, "started": info.started,
        "device": info.device, "device_desc": info.device_desc, "backend": info.backend,
        "world": info.world, "grid": list(info.grid), "options": info.options,
        "table_dir": info.table_dir, "sweep_wall_s": info.sweep_wall_s,
        "notes": info.notes, "by_status": status_counts(results),
        "tables": [vars(s) for s in info.tables],
        "cases": [{**r.to_dict(), "case_id": r.case_id, "algbw_gbps": r.algbw_gbps(),
                   "busbw_gbps": r.busbw_gbps(), "spread": r.spread(),
                   "group": ranks_cell(r.point.ranks)} for r in results],
    }
    return json.dumps(_jsonable(data), indent=1, allow_nan=False) + "\n"


def terminal_lines(results: list[CommResult]) -> list[str]:
    lines = []
    for r in results:
        if r.measured:
            low, _, high = r.rank_spread()
            lines.append(f"{r.case_id:<40} {r.duration_us:>12.2f} us  algbw {r.algbw_gbps():9.3f} "
                         f"GB/s  busbw {r.busbw_gbps():9.3f} GB/s  ranks {low:.2f}..{high:.2f} us "
                         f"(slowest: rank {r.straggler_rank})")
        else:
            lines.append(f"{r.case_id:<40} {r.status}: {r.error}")
    return lines
