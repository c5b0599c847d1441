"""Binding an NPU call to the operator installed: the first known call that fits its schema.

A spec lists the calls it knows for an operator, newest schema first (`Variant`): the same
replay, written for each schema the supported stacks have. `bound_call` picks the first whose
arguments bind to the installed operator's schema and whose return count is the schema's, and
says which one ran in the case's implementation note; when none binds, the case fails with
every schema's reason in one line, before anything is timed.

The installed schema: a `torch.ops` operator carries its own (`OpOverloadPacket` overloads,
`OpOverload._schema`); a Python function its signature. torch_npu's ATB functions are lazy
Python wrappers (`*args, **kwargs`, op-plugin op_plugin/python/atb/_atb_ops.py) until their
first call: their schema is read from `torch.ops.atb`, which loading torch_npu registers.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

import torch

from .schema import OpSchema
from .spec import implemented

__all__ = ["BindError", "Variant", "bound_call", "installed_schemas"]


class BindError(RuntimeError):
    """No known call of the operator binds to the installed schema."""


@dataclass(frozen=True)
class Variant:
    """One way of calling an operator, for the schema(s) of some releases."""

    label: str  # which schema it is written for, e.g. "vllm-ascend v0.18.0"
    args: tuple = ()
    kwargs: Mapping[str, object] = field(default_factory=dict)
    returns: int | None = None  # how many values it returns; None: not checked

    def problem(self, schemas: list[OpSchema]) -> str:
        """Why it binds to none of an operator's overloads ("" when it binds to one)."""
        reasons = []
        for schema in schemas:
            reason = schema.problem(self.args, self.kwargs)
            if not reason and self.returns is not None and schema.returned not in (
                    None, self.returns):
                reason = (f"{schema.full_name} returns {schema.returned} value(s), this call "
                          f"reads {self.returns}")
            if not reason:
                return ""
            reasons.append(reason)
        return "; ".join(reasons)


def installed_schemas(op: object, namespace: str = "") -> list[OpSchema] | None:
    """The overloads' schemas of an operator; None when nothing says how it is called."""
    found = _op_schemas(op)
    if found is None and namespace:
        name = getattr(op, "__name__", "")
        found = _op_schemas(getattr(getattr(torch.ops, namespace, None), name, None)) \
            if name else None
    if found is None and callable(op):
        try:
            signature = inspect.signature(op)
        except (TypeError, ValueError):
            return None
        schema = OpSchema.from_signature(getattr(op, "__name__", "?"), signature)
        return [schema] if schema is not None else None
    return found


def _op_schemas(op: object) -> list[OpSchema] | None:
    if op is None:
        return None
    if isinstance(op, torch._ops.OpOverloadPacket):
        return [OpSchema.of(getattr(op, name)._schema) for name in op.overloads()]
    schema = getattr(op, "_schema", None)
    return [OpSchema.of(schema)] if schema is not None else None


def choose(op: object, api: str, variants: tuple[Variant, ...], namespace: str = ""
           ) -> tuple[Variant, str]:
    """The first variant that binds to the installed operator, and what the case note says
    of it (raises BindError)."""
    def note(variant: Variant, extra: str = "") -> str:
        said = [s for s in (variant.label if len(variants) > 1 else "", extra) if s]
        return f"{api} [{'; '.join(said)}]" if said else api

    schemas = installed_schemas(op, namespace)
    if schemas is None:  # nothing to check against: the newest call, and the note says so
        return variants[0], note(variants[0], "schema not checked")
    reasons = []
    for variant in variants:
        reason = variant.problem(schemas)
        if not reason:
            return variant, note(variant)
        reasons.append(f"{variant.label}: {reason}" if len(variants) > 1 else reason)
    raise BindError(f"{api} does not bind to the installed operator: " + " | ".join(reasons))


def bound_call(op: Callable[..., object], api: str, *variants: Variant, namespace: str = ""
               ) -> Callable[[], object]:
    """`op` called as the first variant that binds, tagged with the case note."""
    variant, note = choose(op, api, variants, namespace)
    args, kwargs = variant.args, dict(variant.kwargs)
    return implemented(note, lambda: op(*args, **kwargs))


def torch_npu_call(backend, name: str, args: tuple = (), kwargs: Mapping[str, object] | None = None,
                   *, returns: int | None, module: str = "", namespace: str = "npu"
                   ) -> Callable[[], object]:
    """`torch_npu[.module].<name>(*args, **kwargs)`, bound to the installed schema; `returns`:
    how many values the replay reads from it."""
    owner = getattr(backend.torch_npu, module) if module else backend.torch_npu
    api = f"torch_npu.{module + '.' if module else ''}{name}"
    return bound_call(getattr(owner, name), api, Variant("", tuple(args), dict(kwargs or {}),
                                                         returns), namespace=namespace)
