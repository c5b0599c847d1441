"""`npuperf kernels --check [--schemas DIR]`: does every kernel type's NPU call bind?

Each kernel type's NPU call is built the way a replay builds it, from the smallest row of a
database that its spec accepts, and bound to the operators:
- on an NPU host, the installed ones (torch_npu, vllm-ascend loaded as a replay loads it):
  the call is built, which binds it to the installed schemas with their return counts
  (kernels/binding.py), but no kernel runs;
- offline (`--schemas DIR`), the upstream source files in DIR (kernels/schema_sources.py):
  operators built from their schema text (kernels/schema_ops.py) bind the call as torch
  would, and return empty tensors of the schema's arity, which the spec reads as
  verification does; their count must be the portable path's.
One line per kernel type; a user upgrading vllm-ascend or torch_npu runs it before a night of
replays.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch

from ..db.database import Table
from ..db.errors import CellError, NpuperfError
from ..db.layout import kernel_file_name
from ..kernels import catalog
from ..kernels.case import KernelCase, case_from_row
from ..kernels.custom_ops import custom_op_environment
from ..kernels.registry import spec_for
from ..kernels.schema_ops import SchemaOperators
from ..kernels.schema_sources import read_schema_dir
from ..kernels.spec import KernelSpec, ReplaySkipped
from ..kernels.tensors import generator_for

# A group name to bind a multi-rank call with: binding communicates nothing.
CHECK_GROUP = "npuperf_bind_check"


@dataclass(frozen=True)
class BindLine:
    kernel_type: str
    binds: bool
    text: str  # the call that binds (with its variant), or why it does not

    def render(self, width: int) -> str:
        verdict = "binds" if self.binds else "does not bind"
        return f"{self.kernel_type.ljust(width)}  {verdict}: {self.text}"


class HostBackend:
    """Where the portable path's outputs are counted: the host, tensors built for it (an NPU
    call's inputs may hold what an operator that only binds returned: empty tensors)."""

    kind = "cpu"
    index = 0
    device = torch.device("cpu")

    def to_format(self, tensor: torch.Tensor, fmt: str) -> torch.Tensor:
        return tensor  # a storage format is the device's: binding reads no layout

    def l2_cache_bytes(self) -> None:
        return None


class SchemaBackend(HostBackend):
    """An NPU backend whose operators are built from schema text: tensors on the host."""

    kind = "npu"

    def __init__(self, operators: SchemaOperators) -> None:
        self.torch_npu = operators.torch_npu()
        self.custom_operator = operators.custom_operator

    def process_group_name(self, ranks: int) -> str:
        return CHECK_GROUP


class _GroupedNpu:
    """The NPU backend, with a group name for multi-rank calls (bound, never run)."""

    def __init__(self, backend) -> None:
        self._backend = backend

    def __getattr__(self, name: str):
        return getattr(self._backend, name)

    def process_group_name(self, ranks: int) -> str:
        return CHECK_GROUP


def check_bindings(database: Path, schema_dir: Path | None = None, backend=None
                   ) -> list[BindLine]:
    """One line per kernel type with a replay. Offline with `schema_dir`; else on `backend`
    (the NPU backend of this host)."""
    if schema_dir is not None:
        operators = SchemaOperators(read_schema_dir(schema_dir))
        try:
            return _lines(database, SchemaBackend(operators), execute=True)
        finally:
            operators.close()
    if backend is None or backend.kind != "npu":
        raise NpuperfError("npuperf kernels --check: no NPU here to bind to; pass --schemas DIR "
                           "to check against the upstream schema sources")
    backend.activate()
    return _lines(database, _GroupedNpu(backend), execute=False)


def _lines(database: Path, backend, execute: bool) -> list[BindLine]:
    lines = []
    for entry in catalog.entries():
        if entry.replay is None:
            continue
        for kernel_type in entry.kernel_types:
            lines.append(_check_type(kernel_type, database, backend, execute))
    return lines


def _cases(kernel_type: str, database: Path) -> list[KernelCase]:
    """The kernel type's rows that describe a call, smallest first."""
    path = database / kernel_file_name(kernel_type)
    if not path.is_file():
        return []
    table = Table.read(path)
    cases = []
    for position, row in enumerate(table.frame.to_dict("records")):
        try:
            cases.append(case_from_row(kernel_type, {k: str(v) for k, v in row.items()},
                                       file=str(path), row_number=position + 1))
        except CellError:
            continue
    return sorted(cases, key=lambda c: c.io_bytes)


def smallest_case(spec: KernelSpec, kernel_type: str, database: Path) -> KernelCase | str:
    """The smallest row of the kernel type that the spec accepts, or why there is none."""
    cases = _cases(kernel_type, database)
    case = next((c for c in cases if _accepted(spec, c)), None)
    if case is None:
        why = "no row" if not cases else f"none of its {len(cases)} row(s) describes a call"
        return f"{why} in {database} to build its call from"
    return case


def _check_type(kernel_type: str, database: Path, backend, execute: bool) -> BindLine:
    spec = spec_for(kernel_type)
    assert spec is not None
    case = smallest_case(spec, kernel_type, database)
    if isinstance(case, str):
        return BindLine(kernel_type, False, case)
    # The installed operators are loaded as a replay loads them, after the same check.
    if not execute and spec.custom_op and not hasattr(backend, "custom_operator"):
        missing = custom_op_environment()
        if missing:
            return BindLine(kernel_type, False, "custom-op environment: " + "; ".join(missing))
    try:
        return BindLine(kernel_type, True, _bind(spec, case, backend, execute))
    except ReplaySkipped as exc:
        return BindLine(kernel_type, False, f"not built: {exc}")
    except Exception as exc:  # the call does not bind, or cannot be loaded here
        return BindLine(kernel_type, False, _first_line(exc))


def _accepted(spec: KernelSpec, case: KernelCase) -> bool:
    try:
        spec.check(case)
    except CellError:
        return False
    return True


def _bind(spec: KernelSpec, case: KernelCase, backend, execute: bool) -> str:
    tensors = spec.build_inputs(case, backend, generator_for(case, backend.device))
    call = spec.npu_call(tensors, case, backend)
    note = getattr(call, "implementation", None) or spec.npu_api
    if not execute:
        return note
    outputs = spec.results(call(), tensors, case)
    if spec.has_portable_path():
        host = HostBackend()
        inputs = spec.build_inputs(case, host, generator_for(case, host.device))
        expected = _count(lambda: spec.portable_call(inputs, case)(), spec, inputs, case)
        if len(outputs) != expected:
            raise RuntimeError(f"{note}: {len(outputs)} output(s) read from what it returns, "
                               f"the portable path's {expected}")
    return f"{note} ({len(outputs)} output(s))"


def _count(run: Callable[[], object], spec: KernelSpec, tensors, case) -> int:
    return len(spec.results(run(), tensors, case))


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__
