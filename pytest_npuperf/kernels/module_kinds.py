"""The table of module kinds (module_kinds.yaml) and the trace ranges that name their calls.

A kind is a composite piece of a model (an RMS norm, a rotary embedding, a gated activation,
an attention) whose whole time is one call of a database kernel type. It is found in a trace
three ways: a range `npuperf:<kind>:<label>|<tensors>` that `npuperf profile` recorded around
a module's forward or a function's call (its inputs written into the name, as the profiler
writes an operator's: dims, strides, type); an operator of the kind (e.g.
`aten::scaled_dot_product_attention`), with everything it runs; or, in a trace without
ranges, the decomposition eager PyTorch runs for it (ingest/trace_patterns.py).

Torch-free: the profiler side formats the tensors, the parser reads them back.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from ..db.errors import NpuperfError

KINDS_FILE = Path(__file__).with_name("module_kinds.yaml")
KINDS_ENV = "NPUPERF_MODULE_KINDS"  # a user's file of more kinds, read beside the package's
RANGE_PREFIX = "npuperf:"
STEP_RANGE = "npuperf.step#"  # a step marked by the workload (profiling/steps.py)
# The trace metadata's [wall us, waited-for-a-CPU us, threads] of each traced step.
STEP_WAITS = "step_waits"
CONVERTERS = ("rms_norm", "rotary", "gated_activation", "attention")
_LISTS = ("modules", "functions", "operators", "keeps")
_RANGE = re.compile(r"^npuperf:(?P<kind>[A-Za-z0-9_]+):(?P<label>[^|]*)\|(?P<tensors>.*)$")

Tensor = tuple[list[int], list[int], str]  # dims, strides, type (None: an absent argument)


@dataclass(frozen=True)
class ModuleKind:
    name: str
    kernel_type: str
    converter: str
    modules: tuple[str, ...] = ()
    functions: tuple[str, ...] = ()
    operators: tuple[str, ...] = ()
    keeps: tuple[str, ...] = ()


@dataclass
class ModuleKinds:
    kinds: dict[str, ModuleKind] = field(default_factory=dict)
    sources: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._modules = {m: k for k in self.kinds.values() for m in k.modules}
        self._operators = {o: k for k in self.kinds.values() for o in k.operators}

    def of_module(self, class_name: str) -> ModuleKind | None:
        return self._modules.get(class_name)

    def of_operator(self, operator: str) -> ModuleKind | None:
        return self._operators.get(operator)

    def functions(self) -> list[tuple[str, ModuleKind]]:
        return [(f, k) for k in self.kinds.values() for f in k.functions]

    def get(self, name: str) -> ModuleKind | None:
        return self.kinds.get(name)


def _strings(value, where: str) -> tuple[str, ...]:
    if value is None:
        return ()
    if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
        raise NpuperfError(f"{where}: expected a list of names")
    return tuple(value)


def _merge(kinds: dict[str, ModuleKind], document: object, source: str) -> None:
    if document is None:
        return
    if not isinstance(document, Mapping):
        raise NpuperfError(f"{source}: expected a mapping of kind name -> kernel_type, modules, "
                           f"functions, operators")
    for name, spec in document.items():
        where = f"{source}: kind {name!r}"
        if not isinstance(spec, Mapping):
            raise NpuperfError(f"{where}: expected a mapping")
        unknown = set(spec) - {"kernel_type", "converter", *_LISTS}
        if unknown:
            raise NpuperfError(f"{where}: unknown key(s) {', '.join(sorted(map(str, unknown)))}")
        old = kinds.get(str(name))
        converter = str(spec.get("converter") or (old.converter if old else name))
        if converter not in CONVERTERS:
            raise NpuperfError(f"{where}: converter {converter!r} is not one of "
                               f"{', '.join(CONVERTERS)}")
        kernel_type = str(spec.get("kernel_type") or (old.kernel_type if old else ""))
        if not kernel_type:
            raise NpuperfError(f"{where}: no kernel_type")
        lists = {key: (getattr(old, key) if old else ()) + tuple(
            v for v in _strings(spec.get(key), f"{where}, {key}")
            if not old or v not in getattr(old, key)) for key in _LISTS}
        kinds[str(name)] = ModuleKind(str(name), kernel_type, converter, **lists)


def load_kinds(extra: str | Path | Iterable[str | Path] | None = None) -> ModuleKinds:
    """The package's kinds, then those of `extra` files and of $NPUPERF_MODULE_KINDS."""
    kinds: dict[str, ModuleKind] = {}
    files = [KINDS_FILE]
    if extra:
        files += [Path(extra)] if isinstance(extra, (str, Path)) else [Path(e) for e in extra]
    if os.environ.get(KINDS_ENV):
        files += [Path(p) for p in os.environ[KINDS_ENV].split(os.pathsep) if p]
    for path in files:
        try:
            document = yaml.safe_load(path.read_text(encoding="utf-8"))
        except OSError as exc:
            raise NpuperfError(f"{path}: cannot read the module kinds: "
                               f"{exc.strerror or exc}") from None
        except yaml.YAMLError as exc:
            raise NpuperfError(f"{path}: not YAML ({' '.join(str(exc).split())[:200]})") \
                from None
        _merge(kinds, document, str(path))
    return ModuleKinds(kinds, [str(p) for p in files])


# -- the ranges --------------------------------------------------------------------------------
def _ints(values) -> str:
    return ",".join(str(int(v)) for v in values)


def range_name(kind: str, label: str, tensors: Iterable[Tensor | None]) -> str:
    """`npuperf:<kind>:<label>|dims/strides/type;...` (an absent argument: an empty slot)."""
    cells = ["" if t is None else f"{_ints(t[0])}/{_ints(t[1])}/{t[2]}" for t in tensors]
    return f"{RANGE_PREFIX}{kind}:{label.replace('|', '_')}|{';'.join(cells)}"


def _int_list(text: str) -> list[int]:
    return [int(v) for v in text.split(",") if v != ""]


def parse_range(name: str) -> tuple[str, str, list[Tensor | None]] | None:
    """(kind, label, tensors) of a range name; None for any other range."""
    if not name.startswith(RANGE_PREFIX):
        return None
    match = _RANGE.match(name)
    if match is None:
        return None
    tensors: list[Tensor | None] = []
    for cell in match["tensors"].split(";") if match["tensors"] else []:
        parts = cell.split("/")
        if len(parts) != 3:
            tensors.append(None)
            continue
        try:
            tensors.append((_int_list(parts[0]), _int_list(parts[1]), parts[2]))
        except ValueError:
            tensors.append(None)
    return match["kind"], match["label"], tensors
