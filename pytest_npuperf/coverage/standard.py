"""msmodeling's density standard for profiling databases, read as msmodeling ships it
(`.agents/skills/profiling_database_axis_density/axis_collection_density.yaml`).

The file (`schema_version: 1`) names axes and their rules:

- `grids`: public axes (`M_GRID`, `NK_GRID`, ...), each with any of a `range` (`min`, `max`),
  `segments` (each a sub-range with a `max_gap` or a `max_ratio`), a rule-wide `max_gap` /
  `max_ratio` (over the whole range) and `required_values` (exact anchors);
- `aliases`: another name for a grid (`ELEM_HIDDEN_GRID: NK_GRID`);
- `template_axes`: per collection template, axes that `use` a public grid or carry a rule of
  their own;
- `communication_axes`: the collective message sizes.

Its gates (the written standard, §2-§3): a point set must hold every required value and keep
the spacing rules; the gap between adjacent measured values may not exceed `max_gap`, the larger
over the smaller may not exceed `max_ratio`. A gap is judged by every segment it spans (a gap
from 8 to 10 of `M_GRID` by the 9-16 segment, `max_gap 2`; one from 8 to 64 by the 9-16,
17-32 and 33-64 segments, the tightest first).
"""

from __future__ import annotations

import hashlib
import itertools
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from ..db.errors import ContractError, NpuperfError, clip, os_error
from ..db.files import read_bounded

MAX_STANDARD_BYTES = 1 << 20
SUPPORTED_SCHEMA = 1


@dataclass(frozen=True)
class Segment:
    low: float
    high: float
    max_gap: float | None = None
    max_ratio: float | None = None

    def limit_text(self) -> str:
        what = f"max_gap {self.max_gap:g}" if self.max_gap is not None \
            else f"max_ratio {self.max_ratio:g}"
        return f"{what} in {self.low:g}-{self.high:g}"

    def exceeded_by(self, a: float, b: float) -> float:
        """How far the gap a < b exceeds this segment's limit (> 1: it does), 0 when the
        segment does not reach into (a, b)."""
        if not (self.low < b and self.high > a):
            return 0.0
        if self.max_gap is not None:
            return (b - a) / self.max_gap
        if a <= 0:
            return math.inf
        return (b / a) / self.max_ratio if self.max_ratio is not None else 0.0


@dataclass(frozen=True)
class AxisRule:
    """The rule of one axis: its range, spacing segments and required values."""

    name: str
    low: float | None = None
    high: float | None = None
    segments: tuple[Segment, ...] = ()
    required: tuple[float, ...] = ()

    def describe(self) -> str:
        parts = []
        if self.low is not None or self.high is not None:
            parts.append(f"range {_num(self.low)}-{_num(self.high)}")
        parts += [s.limit_text() for s in self.segments]
        if self.required:
            parts.append(f"{len(self.required)} required value(s)")
        return f"{self.name}: " + ("; ".join(parts) if parts else "no rule")


def _num(value: float | None) -> str:
    return "?" if value is None else f"{value:g}"


@dataclass(frozen=True)
class Gap:
    """Two adjacent measured values further apart than a segment allows."""

    low: float
    high: float
    limit: str  # the tightest limit exceeded, e.g. "max_gap 4 in 17-32"
    excess: float  # gap over the limit (> 1)

    def text(self) -> str:
        return f"{self.low:g}->{self.high:g} ({self.limit})"


@dataclass
class AxisCheck:
    """One point set against one rule."""

    rule: AxisRule
    values: tuple[float, ...]  # sorted, distinct
    gaps: list[Gap] = field(default_factory=list)
    missing_required: tuple[float, ...] = ()  # inside the observed range
    required_outside: tuple[float, ...] = ()  # required values beyond what the set spans
    outside_range: tuple[float, ...] = ()  # values beyond the rule's range

    @property
    def observed(self) -> tuple[float, float] | None:
        return (self.values[0], self.values[-1]) if self.values else None

    @property
    def range_endpoints_missing(self) -> tuple[float, ...]:
        return tuple(v for v in (self.rule.low, self.rule.high)
                     if v is not None and v not in set(self.values))

    @property
    def ok(self) -> bool:
        return not self.gaps and not self.missing_required


def spacing_gaps(values: Sequence[float], rule: AxisRule) -> list[Gap]:
    """Adjacent pairs of the sorted distinct `values` that a segment of `rule` forbids."""
    out = []
    for a, b in itertools.pairwise(values):
        worst: tuple[float, Segment] | None = None
        for segment in rule.segments:
            excess = segment.exceeded_by(a, b)
            if excess > 1 + 1e-12 and (worst is None or excess > worst[0]):
                worst = (excess, segment)
        if worst is not None:
            out.append(Gap(a, b, worst[1].limit_text(), worst[0]))
    return out


def check_values(values: Iterable[float], rule: AxisRule) -> AxisCheck:
    """`values` (any order, repeats allowed) against `rule`. Required values are judged inside
    the span the values cover (a kernel type's declared sub-range, written standard §2);
    those beyond it are listed apart."""
    distinct = tuple(sorted({float(v) for v in values}))
    check = AxisCheck(rule, distinct)
    if not distinct:
        check.required_outside = rule.required
        return check
    present = set(distinct)
    lo, hi = distinct[0], distinct[-1]
    check.missing_required = tuple(v for v in rule.required if lo <= v <= hi and v not in present)
    check.required_outside = tuple(v for v in rule.required if not lo <= v <= hi)
    check.outside_range = tuple(v for v in distinct
                                if (rule.low is not None and v < rule.low)
                                or (rule.high is not None and v > rule.high))
    check.gaps = spacing_gaps(distinct, rule)
    return check


@dataclass
class DensityStandard:
    path: Path
    sha256: str
    schema_version: int
    standard_version: str
    policy: str
    grids: dict[str, AxisRule]
    aliases: dict[str, str]
    templates: dict[str, dict[str, AxisRule]]
    communication: dict[str, AxisRule]

    @property
    def label(self) -> str:
        return f"density standard {self.standard_version} ({self.path.name}, sha256 " \
               f"{self.sha256[:12]})"

    def rule(self, name: str) -> AxisRule | None:
        """A public grid (aliases followed), `template.axis`, or `communication.axis`."""
        if name in self.aliases:
            name = self.aliases[name]
        if name in self.grids:
            return self.grids[name]
        head, _, tail = name.partition(".")
        if head == "communication":
            return self.communication.get(tail)
        return self.templates.get(head, {}).get(tail)

    def names(self) -> list[str]:
        return [*self.grids, *self.aliases,
                *(f"{t}.{a}" for t, axes in self.templates.items() for a in axes),
                *(f"communication.{a}" for a in self.communication)]


class _Reader:
    def __init__(self, path: Path) -> None:
        self.path = path

    def fail(self, where: str, message: str) -> ContractError:
        return ContractError(f"{self.path}: {where}: {message}")

    def number(self, value: object, where: str) -> float:
        if isinstance(value, bool) or not isinstance(value, (int, float)) \
                or not math.isfinite(value):
            raise self.fail(where, f"expected a number, got {clip(value)}")
        return float(value)

    def positive(self, value: object, where: str) -> float:
        number = self.number(value, where)
        if number <= 0:
            raise self.fail(where, f"expected a number > 0, got {value!r}")
        return number

    def mapping(self, value: object, where: str) -> Mapping:
        if value is None:
            return {}
        if not isinstance(value, Mapping):
            raise self.fail(where, f"expected a mapping, got {clip(value)}")
        return value

    def limits(self, node: Mapping, where: str) -> tuple[float | None, float | None]:
        gap, ratio = node.get("max_gap"), node.get("max_ratio")
        if gap is not None and ratio is not None:
            raise self.fail(where, "max_gap and max_ratio together")
        gap = self.positive(gap, f"{where}.max_gap") if gap is not None else None
        if ratio is not None:
            ratio = self.number(ratio, f"{where}.max_ratio")
            if ratio <= 1:
                raise self.fail(f"{where}.max_ratio", f"must be > 1, got {ratio:g}")
        return gap, ratio

    def rule(self, name: str, node: object, where: str) -> AxisRule:
        node = self.mapping(node, where)
        low = high = None
        if "range" in node:
            bounds = self.mapping(node["range"], f"{where}.range")
            low = self.number(bounds.get("min"), f"{where}.range.min")
            high = self.number(bounds.get("max"), f"{where}.range.max")
            if low > high:
                raise self.fail(f"{where}.range", f"min {low:g} above max {high:g}")
        segments: list[Segment] = []
        for i, seg in enumerate(node.get("segments") or ()):
            at = f"{where}.segments[{i}]"
            seg = self.mapping(seg, at)
            s_low, s_high = self.number(seg.get("min"), f"{at}.min"), \
                self.number(seg.get("max"), f"{at}.max")
            gap, ratio = self.limits(seg, at)
            if gap is None and ratio is None:
                raise self.fail(at, "a segment needs max_gap or max_ratio")
            if s_low > s_high:
                raise self.fail(at, f"min {s_low:g} above max {s_high:g}")
            segments.append(Segment(s_low, s_high, gap, ratio))
        gap, ratio = self.limits(node, where)
        if gap is not None or ratio is not None:
            if low is None:
                raise self.fail(where, "a rule-wide max_gap/max_ratio needs a range")
            segments.append(Segment(low, high, gap, ratio))
        required = node.get("required_values") or ()
        if not isinstance(required, (list, tuple)):
            raise self.fail(f"{where}.required_values", f"expected a list, got {clip(required)}")
        values = tuple(sorted({self.number(v, f"{where}.required_values") for v in required}))
        if low is not None and any(not low <= v <= high for v in values):
            raise self.fail(f"{where}.required_values", "a value outside the range")
        return AxisRule(name, low, high, tuple(sorted(segments, key=lambda s: s.low)), values)


def load_standard(path: str | Path) -> DensityStandard:
    """Read a density standard YAML; ContractError (one line) when it is not one."""
    path = Path(path)
    if not path.is_file():
        raise NpuperfError(f"--standard {path}: no such file")
    try:
        data = read_bounded(path, MAX_STANDARD_BYTES, "a density standard")
    except OSError as exc:
        raise os_error(path, exc) from None
    try:
        doc = yaml.safe_load(data.decode("utf-8-sig"))
    except (yaml.YAMLError, UnicodeDecodeError):
        raise ContractError(f"{path}: not a YAML file") from None
    reader = _Reader(path)
    if not isinstance(doc, Mapping) or "grids" not in doc:
        raise ContractError(f"{path}: not a density standard (no `grids`)")
    schema = doc.get("schema_version")
    if schema != SUPPORTED_SCHEMA:
        raise ContractError(f"{path}: schema_version {clip(schema)}; npuperf reads version "
                            f"{SUPPORTED_SCHEMA}")
    grids = {str(name): reader.rule(str(name), node, f"grids.{name}")
             for name, node in reader.mapping(doc["grids"], "grids").items()}
    aliases = {}
    for alias, target in reader.mapping(doc.get("aliases"), "aliases").items():
        if target not in grids:
            raise reader.fail(f"aliases.{alias}", f"names no grid ({clip(target)})")
        aliases[str(alias)] = str(target)
    templates: dict[str, dict[str, AxisRule]] = {}
    for template, axes in reader.mapping(doc.get("template_axes"), "template_axes").items():
        out: dict[str, AxisRule] = {}
        for axis, node in reader.mapping(axes, f"template_axes.{template}").items():
            where = f"template_axes.{template}.{axis}"
            node = reader.mapping(node, where)
            if "use" in node:
                used = aliases.get(str(node["use"]), str(node["use"]))
                if used not in grids:
                    raise reader.fail(where, f"uses no grid ({clip(node['use'])})")
                base = grids[used]
                out[str(axis)] = AxisRule(f"{template}.{axis}", base.low, base.high,
                                          base.segments, base.required)
            else:
                out[str(axis)] = reader.rule(f"{template}.{axis}", node, where)
        templates[str(template)] = out
    communication = {str(a): reader.rule(f"communication.{a}", node, f"communication_axes.{a}")
                     for a, node in reader.mapping(doc.get("communication_axes"),
                                                   "communication_axes").items()}
    return DensityStandard(path, hashlib.sha256(data).hexdigest(), int(schema),
                           str(doc.get("standard_version", "")), str(doc.get("policy", "")),
                           grids, aliases, templates, communication)
