"""`npuperf comm-validate`: every hcom row against the analytic model (comm/model.py).

Per row: measured Duration(us) (or Average Duration(us), as the simulator reads first), the
model's prediction for (op, message_bytes, num_devices, topology_tier), their ratio and PASS /
WARN / FAIL. A row the model does not cover (broadcast, one rank, a tier without constants) is
listed as `n/a`; a row whose cells do not parse is `INVALID` (a data problem, like a FAIL).
A missing topology_tier column is read as tier 1, as the reference validator does, and said.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

from ..db.errors import NpuperfError
from ..db.table import read_table
from .model import A3_LINKS, DEFAULT_TOLERANCE, EFFICIENCY, FAIL, PASS, WARN, predict_us, verdict
from .ops import TABLE_OPS

INVALID, NOT_MODELLED = "INVALID", "n/a"
_DURATIONS = ("Average Duration(us)", "Duration(us)")


@dataclass
class CheckedRow:
    file: str
    row: int  # 1-based data row
    op: str
    message_bytes: int | None
    num_devices: int | None
    tier: int | None
    measured_us: float | None
    predicted_us: float | None
    status: str
    reason: str = ""

    @property
    def ratio(self) -> float:
        if not self.measured_us or not self.predicted_us:
            return math.nan
        return self.measured_us / self.predicted_us


@dataclass
class CommValidation:
    directory: Path
    tolerance: float
    rows: list[CheckedRow] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def count(self, status: str) -> int:
        return sum(1 for r in self.rows if r.status == status)

    @property
    def ok(self) -> bool:
        return not (self.count(FAIL) or self.count(INVALID))


def _int(text: str) -> int | None:
    text = str(text).strip()
    return int(text) if text.isascii() and text.isdigit() else None


def _duration(record: dict[str, str]) -> float | None:
    for column in _DURATIONS:
        try:
            value = float(record.get(column, ""))
        except ValueError:
            continue
        if math.isfinite(value) and value > 0:
            return value
    return None


def check_row(file: str, index: int, op: str, record: dict[str, str], tolerance: float,
              default_tier: int | None) -> CheckedRow:
    message = _int(record.get("message_bytes", ""))
    n = _int(record.get("num_devices", ""))
    tier = _int(record["topology_tier"]) if "topology_tier" in record else default_tier
    measured = _duration(record)
    row = CheckedRow(file, index, op, message, n, tier, measured, None, INVALID)
    if message is None or n is None or measured is None or tier is None:
        missing = [name for name, value in (("message_bytes", message), ("num_devices", n),
                                            ("topology_tier", tier), ("a duration", measured))
                   if value is None]
        row.reason = f"unreadable {', '.join(missing)}"
        return row
    try:
        row.predicted_us = predict_us(op, message, n, tier)
    except ValueError as exc:
        row.status, row.reason = NOT_MODELLED, str(exc)
        return row
    row.status = verdict(row.ratio, tolerance)
    return row


def validate_dir(directory: str | Path, tolerance: float = DEFAULT_TOLERANCE) -> CommValidation:
    directory = Path(directory)
    if not directory.is_dir():
        raise NpuperfError(f"{directory}: no such directory (expected <DEVICE>/hccl/<version>/ "
                           f"with hcom_*.csv files)")
    if tolerance < 1 or not math.isfinite(tolerance):
        raise NpuperfError(f"--tolerance {tolerance}: must be a number >= 1")
    files = [directory / name for name in sorted(TABLE_OPS) if (directory / name).is_file()]
    if not files:
        raise NpuperfError(f"{directory}: no hcom table ({', '.join(sorted(TABLE_OPS))})")
    result = CommValidation(directory, tolerance)
    for path in files:
        frame = read_table(path)  # an LFS pointer or a malformed CSV is an error naming it
        default_tier = None
        if "topology_tier" not in frame.columns:
            default_tier = 1
            result.notes.append(f"{path.name}: no topology_tier column; rows read as tier 1")
        op = TABLE_OPS[path.name]
        for index, record in enumerate(frame.to_dict("records"), start=1):
            result.rows.append(check_row(path.name, index, op, record, tolerance, default_tier))
    return result


def _fmt(value: float | None, digits: int = 2) -> str:
    return "" if value is None or not math.isfinite(value) else f"{value:.{digits}f}"


def render_markdown(result: CommValidation) -> str:
    t = result.tolerance
    lines = [
        f"# Collective tables vs the analytic model: {result.directory}",
        "",
        "Model: docs/format.md §7 (A3 links: "
        + ", ".join(f"tier {k} {v.bandwidth_gbps:g} GB/s {v.latency_us:g} us"
                    for k, v in A3_LINKS.items())
        + f"; efficiency {EFFICIENCY}). PASS: measured/predicted in [{1 / t:.3g}, {t:g}]; "
          f"WARN: in [{1 / (2 * t):.3g}, {2 * t:g}]; FAIL beyond.",
        "",
        f"**{result.count(PASS)} PASS, {result.count(WARN)} WARN, {result.count(FAIL)} FAIL, "
        f"{result.count(INVALID)} INVALID, {result.count(NOT_MODELLED)} not modelled** "
        f"({len(result.rows)} rows)",
        "",
    ]
    lines += [f"- {note}" for note in result.notes]
    if result.notes:
        lines.append("")
    lines += ["| file | row | message_bytes | num_devices | tier | measured (us) | predicted (us) "
              "| ratio | status |", "|---|---:|---:|---:|---:|---:|---:|---:|---|"]
    for row in result.rows:
        status = row.status + (f" ({row.reason})" if row.reason else "")
        known = ["" if v is None else str(v) for v in (row.message_bytes, row.num_devices, row.tier)]
        lines.append(f"| {row.file} | {row.row} | {' | '.join(known)} | {_fmt(row.measured_us)} "
                     f"| {_fmt(row.predicted_us)} | {_fmt(row.ratio, 3)} | {status} |")
    return "\n".join(lines) + "\n"
