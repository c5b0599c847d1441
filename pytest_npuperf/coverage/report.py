"""`npuperf coverage`: one report of how good a database is for the simulator.

Density against the standard (density.py), leave-one-out interpolation error (loo.py), the
coverage of a model's profile (model.py), what to measure next (proposals.py) and how the
database was collected (db/provenance.py): printed as one line per kernel type, written as
markdown, html and JSON (the JSON is what `npuperf grid --fill` reads).
"""

from __future__ import annotations

import datetime as _dt
import html
import json
from dataclasses import dataclass, field
from pathlib import Path

from ..db.progress import Progress
from ..db.provenance import measured_lines, summary_lines
from .density import KernelDensity, kernel_density
from .loo import WORST, LooResult, leave_one_out
from .model import CLASSES, ModelCoverage, model_coverage
from .points import DatabasePoints, read_points
from .proposals import Proposal, propose
from .standard import DensityStandard, load_standard

SCHEMA = "npuperf-coverage/1"


@dataclass
class CoverageReport:
    database: Path
    standard: DensityStandard | None
    points: DatabasePoints
    density: dict[str, KernelDensity] = field(default_factory=dict)
    loo: dict[str, LooResult] = field(default_factory=dict)
    model: ModelCoverage | None = None
    proposals: list[Proposal] = field(default_factory=list)
    provenance: list[str] = field(default_factory=list)
    when: str = ""
    theory: bool = False  # density counted rows without a latency too

    @property
    def density_ok(self) -> bool:
        return all(d.ok for d in self.density.values())

    def failures(self, max_p90: float | None = None) -> list[str]:
        """What fails the report's gates (the exit status): density violations, and a
        leave-one-out p90 above `max_p90` where given."""
        out = []
        if self.standard is not None:
            out += [f"{k}: density below the standard" for k, d in self.density.items()
                    if not d.ok]
        if max_p90 is not None:
            for kernel_type, loo in self.loo.items():
                stats = loo.stats
                if stats.count and stats.p90 > max_p90:
                    out.append(f"{kernel_type}: leave-one-out p90 {100 * stats.p90:.1f} % above "
                               f"{100 * max_p90:g} %")
        return out

    # -- text --------------------------------------------------------------------------------

    def kernel_line(self, kernel_type: str) -> str:
        points = self.points.kernels[kernel_type]
        parts = [f"{kernel_type}: {points.rows} row(s), {points.measured} measured"]
        if self.theory:
            parts[0] += f" (density of all {len(points.points) + len(points.theory)} rows)"
        density = self.density.get(kernel_type)
        if density is not None:
            judged = [a for a in density.axes if a.judged or a.values]
            parts += [a.summary() for a in judged]
            if density.rejected:
                reason, count = density.rejected.most_common(1)[0]
                parts.append(f"{sum(density.rejected.values())} measured row(s) not a point "
                             f"({reason}: {count})")
        loo = self.loo.get(kernel_type)
        if loo is not None and loo.points:
            parts.append(f"leave-one-out {loo.stats.text()}, {loo.unpredictable} not "
                         f"bracketed")
            along = _along(loo)
            if along:
                parts.append(f"p90 along {along}")
        return "; ".join(parts)

    def render(self) -> str:
        lines = [f"coverage of {self.database}"
                 + (f" against the {self.standard.label}" if self.standard else "")]
        lines += [f"  {line}" for line in self.provenance]
        for kernel_type in self.points.kernels:
            lines.append(f"  {self.kernel_line(kernel_type)}")
        if self.model is not None:
            lines += self.model_lines()
        if self.proposals:
            lines.append(f"  next: {len(self.proposals)} proposed row(s) "
                         f"({sum(p.kind == 'density' for p in self.proposals)} for density, "
                         f"{sum(p.kind == 'accuracy' for p in self.proposals)} for accuracy): "
                         f"npuperf grid --db {self.database} --fill <this report's JSON>")
        lines += [f"  note: {n}" for n in self.points.notes]
        if self.standard is not None:
            bad = [k for k, d in self.density.items() if not d.ok]
            lines.append(f"density: {len(self.density) - len(bad)} kernel type(s) meet the "
                         f"standard, {len(bad)} do not" + (f" ({', '.join(bad)})" if bad else ""))
        return "\n".join(lines)

    def model_lines(self) -> list[str]:
        model = self.model
        assert model is not None
        total = model.total_us or 1.0
        shares = model.time_by_class()
        calls = model.calls_by_class()
        lines = [f"  model {', '.join(model.sources)}: {model.total_us / 1e3:,.3f} ms in "
                 f"{sum(calls.values()):,} kernel call(s)"]
        lines.append("    " + "; ".join(f"{k} {100 * shares[k] / total:.1f} % ({calls[k]:,} "
                                         f"calls)" for k in CLASSES)
                     + (f"; maps to no kernel table {100 * sum(model.unmapped.values()) / total:.1f} %"
                        if model.unmapped else ""))
        for group in model.worst():
            lines.append(f"    {group.klass}: {group.kernel_type} {group.shapes} x{group.calls}, "
                         f"{100 * group.time_us / total:.1f} % of the time: {group.reason}")
        lines += [f"    note: {n}" for n in model.notes]
        return lines

    # -- JSON --------------------------------------------------------------------------------

    def to_json(self) -> dict:
        out: dict = {"schema": SCHEMA, "database": str(self.database), "when": self.when,
                     "provenance": self.provenance, "theory": self.theory, "kernels": {}}
        if self.standard is not None:
            out["standard"] = {"file": str(self.standard.path), "sha256": self.standard.sha256,
                               "version": self.standard.standard_version,
                               "schema_version": self.standard.schema_version}
        for kernel_type, points in self.points.kernels.items():
            entry: dict = {"rows": points.rows, "measured": points.measured,
                           "points": len(points.points), "family": points.family.name,
                           "not_points": dict(points.rejected)}
            density = self.density.get(kernel_type)
            if density is not None:
                entry["density_ok"] = density.ok
                entry["axes"] = {a.axis.name: _axis_json(a) for a in density.axes}
            loo = self.loo.get(kernel_type)
            if loo is not None:
                entry["loo"] = {**loo.stats.as_dict(), "unpredictable": loo.unpredictable,
                                "by_axes": {k: v.as_dict() for k, v in loo.by_axes().items()},
                                "worst": [_holdout_json(h) for h in loo.worst()]}
            out["kernels"][kernel_type] = entry
        if self.model is not None:
            out["model"] = _model_json(self.model)
        out["proposals"] = [p.as_dict() for p in self.proposals]
        return out

    # -- markdown and html -------------------------------------------------------------------

    def table_rows(self) -> list[list[str]]:
        rows = []
        for kernel_type, points in self.points.kernels.items():
            density = self.density.get(kernel_type)
            loo = self.loo.get(kernel_type)
            stats = loo.stats if loo is not None else None
            axes = "<br>".join(a.summary() for a in density.axes) if density else ""
            verdict = "" if density is None or not density.judged else (
                "ok" if density.ok else "below")
            rows.append([kernel_type, str(points.rows), str(points.measured), axes, verdict,
                         _pct(stats.median if stats else None), _pct(stats.p90 if stats else None),
                         str(stats.over_50) if stats and stats.count else "",
                         str(stats.count) if stats else "", _along(loo) if loo else ""])
        return rows

    HEADER = ("kernel type", "rows", "measured", "axes", "density", "LOO median", "LOO p90",
              "LOO >50 %", "LOO n", "LOO p90 per axis")

    def to_markdown(self) -> str:
        lines = [f"# Coverage of `{self.database}`", ""]
        if self.standard is not None:
            lines += [f"Against the {self.standard.label}.", ""]
        lines += [f"- {line}" for line in self.provenance] + [""]
        lines.append("| " + " | ".join(self.HEADER) + " |")
        lines.append("|" + "---|" * len(self.HEADER))
        for row in self.table_rows():
            lines.append("| " + " | ".join(c.replace("|", "\\|") for c in row) + " |")
        if self.model is not None:
            lines += ["", "## Model", ""] + [line.strip() for line in self.model_lines()]
        worst = [(k, h) for k, loo in self.loo.items() for h in loo.worst(3)]
        if worst:
            lines += ["", "## Rows whose removal costs most", ""]
            lines += [f"- {k} row {h.point.row + 1}: {_axes(h.point.query.axes)}: measured "
                      f"{h.point.latency:.4g} us, predicted {h.estimate.value:.4g} us "
                      f"({100 * h.error:.1f} %, along {h.axes_label})"
                      for k, h in sorted(worst, key=lambda kh: -kh[1].error)[:WORST]]
        if self.proposals:
            lines += ["", "## Next rows", ""]
            lines += [f"- {p.kernel_type} {p.axis}={p.value} ({p.bucket}): {p.reason}"
                      for p in self.proposals[:50]]
        return "\n".join(lines) + "\n"

    def to_html(self) -> str:
        head = "".join(f"<th>{html.escape(h)}</th>" for h in self.HEADER)
        body = "".join("<tr>" + "".join(f"<td>{html.escape(c).replace('&lt;br&gt;', '<br>')}"
                                        f"</td>" for c in row) + "</tr>"
                       for row in self.table_rows())
        extra = ""
        if self.model is not None:
            extra = "<h2>Model</h2><pre>" + html.escape("\n".join(
                line.strip() for line in self.model_lines())) + "</pre>"
        title = html.escape(f"Coverage of {self.database}")
        standard = (f"<p>Against the {html.escape(self.standard.label)}.</p>"
                    if self.standard else "")
        provenance = "".join(f"<li>{html.escape(x)}</li>" for x in self.provenance)
        return (f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>{title}</title>"
                f"<style>body{{font-family:sans-serif}}table{{border-collapse:collapse}}"
                f"td,th{{border:1px solid #ccc;padding:2px 6px;vertical-align:top;"
                f"font-size:13px}}</style></head><body><h1>{title}</h1>{standard}"
                f"<ul>{provenance}</ul><table><tr>{head}</tr>{body}</table>{extra}"
                f"</body></html>\n")


def _along(loo: LooResult) -> str:
    """The p90 per axis group the rows were predicted along: `M 3.1 % (n=30), K ...`."""
    return ", ".join(f"{axes} {_pct(stats.p90)} (n={stats.count})"
                     for axes, stats in loo.by_axes().items() if stats.count)


def _pct(value: float | None) -> str:
    return "" if value is None else f"{100 * value:.2f} %"


def _axes(axes: dict) -> str:
    return ", ".join(f"{k}={v:g}" for k, v in axes.items())


def _axis_json(axis) -> dict:
    check = axis.check
    return {"rule": axis.rule.name if axis.rule else None, "sweep": axis.axis.sweep,
            "values": list(axis.values), "buckets": axis.buckets, "ok": axis.ok,
            "gaps": [{"low": g.gap.low, "high": g.gap.high, "limit": g.gap.limit,
                      "bucket": g.bucket} for g in axis.gaps],
            "missing_required": list(check.missing_required) if check else [],
            "required_not_covered": list(check.required_outside) if check else [],
            "range_endpoints_missing": list(check.range_endpoints_missing) if check else [],
            "outside_range": list(check.outside_range) if check else []}


def _holdout_json(h) -> dict:
    return {"row": h.point.row + 1, "axes": h.point.query.axes, "measured": h.point.latency,
            "predicted": h.estimate.value, "error": h.error, "along": h.axes_label,
            "method": h.estimate.method}


def _model_json(model: ModelCoverage) -> dict:
    total = model.total_us or 1.0
    return {"sources": model.sources, "total_us": model.total_us,
            "time_us": model.time_by_class(), "calls": model.calls_by_class(),
            "shares": {k: v / total for k, v in model.time_by_class().items()},
            "unmapped_us": dict(model.unmapped),
            "calls_by_group": [{"kernel_type": g.kernel_type, "class": g.klass,
                                "calls": g.calls, "time_us": g.time_us, "reason": g.reason,
                                "table": g.table, "input_shapes": g.shapes,
                                "estimate_us": g.estimate.value if g.estimate else None}
                               for g in sorted(model.groups, key=lambda g: -g.time_us)]}


def provenance_lines(database: Path) -> list[str]:
    return summary_lines(database) + measured_lines(database)


def build_report(database: str | Path, *, standard: str | Path | None = None,
                 profiles: list[Path] | None = None, loo: bool = True,
                 kernel_types: list[str] | None = None, workload_only: bool = False,
                 theory: bool = False, show_progress: bool = False) -> CoverageReport:
    database = Path(database)
    density_standard = load_standard(standard) if standard is not None else None
    points = read_points(database, kernel_types)
    report = CoverageReport(database, density_standard, points,
                            provenance=provenance_lines(database),
                            when=_dt.datetime.now().isoformat(timespec="seconds"), theory=theory)
    progress = Progress("coverage", total=sum(k.rows for k in points.kernels.values()) or None,
                        enabled=show_progress)
    done = 0
    for kernel_type, kernel in points.kernels.items():
        report.density[kernel_type] = kernel_density(kernel, density_standard,
                                                     workload_only=workload_only,
                                                     theory=theory)
        if loo:
            report.loo[kernel_type] = leave_one_out(kernel)
        done += kernel.rows
        progress.update(done, f"({kernel_type})")
        report.proposals += propose(kernel, report.density[kernel_type]
                                    if density_standard is not None else None,
                                    report.loo.get(kernel_type))
    progress.finish()
    if profiles:
        report.model = model_coverage(points, profiles, show_progress=show_progress)
    return report


def write_outputs(report: CoverageReport, *, json_path: Path | None = None,
                  markdown: Path | None = None, html_path: Path | None = None) -> list[Path]:
    from ..db.table import write_text

    written = []
    for path, text in ((json_path, lambda: json.dumps(report.to_json(), indent=1) + "\n"),
                       (markdown, report.to_markdown), (html_path, report.to_html)):
        if path is not None:
            path.parent.mkdir(parents=True, exist_ok=True)
            write_text(path, text(), purpose="coverage report")
            written.append(path)
    return written


def load_report(path: str | Path) -> dict:
    """A coverage report's JSON (what `npuperf grid --fill` reads)."""
    from ..db.errors import ContractError, NpuperfError

    path = Path(path)
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise NpuperfError(f"--fill {path}: no such file") from None
    except (ValueError, UnicodeDecodeError):
        raise ContractError(f"{path}: not a JSON file") from None
    if not isinstance(doc, dict) or doc.get("schema") != SCHEMA:
        raise ContractError(f"{path}: not a coverage report (npuperf coverage --json writes "
                            f"one)")
    return doc
