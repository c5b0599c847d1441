"""`npuperf grid`: plan the rows per kernel type, then append them to a database directory.

Planning reads the database, streams every pattern's candidates through the memory filter,
de-duplication and the seeded sample, and builds the chosen rows; nothing is written until
every kernel type has been planned without error. Writing takes the database lock, checks that
no file changed meanwhile, stages every file and renames them into place together.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from .. import __version__
from ..db.append import ExistingFile, read_existing, stage_rows, unchanged_since
from ..db.columns import (
    ACCELERATOR_CORE,
    DISPATCH_FFN_COMBINE,
    EP_SIZE,
    INPUT_DTYPES,
    INPUT_FORMATS,
    INPUT_SHAPES,
    OP_STATE,
    OUTPUT_DTYPES,
    OUTPUT_FORMATS,
    OUTPUT_SHAPES,
    SIGNATURE_COLUMNS,
)
from ..db.database import Database
from ..db.errors import CellError, NpuperfError
from ..db.layout import kernel_file_name
from ..db.op_mapping import KEPT
from ..db.progress import Progress
from ..db.provenance import collection_entry, stage_provenance
from ..db.shapes import DTYPE_BYTES, dtype_cell, format_cell, format_shapes, normalize_dtype
from ..db.signature import Signature, generic_signature, signature, signature_kind
from ..db.table import check_writable_dir
from ..db.transaction import recover_if_free
from ..kernels import catalog
from ..kernels.mapping_writer import ensure_op_mapping
from .config import (
    DEFAULT_MAX_HBM_GB,
    DEFAULT_ROWS,
    DEFAULT_SEED,
    MAX_CANDIDATES,
    GeneratorPattern,
    GridConfig,
    TemplatePattern,
    candidate_count,
    check_kernels,
    load_config,
)
from .errors import BudgetError, GridError
from .generators import GENERATORS, Candidate
from .memory import GIB, budget_bytes, estimate_bytes
from .models import Model, ModelRegistry, load_model_file, model_grids
from .sampling import KernelStats, Key, KeySpace, Picked, sample_rng, stream_kernel
from .template import EVALUATION_ERRORS, CompiledTemplate

DEFAULT_OP_STATE = "dynamic"


def default_core(kernel_type: str) -> str:
    return catalog.accelerator_core(kernel_type)


def family_of(kernel_type: str) -> list[str]:
    """Kernel types sharing one signature space with `kernel_type` (itself included): the
    types whose rows are calls of one replay."""
    return list(catalog.same_call_types(kernel_type))


@dataclass
class KernelPlan:
    kernel_type: str
    stats: KernelStats
    rows: list[dict[str, str]] = field(default_factory=list)
    cap: int = 0
    how: str = ""


@dataclass
class GridSettings:
    config: GridConfig
    models: list[Model]
    kernels: list[str]
    rows: int | None
    seed: int
    max_hbm_gb: float


@dataclass
class GridSummary:
    settings: GridSettings
    plans: list[KernelPlan]
    data_dir: Path | None = None
    dry_run: bool = False
    notes: list[str] = field(default_factory=list)
    op_mapping: str = ""  # what happened to op_mapping.yaml: kept, generated, regenerated

    @property
    def rows_added(self) -> int:
        return sum(len(p.rows) for p in self.plans)

    @property
    def warnings(self) -> list[str]:
        """One line per kernel type whose rows (would) go in without a replay to measure them."""
        verb = "would get" if self.dry_run else "got"
        return [f"{p.kernel_type}: {len(p.rows)} row(s) {verb} no replay spec: their cases are "
                f"skipped until one is added (docs/kernels.md: adding a kernel type)"
                for p in self.plans if p.rows and not catalog.replayable(p.kernel_type)]

    def render(self) -> str:
        s = self.settings
        budget = f"{s.max_hbm_gb:g} GiB per row" if s.max_hbm_gb else "no memory budget"
        lines = [f"grid {s.config.source}: models {', '.join(m.name for m in s.models)}; "
                 f"seed {s.seed}; {budget}"]
        verb = "would add" if self.dry_run else "added"
        width = max([len("kernel type")] + [len(p.kernel_type) for p in self.plans])
        lines.append(f"{'kernel type':<{width}}  {'candidates':>11}  {'over memory':>11}  "
                     f"{'duplicates':>10}  {verb:>9}")
        for plan in self.plans:
            st = plan.stats
            lines.append(f"{plan.kernel_type:<{width}}  {st.candidates:>11,}  "
                         f"{st.over_budget:>11,}  {st.duplicates + st.present:>10,}  "
                         f"{len(plan.rows):>9,}")
        for plan in self.plans:
            for note in plan.stats.notes:
                lines.append(f"  {plan.kernel_type}: {note}")
        lines.extend(self.notes)
        files = sum(1 for p in self.plans if p.rows)
        where = f" in {self.data_dir}" if self.data_dir is not None else ""
        if self.dry_run:
            lines.append(f"dry run: {self.rows_added} row(s) would be added to {files} file(s)"
                         f"{where}; nothing written")
        else:
            lines.append(f"added {self.rows_added} row(s) to {files} file(s){where}")
            if self.op_mapping and self.op_mapping != KEPT:
                lines.append(f"op_mapping.yaml {self.op_mapping} (what the simulator maps to "
                             f"these tables)")
        return "\n".join(lines)


# ---------------------------------------------------------------------------------------------

def _split_names(value: str | Iterable[str] | None) -> list[str] | None:
    if value is None:
        return None
    items = value.split(",") if isinstance(value, str) else list(value)
    names = [str(v).strip() for v in items if str(v).strip()]
    return names or None


def resolve_settings(kernels: str | Iterable[str] | None = None, *,
                     config_path: str | Path | None = None,
                     target_models: str | Iterable[str] | None = None,
                     model_file: str | Path | None = None, rows: int | None = None,
                     seed: int | None = None, max_hbm_gb: float | None = None) -> GridSettings:
    if rows is not None and (isinstance(rows, bool) or int(rows) != rows or rows < 0):
        raise GridError(f"--rows must be a whole number >= 0 (0 = no cap), got {rows!r}")
    if max_hbm_gb is not None and (not math.isfinite(max_hbm_gb) or max_hbm_gb < 0):
        raise GridError(f"--max-hbm-gb must be a number >= 0 (0 = no budget), got {max_hbm_gb!r}")
    config = load_config(config_path)
    registry = ModelRegistry()
    file_models: list[Model] = []
    if model_file is not None:
        file_models = load_model_file(model_file)
        for model in file_models:
            registry.add(model)
    names = _split_names(target_models)
    if names:
        models = registry.resolve(names)
    elif file_models:
        models = file_models
    elif config.models:
        models = registry.resolve(config.models)
    else:
        models = list(registry.models)
    chosen = check_kernels(config, _split_names(kernels))
    return GridSettings(
        config=config, models=models, kernels=chosen,
        rows=int(rows) if rows is not None else None,
        seed=int(seed) if seed is not None else (config.seed if config.seed is not None
                                                 else DEFAULT_SEED),
        max_hbm_gb=float(max_hbm_gb) if max_hbm_gb is not None else (
            config.max_hbm_gb if config.max_hbm_gb is not None else DEFAULT_MAX_HBM_GB))


def _cap(settings: GridSettings, kernel_type: str) -> int:
    if settings.rows is not None:
        return settings.rows
    assigned = settings.config.assignments[kernel_type].rows
    if assigned is not None:
        return assigned
    return settings.config.rows if settings.config.rows is not None else DEFAULT_ROWS


# ---------------------------------------------------------------------------------------------
# Candidate sources

@dataclass
class _Source:
    stream: Iterator[tuple[Key, float, object]]
    to_candidate: object            # callable(payload) -> Candidate
    template: CompiledTemplate | None
    pattern: TemplatePattern | GeneratorPattern
    op_state: str
    core: str


def _generator_params(pattern: GeneratorPattern, grids, config: GridConfig) -> dict[str, tuple]:
    spec = GENERATORS[pattern.generator]
    params: dict[str, tuple] = {k: tuple(v) for k, v in spec.params.items()}
    marks = config.marks
    for name, value in pattern.params.items():
        values = value.resolve(grids)
        path = value.path
        if not isinstance(values, range) and any(isinstance(v, tuple) for v in values):
            raise marks.error(path, "expected single values, not tuples")
        if name.endswith("dtype"):
            for v in values:
                if not isinstance(v, str) or normalize_dtype(v) not in DTYPE_BYTES:
                    raise marks.error(path, f"unknown dtype {v!r}")
            values = tuple(normalize_dtype(v) for v in values)
        elif name in ("scenes", "phase"):
            allowed = spec.params[name]
            for v in values:
                if v not in allowed:
                    raise marks.error(path, f"unknown {name} value {v!r} (allowed: "
                                            f"{', '.join(allowed)})")
        else:
            for v in values:
                if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                    raise marks.error(path, f"expected whole numbers >= 1, got {v!r}")
        params[name] = tuple(values)
    return params


def direct_signature(kernel_type: str, cand: Candidate) -> Signature:
    """`db.signature` of a candidate's row, built from its slots without formatting cells.

    Only for kernel types with the generic signature (the MatMul family, Index, Slice and
    Transpose go through `db.signature`); sampled rows are checked against `db.signature`.
    """
    def side(shapes, dtypes, formats):
        out = [((s, d, f) if formats is not None else (s, d)) if s is not None
               else ((None, "", "") if formats is not None else (None, ""))
               for s, d, f in zip(shapes, dtypes, formats or dtypes)]
        while out and out[-1][0] is None:
            out.pop()
        return tuple(out)

    ep = cand.extra.get(EP_SIZE, "") if kernel_type == DISPATCH_FFN_COMBINE else None
    return generic_signature(side(cand.inputs, cand.in_dtypes, cand.in_formats),
                             side(cand.outputs, cand.out_dtypes, None), ep)


def _row_signature(kernel_type: str, row: Mapping[str, str]) -> Signature:
    return signature(kernel_type, *(row[c] for c in SIGNATURE_COLUMNS), row.get(EP_SIZE, ""))


def _generator_stream(pattern: GeneratorPattern, kernel_type: str, params, models: list[Model],
                      keys: KeySpace, config: GridConfig
                      ) -> Iterator[tuple[Key, float, Candidate]]:
    spec = GENERATORS[pattern.generator]
    constraints = pattern.constraints
    direct = signature_kind(kernel_type) == "generic"
    for cand in spec.run(params, models):
        if constraints and not all(c.evaluate(cand.variables) for c in constraints):
            continue
        if direct:
            sig = direct_signature(kernel_type, cand)
        else:
            sig = _row_signature(kernel_type, _cells(cand) | cand.extra)
        yield (keys.key(sig), estimate_bytes(cand.inputs, cand.in_dtypes, cand.outputs,
                                             cand.out_dtypes), cand)


def _sources(settings: GridSettings, kernel_type: str, grids, keys: KeySpace) -> list[_Source]:
    config = settings.config
    out = []
    counts: list[tuple[str, int]] = []
    for name in config.assignments[kernel_type].patterns:
        pattern = config.patterns[name]
        op_state = pattern.op_state or DEFAULT_OP_STATE
        core = pattern.accelerator_core or default_core(kernel_type)
        if isinstance(pattern, TemplatePattern):
            template = CompiledTemplate(pattern, kernel_type, grids, keys, config.marks,
                                        op_state=op_state, core=core)
            counts.append((name, template.count))
            out.append(_Source(template.candidates(), template.candidate, template, pattern,
                               op_state, core))
        else:
            params = _generator_params(pattern, grids, config)
            # The generator's loops run over its parameters for every model: an upper bound.
            counts.append((name, candidate_count(list(params.values()))
                           * max(1, len(settings.models))))
            stream = _generator_stream(pattern, kernel_type, params, settings.models, keys, config)
            out.append(_Source(stream, lambda cand: cand, None, pattern, op_state, core))
    total = sum(n for _, n in counts)
    if total > MAX_CANDIDATES:
        shown = ", ".join(f"{name}: {n:,}" for name, n in counts)
        raise GridError(f"{config.source}: {kernel_type} would stream {total:,} candidates "
                        f"({shown}); at most {MAX_CANDIDATES:,}: narrow its patterns' values")
    return out


# ---------------------------------------------------------------------------------------------
# Rows

def _cells(cand: Candidate) -> dict[str, str]:
    """Identity cells in the spellings of real profiler output (`FLOAT`, `DT_BF16`, ...)."""
    return {
        INPUT_SHAPES: format_shapes(cand.inputs), INPUT_DTYPES: dtype_cell(cand.in_dtypes),
        INPUT_FORMATS: format_cell(cand.in_formats), OUTPUT_SHAPES: format_shapes(cand.outputs),
        OUTPUT_DTYPES: dtype_cell(cand.out_dtypes), OUTPUT_FORMATS: format_cell(cand.out_formats),
    }


def candidate_row(cand: Candidate, *, op_state: str, core: str) -> dict[str, str]:
    """A theory row: identity cells (plus EP Size / Runtime ...), no performance values."""
    row = {OP_STATE: op_state, ACCELERATOR_CORE: core, **_cells(cand)}
    row.update(cand.extra)
    return row


def _where(source: _Source, config: GridConfig) -> str:
    return f"{config.marks.where(source.pattern.path)}: pattern {source.pattern.name!r}"


MAX_ELEMENTS = 2 ** 63 - 1  # torch's sizes and the profiler's are int64

SIGNATURE_CHECKS = 64
"""Picks per source whose key is re-checked against `db.signature` of the finished row."""


def _verify(kernel_type: str, row: dict[str, str], key: Key, keys: KeySpace, where: str, *,
            check_key: bool) -> None:
    """The row's signature is the key it was sampled with; a replay spec accepts the row. The
    `Runtime ...` cells the replay's own arguments decide (the sequence lengths of sparse
    attention) are added where the row has none: the simulator reads them."""
    from ..kernels.case import case_from_row
    from ..kernels.registry import spec_for

    if check_key and keys.key(_row_signature(kernel_type, row)) != key:
        raise GridError(f"{where}: internal error: the signature of row {row[INPUT_SHAPES]!r} "
                        f"does not match the key it was sampled with")
    case = case_from_row(kernel_type, row)
    huge = next((s.dims for s in (*case.inputs, *case.outputs) if s.numel > MAX_ELEMENTS), None)
    if huge is not None:  # with no memory budget, nothing else stops it
        raise GridError(f"{where}: generates a {kernel_type} row with a tensor of shape {huge}: "
                        f"more elements than any tensor can have (2^63 - 1)")
    spec = spec_for(kernel_type)
    if spec is None:
        return
    try:
        spec.check(case)
    except CellError as exc:
        raise GridError(f"{where}: generates a {kernel_type} row that cannot be replayed "
                        f"({row[INPUT_SHAPES]} -> {row[OUTPUT_SHAPES]}): {exc.reason}") from None
    runtime = spec.runtime_cells(case)
    row.update({column: text for column, text in runtime.items() if not row.get(column)})


# ---------------------------------------------------------------------------------------------
# Planning

def existing_keys(kernel_type: str, signatures: Mapping[str, Iterable[Signature | None]],
                  taken: Mapping[str, set[Key]], keys: KeySpace) -> dict[Key, bool]:
    """Keys already in the database: True for the kernel's own file, False for its family."""
    out: dict[Key, bool] = {}
    for sibling in family_of(kernel_type):
        if sibling == kernel_type:
            continue
        for key in keys.keys(signatures.get(sibling, ())):
            out[key] = False
        for key in taken.get(sibling, ()):
            out[key] = False
    for key in keys.keys(signatures.get(kernel_type, ())):
        out[key] = True
    return out


def plan_rows(settings: GridSettings, signatures: Mapping[str, Iterable[Signature | None]],
              *, show_progress: bool = False) -> list[KernelPlan]:
    """Stream, filter, de-duplicate and sample every kernel type; build the chosen rows."""
    keys = KeySpace()
    grids = settings.config.resolved_grids(model_grids(settings.models))
    budget = budget_bytes(settings.max_hbm_gb)
    signatures = {k: list(v) for k, v in signatures.items()}
    taken: dict[str, set[Key]] = {}
    plans = []
    for kernel_type in settings.kernels:
        stats = KernelStats(kernel_type)
        cap = _cap(settings, kernel_type)
        sources = _sources(settings, kernel_type, grids, keys)
        progress = Progress(f"grid {kernel_type}", unit=" candidates", enabled=show_progress)
        try:
            picks: list[Picked] = stream_kernel(
                stats, [s.stream for s in sources], budget=budget, cap=cap,
                rng=sample_rng(settings.seed, kernel_type),
                existing=existing_keys(kernel_type, signatures, taken, keys),
                progress=progress.update)
        except EVALUATION_ERRORS as exc:
            failed = sources[stats.source] if stats.source >= 0 else None
            if failed is None or failed.template is None:
                raise
            raise failed.template.diagnose(exc) from None
        progress.finish(f"({stats.candidates:,} candidates)")
        if stats.all_over_budget:
            raise BudgetError(
                f"--max-hbm-gb {settings.max_hbm_gb:g} is below every one of the "
                f"{stats.candidates:,} candidate {kernel_type} rows (the smallest needs "
                f"{stats.smallest_over / GIB:.4g} GiB); raise the budget or leave "
                f"{kernel_type} out with --kernels")
        if not stats.candidates:
            stats.notes.append("no candidates (nothing in its patterns applies to these "
                               "models)")
        rows = []
        checked = [0] * len(sources)
        for pick in picks:
            source = sources[pick.source]
            cand = source.to_candidate(pick.payload)  # type: ignore[operator]
            row = candidate_row(cand, op_state=source.op_state, core=source.core)
            checked[pick.source] += 1
            _verify(kernel_type, row, pick.key, keys, _where(source, settings.config),
                    check_key=checked[pick.source] <= SIGNATURE_CHECKS)
            rows.append(row)
        stats.added = len(rows)
        taken[kernel_type] = {p.key for p in picks}
        plans.append(KernelPlan(kernel_type, stats, rows, cap))
    return plans


def generate_rows(kernels: list[str] | str | None = None, *, config_path: str | Path | None = None,
                  target_models: str | Iterable[str] | None = None,
                  model_file: str | Path | None = None, rows: int | None = None,
                  seed: int | None = None, max_hbm_gb: float | None = None,
                  existing: Mapping[str, Iterable[Signature | None]] | None = None,
                  show_progress: bool = False) -> dict[str, list[dict[str, str]]]:
    """The new theory rows per kernel type, as {column: cell} dicts, without writing anything.

    `existing` maps kernel types to the `db.signature` of rows already in a database (those
    are not generated again; rows of the kernel's own type count toward `rows`).
    """
    settings = resolve_settings(kernels, config_path=config_path, target_models=target_models,
                                model_file=model_file, rows=rows, seed=seed,
                                max_hbm_gb=max_hbm_gb)
    plans = plan_rows(settings, existing or {}, show_progress=show_progress)
    return {p.kernel_type: p.rows for p in plans}


def _read_database(data_dir: Path, kernels: list[str]) -> dict[str, ExistingFile | None]:
    files: dict[str, ExistingFile | None] = {}
    for kernel_type in kernels:
        for member in family_of(kernel_type):
            if member not in files:
                files[member] = read_existing(data_dir / kernel_file_name(member), member)
    return files


def run_grid(data_dir: str | Path, kernels: list[str] | str | None = None, *,
             config_path: str | Path | None = None,
             target_models: str | Iterable[str] | None = None,
             model_file: str | Path | None = None, rows: int | None = None,
             seed: int | None = None, max_hbm_gb: float | None = None, dry_run: bool = False,
             show_progress: bool = True) -> GridSummary:
    """The whole `npuperf grid` job on one database (version) directory."""
    data_dir = Path(data_dir)
    if data_dir.exists() and not data_dir.is_dir():
        raise NpuperfError(f"{data_dir}: not a directory")
    settings = resolve_settings(kernels, config_path=config_path, target_models=target_models,
                                model_file=model_file, rows=rows, seed=seed,
                                max_hbm_gb=max_hbm_gb)
    if not dry_run:  # a writer creates the directory it writes into (once the job is valid)
        data_dir.mkdir(parents=True, exist_ok=True)
        check_writable_dir(data_dir)
    recovered = recover_if_free(data_dir)  # an interrupted write is rolled back before reading
    files = _read_database(data_dir, settings.kernels)
    signatures = {k: f.signatures for k, f in files.items() if f is not None}
    plans = plan_rows(settings, signatures, show_progress=show_progress)
    summary = GridSummary(settings, plans, data_dir, dry_run, notes=list(recovered))
    for _kernel_type, existing in files.items():
        if existing is not None and existing.bad_rows:
            summary.notes.append(f"{existing.path.name}: {existing.bad_rows} row(s) with "
                                 f"unparsable identity cells were ignored (run npuperf validate)")
    todo = [p for p in plans if p.rows]
    if dry_run:
        return summary
    with Database(data_dir).transaction("npuperf grid") as tx:
        for plan in todo:
            path = data_dir / kernel_file_name(plan.kernel_type)
            existing = files.get(plan.kernel_type)
            if not unchanged_since(existing, path):
                raise NpuperfError(f"{path} changed while the grid was being generated; "
                                   f"nothing was written, run the command again")
            plan.how = stage_rows(tx, path, plan.kernel_type, plan.rows, existing)
        # Even without new rows: a database the grid wrote reaches the simulator only with it.
        summary.op_mapping = ensure_op_mapping(tx, data_dir)
        if todo:
            stage_provenance(tx, data_dir, collection=collection_entry(
                data_dir, "grid", {p.kernel_type: len(p.rows) for p in todo},
                version=__version__, config=str(settings.config.source),
                models=[m.name for m in settings.models], seed=settings.seed,
                max_hbm_gb=settings.max_hbm_gb))
        summary.notes[:0] = tx.notes
    return summary


__all__ = ["GridSettings", "GridSummary", "KernelPlan", "candidate_row", "generate_rows",
           "plan_rows", "resolve_settings", "run_grid"]
