"""`npuperf grid --fill REPORT`: one round of theory rows that a coverage report proposes.

The report's proposals (proposals.py: density violations first, then the intervals with the
largest leave-one-out error) become rows: each is a measured row of its bucket with the axis
set to the proposed value (a GEMM's M in its first operand and its output; a token axis in
every slot that carries the tokens as its first dim). A row is left out when its tensors need
more than the HBM budget, when the table (or an earlier proposal) has its signature, or when
the kernel's replay would refuse it; the round stops at its row budget (by default a fifth of
the measured rows of the tables it adds to: `pytest bench` replays them, the next coverage run
shows the effect). The round is recorded in `collection_meta.yaml` with what it added and why.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from .. import __version__
from ..db.append import read_existing, stage_rows, unchanged_since
from ..db.columns import (
    EP_SIZE,
    INPUT_DTYPES,
    INPUT_SHAPES,
    OUTPUT_DTYPES,
    OUTPUT_SHAPES,
    SIGNATURE_COLUMNS,
)
from ..db.database import Database
from ..db.errors import CellError, NpuperfError
from ..db.layout import kernel_file_name
from ..db.provenance import collection_entry, read_provenance, stage_provenance
from ..db.shapes import format_shapes, parse_shapes, split_list
from ..db.signature import Signature, signature
from ..grid.memory import budget_bytes, estimate_bytes
from ..kernels import catalog
from ..kernels.mapping_writer import ensure_op_mapping
from .axes import COMPUTE, GENERIC, MOE_FUSED, Policies, family_name, read_query
from .points import read_op_mapping
from .proposals import Proposal
from .report import load_report

DEFAULT_SHARE = 0.2
DEFAULT_MAX_HBM_GB = 32.0


def _replace(slot, index: int, old: float, new: int):
    if slot is None or not -len(slot) <= index < len(slot) or slot[index] != old:
        return slot
    dims = list(slot)
    dims[index] = new
    return tuple(dims)


def row_with_axis(kernel_type: str, family: str, axis: str, template: dict, old: float,
                  new: int) -> dict[str, str] | None:
    """The template row with `axis` moved from `old` to `new`, or None when npuperf has no
    rule for that axis of that family."""
    inputs = list(parse_shapes(template.get(INPUT_SHAPES, "")))
    outputs = list(parse_shapes(template.get(OUTPUT_SHAPES, "")))
    if not inputs or inputs[0] is None:
        return None
    if family == COMPUTE and axis == "M":
        fmt = (split_list(template.get("Input Formats", "")) or ("ND",))[0]
        if fmt.upper() == "FRACTAL_NZ" or len(inputs[0]) < 2:
            return None
        inputs[0] = _replace(inputs[0], -2, old, new)
        if outputs and outputs[0] is not None:
            outputs[0] = _replace(outputs[0], -2, old, new)
    elif (family == GENERIC and axis == "axis_0") or (family == MOE_FUSED and axis == "tokens"):
        first = inputs[0]
        at = 0 if first and first[0] == old else 1 if len(first) > 1 and first[0] == 1 else None
        if at is None or (family == MOE_FUSED and len(first) != 2):
            return None
        inputs = [_replace(s, at, old, new) if at == 0 or (s and s[0] == 1) else s
                  for s in inputs]
        outputs = [_replace(s, at, old, new) if at == 0 or (s and s[0] == 1) else s
                   for s in outputs]
    else:
        return None
    row = dict(template)
    row[INPUT_SHAPES] = format_shapes(tuple(inputs))
    row[OUTPUT_SHAPES] = format_shapes(tuple(outputs))
    return row


def _row_signature(kernel_type: str, row: dict) -> Signature:
    return signature(kernel_type, *(row.get(c, "") for c in SIGNATURE_COLUMNS),
                     row.get(EP_SIZE, ""))


def _row_bytes(row: dict) -> float:
    inputs = parse_shapes(row[INPUT_SHAPES])
    outputs = parse_shapes(row[OUTPUT_SHAPES])
    in_dtypes = split_list(row.get(INPUT_DTYPES, ""))
    out_dtypes = split_list(row.get(OUTPUT_DTYPES, ""))
    return estimate_bytes(inputs, [*in_dtypes, *[""] * len(inputs)][:len(inputs)], outputs,
                          [*out_dtypes, *[""] * len(outputs)][:len(outputs)])


def _replay_refuses(kernel_type: str, row: dict) -> str | None:
    from ..kernels.case import case_from_row
    from ..kernels.registry import spec_for

    try:
        case = case_from_row(kernel_type, row)
        spec = spec_for(kernel_type)
        if spec is not None:
            spec.check(case)
    except CellError as exc:
        return exc.reason
    return None


@dataclass
class Added:
    proposal: Proposal
    row: dict[str, str]


@dataclass
class FillRound:
    database: Path
    number: int
    budget: int
    max_hbm_gb: float
    proposals: int
    added: list[Added] = field(default_factory=list)
    skipped: Counter = field(default_factory=Counter)
    notes: list[str] = field(default_factory=list)
    dry_run: bool = False

    def counts(self) -> Counter:
        return Counter(a.proposal.kernel_type for a in self.added)

    def render(self) -> str:
        verb = "would add" if self.dry_run else "added"
        counts = self.counts()
        lines = [f"fill round {self.number} of {self.database}: {verb} {len(self.added)} of "
                 f"{self.proposals} proposed row(s) (budget {self.budget} rows, "
                 f"{self.max_hbm_gb:g} GiB per row)"]
        for kernel_type, n in sorted(counts.items()):
            kinds = Counter(a.proposal.kind for a in self.added
                            if a.proposal.kernel_type == kernel_type)
            why = ", ".join(f"{v} for {k}" for k, v in sorted(kinds.items()))
            lines.append(f"  {kernel_type}: +{n} ({why})")
        for added in self.added[:20]:
            p = added.proposal
            lines.append(f"    {p.kernel_type} {p.axis}={p.value} ({p.bucket}): {p.reason}")
        if len(self.added) > 20:
            lines.append(f"    ... {len(self.added) - 20} more (collection_meta.yaml lists all)")
        for reason, n in self.skipped.most_common():
            lines.append(f"  left out {n}: {reason}")
        lines += [f"note: {n}" for n in self.notes]
        if self.added and not self.dry_run:
            lines.append("replay them: pytest bench --npuperf-db <this database> "
                         "--npuperf-update-mode missing-only (only rows without a value), then "
                         "run npuperf coverage again on the measured database")
        return "\n".join(lines)


def plan_fill(database: Path, doc: dict, *, rows: int | None, max_hbm_gb: float | None
              ) -> FillRound:
    proposals = [Proposal.from_dict(p) for p in doc.get("proposals", [])]
    touched = {p.kernel_type for p in proposals}
    measured = sum(int(k.get("measured", 0)) for t, k in doc.get("kernels", {}).items()
                   if t in touched)
    budget = rows if rows is not None else max(1, math.floor(DEFAULT_SHARE * measured))
    hbm = DEFAULT_MAX_HBM_GB if max_hbm_gb is None else max_hbm_gb
    history = read_provenance(database).get("collections", [])
    number = 1 + sum(1 for e in history if isinstance(e, dict) and e.get("kind") == "fill")
    plan = FillRound(database, number, budget, hbm, len(proposals))
    if Path(doc.get("database", "")).resolve() != database.resolve():
        plan.notes.append(f"the report was made for {doc.get('database')}; its proposals are "
                          f"applied to {database}")
    policies = Policies.from_op_mapping(read_op_mapping(database))
    limit = budget_bytes(hbm)
    db = Database(database)
    taken: dict[str, set[Signature]] = {}
    for proposal in proposals:
        if len(plan.added) >= budget:
            plan.skipped["over the row budget"] += 1
            continue
        kernel_type = proposal.kernel_type
        family = family_name(kernel_type, policies.of(kernel_type))
        row = row_with_axis(kernel_type, family, proposal.axis, proposal.template,
                            proposal.template_value, proposal.value)
        if row is None:
            plan.skipped[f"no fill rule for {family} axis {proposal.axis}"] += 1
            continue
        query = read_query(kernel_type, row, policies.of(kernel_type))
        if isinstance(query, str) or query.axes.get(proposal.axis) != proposal.value:
            plan.skipped["the template row does not carry the axis where expected"] += 1
            continue
        if kernel_type not in taken:
            taken[kernel_type] = set()
            for member in catalog.same_call_types(kernel_type):
                table = db.get(member)
                if table is not None:
                    taken[kernel_type].update(s for s in table.signatures if s is not None)
        sig = _row_signature(kernel_type, row)
        if sig in taken[kernel_type]:
            plan.skipped["its signature is already in the table"] += 1
            continue
        try:
            size = _row_bytes(row)
        except CellError as exc:
            plan.skipped[f"cannot size it ({exc.reason})"] += 1
            continue
        if size > limit:
            plan.skipped[f"over {hbm:g} GiB"] += 1
            continue
        refused = _replay_refuses(kernel_type, row)
        if refused is not None:
            plan.skipped["its replay would refuse it"] += 1
            continue
        taken[kernel_type].add(sig)
        plan.added.append(Added(proposal, row))
    if not proposals:
        plan.notes.append("the report proposes nothing (run npuperf coverage with --standard "
                          "for density proposals; leave-one-out proposals need measured rows)")
    return plan


def run_fill(database: str | Path, report: str | Path, *, rows: int | None = None,
             max_hbm_gb: float | None = None, dry_run: bool = False) -> FillRound:
    database = Path(database)
    if not database.is_dir():
        raise NpuperfError(f"--db {database}: no such database directory")
    doc = load_report(report)
    plan = plan_fill(database, doc, rows=rows, max_hbm_gb=max_hbm_gb)
    plan.dry_run = dry_run
    if dry_run or not plan.added:
        return plan
    by_type: dict[str, list[dict[str, str]]] = {}
    for added in plan.added:
        by_type.setdefault(added.proposal.kernel_type, []).append(added.row)
    with Database(database).transaction("npuperf grid --fill") as tx:
        for kernel_type, new_rows in sorted(by_type.items()):
            path = database / kernel_file_name(kernel_type)
            existing = read_existing(path, kernel_type)
            if not unchanged_since(existing, path):
                raise NpuperfError(f"{path} changed while the fill was planned; nothing was "
                                   f"written, run the command again")
            stage_rows(tx, path, kernel_type, new_rows, existing)
        ensure_op_mapping(tx, database)
        standard = doc.get("standard")
        stage_provenance(tx, database, collection=collection_entry(
            database, "fill", plan.counts(), version=__version__, round=plan.number,
            report=str(report), standard=standard,
            added=[{"kernel_type": a.proposal.kernel_type, "axis": a.proposal.axis,
                    "value": a.proposal.value, "kind": a.proposal.kind,
                    "why": a.proposal.reason, "bucket": a.proposal.bucket} for a in plan.added]))
        plan.notes[:0] = tx.notes
    return plan
