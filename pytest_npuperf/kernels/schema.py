"""Operator schemas and whether a call binds to one.

An NPU replay calls operators whose signatures change between releases (vllm-ascend's
`dispatch_ffn_combine` took no bias in v0.18.0 and requires it from v0.20.2rc1). Every
operator the replays call is a torch operator with a schema (`torch.ops.npu.*` behind
torch_npu's functions, `torch.ops.atb.*`, `torch.ops._C_ascend.*`, `torch.ops.vllm.*`), so a
call is checked against the installed operator's schema before it is timed, and offline
against the schema text of the upstream sources (schema_sources.py).

Binding follows torch's own rules for a call through `torch.ops`: positional arguments first,
keyword-only ones (after `*`) by name, a parameter without a default required even when its
type is optional (`Tensor? zero_points` must be passed, None allowed), and a value of the
declared type (a torch.dtype where the schema says `int` too: torch converts it, as
op-plugin's own examples call `npu_quantize(x, scale, None, torch.qint8, -1, False)` against
`int dtype`).
"""

from __future__ import annotations

import inspect
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import torch

__all__ = ["Argument", "OpSchema"]


@dataclass(frozen=True)
class Argument:
    name: str
    type: str  # torch's type text: "Tensor", "Optional[Tensor]", "List[Tensor]", "int", ...
    kwarg_only: bool
    required: bool  # no default value
    default: object = None
    written: bool = False  # Tensor(a!): the operator writes it in place


@dataclass(frozen=True)
class OpSchema:
    """One overload of an operator. `returns` is None when unknown (a Python function)."""

    name: str  # without the namespace
    overload: str  # "" for the default overload
    arguments: tuple[Argument, ...]
    returns: tuple[str, ...] | None
    text: str = ""
    # Per return, the argument it is (a `Tensor(a!)` return is the tensor written in place).
    aliases: tuple[str | None, ...] = ()

    @classmethod
    def parse(cls, text: str) -> OpSchema:
        """A schema in torch's text form, e.g. `npu_slice(Tensor self, int[] offsets,
        int[] size) -> Tensor` (a `namespace::` prefix is dropped)."""
        return cls.of(torch._C.parse_schema(text.strip()), text.strip())

    @classmethod
    def of(cls, parsed: torch._C.FunctionSchema, text: str = "") -> OpSchema:
        """From torch's own schema object (an operator's `_schema`)."""
        arguments = []
        for arg in parsed.arguments:
            kind = getattr(arg, "real_type", arg.type)
            arguments.append(Argument(
                arg.name, str(kind), bool(arg.kwarg_only), not arg.has_default_value(),
                arg.default_value, bool(arg.alias_info is not None and arg.alias_info.is_write)))
        by_alias = {_alias_set(a.alias_info): a.name for a in parsed.arguments
                    if a.alias_info is not None and a.alias_info.is_write}
        aliases = tuple(by_alias.get(_alias_set(r.alias_info)) if r.alias_info is not None
                        else None for r in parsed.returns)
        return cls(parsed.name.split("::")[-1], parsed.overload_name, tuple(arguments),
                   tuple(str(r.type) for r in parsed.returns), text or str(parsed), aliases)

    @classmethod
    def from_signature(cls, name: str, signature: inspect.Signature) -> OpSchema | None:
        """The schema of a Python function (types unknown, only names, kinds and defaults);
        None when it takes anything (`*args, **kwargs`): nothing to check against."""
        arguments = []
        for param in signature.parameters.values():
            if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
                return None
            required = param.default is param.empty
            arguments.append(Argument(param.name, "", param.kind == param.KEYWORD_ONLY,
                                      required, None if required else param.default))
        return cls(name, "", tuple(arguments), None, f"{name}{signature}")

    @property
    def full_name(self) -> str:
        return f"{self.name}.{self.overload}" if self.overload else self.name

    @property
    def returned(self) -> int | None:
        """How many values the operator returns (a `Tensor[]` counts as one), None if unknown."""
        return None if self.returns is None else len(self.returns)

    def problem(self, args: Sequence[object] = (), kwargs: Mapping[str, object] | None = None
                ) -> str:
        """Why `op(*args, **kwargs)` does not bind to this schema; "" when it does."""
        kwargs = dict(kwargs or {})
        positional = [a for a in self.arguments if not a.kwarg_only]
        if len(args) > len(positional):
            return (f"{self.full_name} takes {len(positional)} positional argument(s), "
                    f"{len(args)} given")
        given = {a.name: value for a, value in zip(positional, args)}
        known = {a.name for a in self.arguments}
        for name, value in kwargs.items():
            if name not in known:
                return f"{self.full_name} has no parameter {name!r}"
            if name in given:
                return f"{self.full_name}: {name!r} given twice"
            given[name] = value
        for arg in self.arguments:
            if arg.name not in given:
                if arg.required:
                    return f"{self.full_name}: required parameter {arg.name!r} is missing"
                continue
            if arg.type and not _fits(given[arg.name], arg.type):
                return (f"{self.full_name}: {arg.name!r} is a {arg.type}, not "
                        f"{_describe(given[arg.name])}")
        return ""

    def bind(self, args: Sequence[object] = (), kwargs: Mapping[str, object] | None = None
             ) -> dict[str, object]:
        """Every parameter's value for this call, defaults applied (TypeError if it does not
        bind)."""
        problem = self.problem(args, kwargs)
        if problem:
            raise TypeError(problem)
        positional = [a for a in self.arguments if not a.kwarg_only]
        values = {a.name: value for a, value in zip(positional, args)}
        values.update(kwargs or {})
        return {a.name: values.get(a.name, a.default) for a in self.arguments}


def _alias_set(info) -> tuple[str, ...]:
    return tuple(sorted(str(s) for s in info.before_set)) if info is not None else ()


def _describe(value: object) -> str:
    if isinstance(value, torch.Tensor):
        return "Tensor"
    if isinstance(value, (list, tuple)):
        inner = sorted({_describe(v) for v in value})
        return f"{type(value).__name__} of {', '.join(inner)}" if inner else "an empty list"
    return type(value).__name__


_SCALARS = {
    "int": lambda v: isinstance(v, (int, torch.dtype)),  # torch passes a dtype as its number
    "SymInt": lambda v: isinstance(v, int),
    "float": lambda v: isinstance(v, (int, float)) and not isinstance(v, bool),
    "bool": lambda v: isinstance(v, bool),
    "str": lambda v: isinstance(v, str),
    "ScalarType": lambda v: isinstance(v, torch.dtype),
    "number": lambda v: isinstance(v, (int, float, complex)),
    "Tensor": lambda v: isinstance(v, torch.Tensor),
}


def _fits(value: object, kind: str) -> bool:
    """Whether a Python value is accepted for a parameter of torch's type text `kind`."""
    if kind.startswith("Optional[") and kind.endswith("]"):
        return value is None or _fits(value, kind[len("Optional["):-1])
    if kind.startswith("List[") and kind.endswith("]"):
        inner = kind[len("List["):-1]
        return isinstance(value, (list, tuple)) and all(_fits(v, inner) for v in value)
    check = _SCALARS.get(kind)
    return check(value) if check is not None else True  # Device, Layout, ...: not checked
