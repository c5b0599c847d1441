"""The grid configuration: YAML schema, validation, and the packaged configs.

```yaml
models: [deepseek-v3, qwen3-32b]   # optional: default target models (else all known ones)
rows: 1000                         # optional: default cap of new rows per kernel
seed: 0                            # optional: default sampling seed
max_hbm_gb: 32                     # optional: default memory budget per row (GiB, 0 = none)
grids:                             # optional: named value lists
  TOKENS: [1, 16, 256]
  WIDE: {min: 64, max: 4096, step: 64}      # inclusive range
  POW2: {min: 1, max: 65536, mul: 2}        # geometric range
patterns:
  matmul:                          # a template pattern
    iterators:                     # the product of these, in this order (last varies fastest)
      M: M_GRID                    # a named grid (built-in, `grids:` above, or model_*)
      "N, K": model_gemm_nk        # several names bind the items of a grid of tuples
      S: [1, 2, 4]                 # an inline list
      T: {min: 1, max: 64, step: 1}
    constants: {block: 128, max_flops: "2 * 10 ** 9"}   # numbers or expressions, in order
    constraints: ["2 * M * N * K <= max_flops"]          # all must hold
    inputs: ["(M, K)", "(N, K)"]   # one shape template per slot; "()" is an empty slot
    outputs: ["(M, N)"]
    input_dtypes: [DT_BF16, DT_BF16]   # optional: default from the kernel's spec, else DT_BF16
    input_formats: [ND, ND]            # optional: default ND (NULL for empty slots)
    output_dtypes: [DT_BF16]
    output_formats: [ND]
    op_state: dynamic              # optional identity cells
    accelerator_core: AI_CORE
  attention:                       # a generator pattern (kernels whose shapes are not a product)
    generator: fused_infer_attention_score
    params: {prefill_batch: [1, 2], prefill_seq: [512, 1024]}
    constraints: ["batch * seq <= 8192"]   # over the generator's variables
assignments:                       # kernel type -> pattern(s)
  MatMulV2: matmul
  MatMulV3: [matmul]
  FusedInferAttentionScore: {patterns: [attention], rows: 8}
```

`--config` takes a file, or the name of a packaged config: `default` (default_grid.yaml, all
kernel types of docs/format.md §10) or `embedded_db` (the embedded default database).
"""

from __future__ import annotations

import keyword
import math
import re
from collections.abc import Callable, Collection
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path

from ..db.errors import clip
from ..db.shapes import DTYPE_BYTES, normalize_dtype, normalize_format
from .errors import ConfigError, UnknownKernelError
from .expr import FUNCTIONS, MAX_MAGNITUDE, Expr, parse_expression, parse_shape
from .generators import GENERATORS
from .grids import BUILTIN_GRIDS
from .models import MODEL_GRIDS
from .yamlio import Marks, load_yaml

PACKAGED_CONFIGS = {"default": "default_grid.yaml", "embedded_db": "embedded_db.yaml"}
DEFAULT_ROWS = 1000
DEFAULT_SEED = 0
DEFAULT_MAX_HBM_GB = 32.0
MAX_RANGE_VALUES = 10_000_000
MAX_CANDIDATES = 10_000_000
"""Candidates one kernel type may stream (the product of a pattern's iterators, summed over
its patterns): checked before anything is generated."""


def candidate_count(values: list) -> int:
    """The product of the iterators' lengths (1 for no iterator: one grid point)."""
    count = 1
    for items in values:
        count *= len(items)
    return count

_TOP_KEYS = {"version", "models", "rows", "seed", "max_hbm_gb", "grids", "patterns",
             "assignments"}
_TEMPLATE_KEYS = {"iterators", "constants", "constraints", "inputs", "outputs", "input_dtypes",
                  "input_formats", "output_dtypes", "output_formats", "op_state",
                  "accelerator_core", "description"}
_GENERATOR_KEYS = {"generator", "params", "constraints", "op_state", "accelerator_core",
                   "description"}
_NAME_RE = re.compile(r"^[A-Za-z][A-Za-z0-9_]*$")
_KNOWN_FORMATS = {"ND", "FRACTAL_NZ", "NCHW", "NHWC", "NC1HWC0", "NULL", "FRACTAL_Z", "NCDHW",
                  "NDC1HWC0"}

Values = tuple | range


@dataclass(frozen=True)
class ValueSpec:
    """Where an iterator's or parameter's values come from."""

    kind: str            # "list", "range", "grid"
    value: object        # the tuple/range, or the grid name
    path: tuple

    def resolve(self, grids: dict[str, Values]) -> Values:
        if self.kind == "grid":
            return grids[self.value]  # type: ignore[index]
        return self.value  # type: ignore[return-value]


@dataclass(frozen=True)
class IteratorSpec:
    names: tuple[str, ...]
    values: ValueSpec


@dataclass
class TemplatePattern:
    name: str
    iterators: list[IteratorSpec]
    constants: dict[str, Expr]
    constraints: list[Expr]
    inputs: list[tuple[Expr, ...] | None]
    outputs: list[tuple[Expr, ...] | None]
    input_dtypes: list[str] | None
    input_formats: list[str] | None
    output_dtypes: list[str] | None
    output_formats: list[str] | None
    op_state: str | None
    accelerator_core: str | None
    path: tuple
    kind: str = "template"


@dataclass
class GeneratorPattern:
    name: str
    generator: str
    params: dict[str, ValueSpec]
    constraints: list[Expr]
    op_state: str | None
    accelerator_core: str | None
    path: tuple
    kind: str = "generator"


Pattern = TemplatePattern | GeneratorPattern


@dataclass
class Assignment:
    kernel_type: str
    patterns: list[str]
    rows: int | None
    path: tuple


@dataclass
class GridConfig:
    source: str
    marks: Marks
    models: list[str] | None = None
    rows: int | None = None
    seed: int | None = None
    max_hbm_gb: float | None = None
    grids: dict[str, ValueSpec] = field(default_factory=dict)
    patterns: dict[str, Pattern] = field(default_factory=dict)
    assignments: dict[str, Assignment] = field(default_factory=dict)

    @property
    def kernel_types(self) -> list[str]:
        return list(self.assignments)

    def resolved_grids(self, model_values: dict[str, tuple]) -> dict[str, Values]:
        out: dict[str, Values] = dict(BUILTIN_GRIDS)
        out.update(model_values)
        for name, spec in self.grids.items():
            out[name] = spec.resolve(out)
        return out


# ---------------------------------------------------------------------------------------------

def packaged_config_path(name: str) -> Path:
    return Path(str(resources.files("pytest_npuperf.grid").joinpath(PACKAGED_CONFIGS[name])))


def resolve_config_path(config: str | Path | None) -> Path:
    """A config file path: the given file, a packaged config by name, or the default."""
    if config is None:
        return packaged_config_path("default")
    path = Path(config)
    if path.exists():
        return path
    if str(config) in PACKAGED_CONFIGS:
        return packaged_config_path(str(config))
    raise ConfigError(f"{config}: no such config file (packaged configs: "
                      f"{', '.join(PACKAGED_CONFIGS)})")


def load_config(config: str | Path | None = None) -> GridConfig:
    path = resolve_config_path(config)
    data, marks = load_yaml(path)
    if path == packaged_config_path("default") and isinstance(data, dict):
        _add_catalog_patterns(data)
    return parse_config(data, marks)


def _add_catalog_patterns(data: dict) -> None:
    """The default grid also holds the pattern a catalog entry carries (`KernelEntry.grid`,
    a kernel type added or registered since default_grid.yaml was written), under its own
    name, for its kernel types the file does not assign."""
    from ..kernels import catalog

    patterns, assignments = data.get("patterns"), data.get("assignments")
    if not isinstance(patterns, dict) or not isinstance(assignments, dict):
        return  # parse_config says what is wrong with the file
    for entry in catalog.entries():
        new = [t for t in entry.kernel_types if t not in assignments]
        if entry.grid is None or not new:
            continue
        patterns.setdefault(entry.name, dict(entry.grid))
        assignments.update(dict.fromkeys(new, entry.name))


def parse_config(data: object, marks: Marks) -> GridConfig:
    if not isinstance(data, dict):
        raise marks.error((), "a grid config is a mapping with 'patterns' and 'assignments'")
    _no_unknown(data, _TOP_KEYS, (), marks, "top-level key")
    cfg = GridConfig(source=marks.source, marks=marks)
    if "version" in data and data["version"] != 1:
        raise marks.error(("version",), f"unsupported config version {data['version']!r} "
                                        f"(this release reads version 1)")
    if "models" in data:
        models = data["models"]
        if isinstance(models, str):
            models = [m.strip() for m in models.split(",") if m.strip()]
        if not isinstance(models, list) or not all(isinstance(m, str) for m in models):
            raise marks.error(("models",), "expected a list of model names")
        cfg.models = models
    if "rows" in data:
        cfg.rows = _non_negative_int(data["rows"], ("rows",), marks)
    if "seed" in data:
        cfg.seed = _int(data["seed"], ("seed",), marks)
    if "max_hbm_gb" in data:
        cfg.max_hbm_gb = _non_negative_number(data["max_hbm_gb"], ("max_hbm_gb",), marks)
    known_grids = set(BUILTIN_GRIDS) | set(MODEL_GRIDS)
    grids = data.get("grids") or {}
    if not isinstance(grids, dict):
        raise marks.error(("grids",), "expected a mapping of grid names to value lists")
    for name, spec in grids.items():
        path = ("grids", name)
        _check_name(name, path, marks, "grid name")
        if name in MODEL_GRIDS:
            raise marks.error(path, f"{name!r} is derived from the target models and cannot be "
                                    f"redefined")
        cfg.grids[name] = _value_spec(spec, path, marks, known_grids, allow_scalar=False)
        known_grids.add(name)
    patterns = data.get("patterns")
    if not isinstance(patterns, dict) or not patterns:
        raise marks.error(("patterns",), "expected a mapping of pattern names to patterns")
    for name, body in patterns.items():
        _check_name(name, ("patterns", name), marks, "pattern name")
        cfg.patterns[name] = _pattern(str(name), body, ("patterns", name), marks, known_grids)
    assignments = data.get("assignments")
    if not isinstance(assignments, dict) or not assignments:
        raise marks.error(("assignments",), "expected a mapping of kernel types to patterns")
    for kernel_type, target in assignments.items():
        cfg.assignments[str(kernel_type)] = _assignment(str(kernel_type), target,
                                                        ("assignments", kernel_type), marks,
                                                        cfg.patterns)
    return cfg


# ---------------------------------------------------------------------------------------------

def _no_unknown(data: dict, allowed: set[str], path: tuple, marks: Marks, what: str) -> None:
    for key in data:
        if key not in allowed:
            raise marks.error((*path, key), f"unknown {what} {key!r} (allowed: "
                                            f"{', '.join(sorted(allowed))})", key=True)


def _check_name(name: object, path: tuple, marks: Marks, what: str) -> None:
    if not isinstance(name, str) or not _NAME_RE.match(name) or keyword.iskeyword(name):
        raise marks.error(path, f"invalid {what} {name!r} (letters, digits and _, starting "
                                f"with a letter)")


def _int(value: object, path: tuple, marks: Marks) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise marks.error(path, f"expected an integer, got {value!r}")
    return value


def _non_negative_int(value: object, path: tuple, marks: Marks) -> int:
    number = _int(value, path, marks)
    if number < 0:
        raise marks.error(path, f"expected a number >= 0, got {value!r}")
    return number


def _non_negative_number(value: object, path: tuple, marks: Marks) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
        raise marks.error(path, f"expected a number >= 0, got {value!r}")
    return float(value)


def _number(value: object, path: tuple, marks: Marks) -> int | float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise marks.error(path, f"expected a number, got {clip(value)}")
    if isinstance(value, float) and not math.isfinite(value):
        raise marks.error(path, f"expected a finite number, got {value!r}")
    if abs(value) > MAX_MAGNITUDE:
        raise marks.error(path, f"{clip(value)} is beyond the {MAX_MAGNITUDE:.3g} limit of "
                                f"grid values")
    return value


def _value_spec(spec: object, path: tuple, marks: Marks, known_grids: set[str], *,
                allow_scalar: bool, width: int | None = None) -> ValueSpec:
    """A list, a {min, max, step|mul} range, or a grid name (scalars only where allowed)."""
    if isinstance(spec, str):
        if spec in known_grids:
            return ValueSpec("grid", spec, path)
        if allow_scalar:
            return ValueSpec("list", (spec,), path)
        raise marks.error(path, f"unknown grid {spec!r} (built-in: {', '.join(BUILTIN_GRIDS)}; "
                                f"from the models: {', '.join(MODEL_GRIDS)}; or define it under "
                                f"'grids:')")
    if isinstance(spec, dict):
        return ValueSpec("range", _range(spec, path, marks), path)
    if isinstance(spec, list):
        if not spec:
            raise marks.error(path, "empty list of values")
        items = []
        for i, item in enumerate(spec):
            if isinstance(item, list):
                if width is not None and width > 1 and len(item) != width:
                    raise marks.error((*path, i), f"expected {width} values per item, got "
                                                  f"{len(item)}")
                items.append(tuple(_scalar(v, (*path, i, j), marks)
                                   for j, v in enumerate(item)))
            else:
                if width is not None and width > 1:
                    raise marks.error((*path, i), f"expected a list of {width} values, got "
                                                  f"{item!r}")
                items.append(_scalar(item, (*path, i), marks))
        return ValueSpec("list", tuple(items), path)
    if allow_scalar and (isinstance(spec, (int, float)) and not isinstance(spec, bool)):
        return ValueSpec("list", (spec,), path)
    raise marks.error(path, f"expected a grid name, a list or a {{min, max, step}} range, got "
                            f"{spec!r}")


def _scalar(value: object, path: tuple, marks: Marks) -> int | float | str:
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise marks.error(path, f"expected a number, got {clip(value)}")
    if isinstance(value, (int, float)):
        return _number(value, path, marks)
    return value


def _range(spec: dict, path: tuple, marks: Marks) -> Values:
    _no_unknown(spec, {"min", "max", "step", "mul"}, path, marks, "range key")
    for key in ("min", "max"):
        if key not in spec:
            raise marks.error(path, "a range needs 'min' and 'max' (and 'step' or 'mul')")
    low = _number(spec["min"], (*path, "min"), marks)
    high = _number(spec["max"], (*path, "max"), marks)
    if high < low:
        raise marks.error(path, f"range max {high} is below min {low}")
    if "step" in spec and "mul" in spec:
        raise marks.error(path, "give 'step' or 'mul', not both")
    if "mul" in spec:
        mul = _number(spec["mul"], (*path, "mul"), marks)
        if mul <= 1:
            raise marks.error((*path, "mul"), f"mul must be > 1, got {mul}")
        if low <= 0:
            raise marks.error((*path, "min"), "a geometric range needs min > 0")
        # Counted before generated: min 1, max 1e300, mul 1.0000001 would be 6.9e9 values.
        count = math.floor((math.log(high) - math.log(low)) / math.log(mul) + 1e-9) + 1
        if count > MAX_RANGE_VALUES:
            raise marks.error(path, f"range has {count:,} values (at most "
                                    f"{MAX_RANGE_VALUES:,})")
        values = []
        value = low
        while value <= high and len(values) <= count:
            values.append(value)
            grown = value * mul
            if grown <= value:  # no progress in floating point: mul too close to 1
                raise marks.error((*path, "mul"), f"mul {mul!r} is too close to 1")
            value = grown
        return tuple(values)
    step = _number(spec.get("step", 1), (*path, "step"), marks)
    if step <= 0:
        raise marks.error((*path, "step"), f"step must be > 0, got {step}")
    ratio = (high - low) / step
    if ratio >= MAX_RANGE_VALUES:
        raise marks.error(path, f"range has {ratio + 1:,.0f} values (at most "
                                f"{MAX_RANGE_VALUES:,})")
    count = int((high - low) // step) + 1
    if count > MAX_RANGE_VALUES:
        raise marks.error(path, f"range has {count:,} values (at most {MAX_RANGE_VALUES:,})")
    if all(isinstance(v, int) for v in (low, high, step)):
        return range(low, high + 1, step)
    return tuple(low + i * step for i in range(count))


def _string_list(value: object, path: tuple, marks: Marks) -> list:
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list):
        raise marks.error(path, f"expected a list, got {value!r}")
    return value


def _slot_names(value: object, count: int, path: tuple, marks: Marks, what: str,
                normalize: Callable[[str], str], known: Collection[str]) -> list[str]:
    """A per-slot list of dtype or format names: one per slot, each known, normalised."""
    items = _string_list(value, path, marks)
    if len(items) != count:
        raise marks.error(path, f"{len(items)} {what}(s) for {count} slot(s)")
    out = []
    for i, item in enumerate(items):
        if not isinstance(item, str):
            raise marks.error((*path, i), f"expected a {what} name, got {item!r}")
        name = normalize(item)
        if name not in known:
            raise marks.error((*path, i), f"unknown {what} {item!r} (known: "
                                          f"{', '.join(sorted(known))})")
        out.append(name)
    return out


def _dtypes(value: object, count: int, path: tuple, marks: Marks) -> list[str]:
    return _slot_names(value, count, path, marks, "dtype", normalize_dtype, DTYPE_BYTES)


def _formats(value: object, count: int, path: tuple, marks: Marks) -> list[str]:
    return _slot_names(value, count, path, marks, "format", normalize_format, _KNOWN_FORMATS)


def _identity_text(body: dict, key: str, path: tuple, marks: Marks) -> str | None:
    if key not in body:
        return None
    value = body[key]
    if not isinstance(value, str) or any(ch in value for ch in "\r\n"):
        raise marks.error((*path, key), f"expected one line of text, got {value!r}")
    return value


def _where(marks: Marks, path: tuple, pattern: str) -> str:
    return f"{marks.where(path)}: pattern {pattern!r}"


def _pattern(name: str, body: object, path: tuple, marks: Marks, known_grids: set[str]
             ) -> Pattern:
    if not isinstance(body, dict):
        raise marks.error(path, "a pattern is a mapping (iterators, inputs, outputs, ... or "
                                "generator, params)")
    if "generator" in body:
        return _generator_pattern(name, body, path, marks, known_grids)
    _no_unknown(body, _TEMPLATE_KEYS, path, marks, "pattern key")
    for key in ("inputs", "outputs"):
        if key not in body:
            raise marks.error(path, f"a template pattern needs '{key}' (or use 'generator')")

    names: list[str] = []
    iterators: list[IteratorSpec] = []
    raw_iterators = body.get("iterators") or {}
    if not isinstance(raw_iterators, dict):
        raise marks.error((*path, "iterators"), "expected a mapping of names to values")
    for key, spec in raw_iterators.items():
        ipath = (*path, "iterators", key)
        group = tuple(part.strip() for part in str(key).split(","))
        for part in group:
            _check_var(part, ipath, marks, names)
            names.append(part)
        values = _value_spec(spec, ipath, marks, known_grids, allow_scalar=False,
                             width=len(group))
        iterators.append(IteratorSpec(group, values))

    constants: dict[str, Expr] = {}
    raw_constants = body.get("constants") or {}
    if not isinstance(raw_constants, dict):
        raise marks.error((*path, "constants"), "expected a mapping of names to values")
    for key, value in raw_constants.items():
        cpath = (*path, "constants", key)
        _check_var(key, cpath, marks, names)
        expr = parse_expression(value, where=_where(marks, cpath, name))
        expr.check_names(set(constants))
        constants[key] = expr
        names.append(key)
    known = set(names)

    constraints = _constraints(body, path, marks, name, known)
    inputs = _slots(body["inputs"], (*path, "inputs"), marks, name, known)
    outputs = _slots(body["outputs"], (*path, "outputs"), marks, name, known)
    if not any(s is not None for s in outputs):
        raise marks.error((*path, "outputs"), "a pattern needs at least one output shape")
    dtypes = {}
    for key, slots in (("input_dtypes", inputs), ("output_dtypes", outputs)):
        dtypes[key] = _dtypes(body[key], len(slots), (*path, key), marks) if key in body else None
    formats = {}
    for key, slots in (("input_formats", inputs), ("output_formats", outputs)):
        formats[key] = _formats(body[key], len(slots), (*path, key), marks) if key in body \
            else None
    return TemplatePattern(
        name=name, iterators=iterators, constants=constants, constraints=constraints,
        inputs=inputs, outputs=outputs, input_dtypes=dtypes["input_dtypes"],
        input_formats=formats["input_formats"], output_dtypes=dtypes["output_dtypes"],
        output_formats=formats["output_formats"],
        op_state=_identity_text(body, "op_state", path, marks),
        accelerator_core=_identity_text(body, "accelerator_core", path, marks), path=path)


def _check_var(name: object, path: tuple, marks: Marks, taken: list[str]) -> None:
    _check_name(name, path, marks, "variable name")
    if name in FUNCTIONS:
        raise marks.error(path, f"{name!r} is a function name and cannot be a variable")
    if name in taken:
        raise marks.error(path, f"variable {name!r} is defined twice")


def _constraints(body: dict, path: tuple, marks: Marks, name: str, known: set[str]
                 ) -> list[Expr]:
    raw = body.get("constraints") or []
    if isinstance(raw, str):
        raw = [raw]
    if not isinstance(raw, list):
        raise marks.error((*path, "constraints"), "expected a list of expressions")
    out = []
    for i, text in enumerate(raw):
        expr = parse_expression(text, where=_where(marks, (*path, "constraints", i), name))
        expr.check_names(known)
        out.append(expr)
    return out


# Real kernels have at most a few dozen slots (FusedInferAttentionScore: 31 inputs) of a few
# dims. Each dim becomes code the grid compiles: 10^5 of them took minutes, then overflowed
# the compiler's recursion.
MAX_SLOTS = 256
MAX_SLOT_DIMS = 64


def _slots(raw: object, path: tuple, marks: Marks, name: str, known: set[str]
           ) -> list[tuple[Expr, ...] | None]:
    if isinstance(raw, str):
        raw = [raw]
    if not isinstance(raw, list) or not raw:
        raise marks.error(path, "expected a list of shape templates like \"(M, K)\"")
    if len(raw) > MAX_SLOTS:
        raise marks.error(path, f"{len(raw):,} shape templates; a kernel has at most "
                                f"{MAX_SLOTS} slots a side")
    slots = []
    for i, text in enumerate(raw):
        where = _where(marks, (*path, i), name)
        slot = parse_shape(text, where=where)
        if slot is not None and len(slot) > MAX_SLOT_DIMS:
            raise marks.error((*path, i), f"{len(slot):,} dims; a tensor has at most "
                                          f"{MAX_SLOT_DIMS}")
        for dim in slot or ():
            dim.check_names(known)
        slots.append(slot)
    return slots


def _generator_pattern(name: str, body: dict, path: tuple, marks: Marks,
                       known_grids: set[str]) -> GeneratorPattern:
    _no_unknown(body, _GENERATOR_KEYS, path, marks, "generator pattern key")
    generator = body["generator"]
    if generator not in GENERATORS:
        raise marks.error((*path, "generator"), f"unknown generator {generator!r} (known: "
                                                f"{', '.join(GENERATORS)})")
    spec = GENERATORS[generator]
    raw = body.get("params") or {}
    if not isinstance(raw, dict):
        raise marks.error((*path, "params"), "expected a mapping of parameter values")
    params: dict[str, ValueSpec] = {}
    for key, value in raw.items():
        ppath = (*path, "params", key)
        if key not in spec.params:
            raise marks.error(ppath, f"unknown parameter {key!r} of generator {generator!r} "
                                     f"(known: {', '.join(spec.params)})")
        params[key] = _value_spec(value, ppath, marks, known_grids, allow_scalar=True)
    constraints = _constraints(body, path, marks, name, set(spec.variables))
    return GeneratorPattern(name=name, generator=generator, params=params,
                            constraints=constraints,
                            op_state=_identity_text(body, "op_state", path, marks),
                            accelerator_core=_identity_text(body, "accelerator_core", path,
                                                            marks),
                            path=path)


def _assignment(kernel_type: str, target: object, path: tuple, marks: Marks,
                patterns: dict[str, Pattern]) -> Assignment:
    if not kernel_type.strip() or any(ch in kernel_type for ch in '/\\<>:"|?*\x00'):
        raise marks.error(path, f"invalid kernel type {kernel_type!r}")
    rows = None
    if isinstance(target, dict):
        _no_unknown(target, {"patterns", "pattern", "rows"}, path, marks, "assignment key")
        if "rows" in target:
            rows = _non_negative_int(target["rows"], (*path, "rows"), marks)
        target = target.get("patterns", target.get("pattern"))
    if isinstance(target, str):
        target = [target]
    if not isinstance(target, list) or not target:
        raise marks.error(path, "expected a pattern name or a list of pattern names")
    for i, name in enumerate(target):
        if name not in patterns:
            raise marks.error((*path, i) if len(target) > 1 else path,
                              f"unknown pattern {name!r} (defined: {', '.join(patterns)})")
    return Assignment(kernel_type, list(target), rows, path)


def check_kernels(config: GridConfig, kernels: list[str] | None) -> list[str]:
    """The kernel types to generate, in config order; unknown names are an error."""
    if not kernels:
        return config.kernel_types
    unknown = [k for k in kernels if k not in config.assignments]
    if unknown:
        raise UnknownKernelError(f"unknown kernel type(s) {', '.join(map(repr, unknown))}: "
                                 f"{config.source} assigns patterns to "
                                 f"{', '.join(config.kernel_types)}")
    wanted = set(kernels)
    return [k for k in config.kernel_types if k in wanted]
