"""Operators built from schema text that only bind: for `npuperf kernels --check --schemas`.

Each schema a call needs is defined with torch.library under a namespace of its own (never
the real `npu`, `atb`, `_C_ascend` or `vllm`), so that torch itself binds the call against
it, exactly as it binds a call to the installed operator; its implementation computes
nothing: it returns empty tensors in the schema's return arity (a `Tensor(a!)` return is the
tensor written in place, `-> ()` returns None). Nothing here is a measurement or an NPU
result, and no replay ever runs these: the offline check builds each kernel type's NPU call
against them, calls it once and reads its outputs the way verification would.

`implement` lets a caller (the project's tests) give an operator a real computation, checked
against the schema's arity.
"""

from __future__ import annotations

import itertools
import types
from collections.abc import Callable

import torch

from .schema import OpSchema
from .schema_sources import SchemaSet

__all__ = ["SchemaOperators", "placeholders"]

_instances = itertools.count()
# torch_npu's top-level ATB functions (op-plugin op_plugin/python/atb/_atb_ops.py API_LIST);
# the rest of torch.ops.atb hangs off torch_npu.atb (ATB_API_LIST).
TOP_LEVEL_ATB = ("_npu_reshape_and_cache",)


class SchemaOperators:
    """The operators of a SchemaSet, defined on first use."""

    def __init__(self, schemas: SchemaSet, tag: str = "check", prefix: str | None = None
                 ) -> None:
        self.schemas = schemas
        # A prefix of "" defines the real namespaces: only for the project's own tests of how
        # a replay loads vllm-ascend's operators (nothing else may own them then).
        self.prefix = f"npuperf_{tag}{next(_instances)}_" if prefix is None else prefix
        self.calls: list[tuple[str, dict[str, object]]] = []  # (namespace::name, bound args)
        self.implementations: dict[tuple[str, str], Callable[..., object]] = {}
        self._libraries: dict[str, torch.library.Library] = {}
        self._parsed: dict[tuple[str, str], list[OpSchema]] = {}

    # -- the operators ------------------------------------------------------------------------
    def schema(self, namespace: str, name: str) -> list[OpSchema]:
        """The parsed overloads of `namespace::name` (RuntimeError when DIR has none)."""
        key = (namespace, name)
        if key not in self._parsed:
            texts = self.schemas.overloads(namespace, name)
            if not texts:
                raise RuntimeError(f"no schema of {namespace}::{name} in "
                                   f"{self.schemas.root or 'the schema sources'}")
            self._parsed[key] = [OpSchema.parse(t.text) for t in texts]
        return self._parsed[key]

    def op(self, namespace: str, name: str):
        """`torch.ops.<own namespace>.<name>`, defined from the schema text."""
        own = self.prefix + namespace
        packet = getattr(getattr(torch.ops, own), name, None) if own in self._libraries \
            else None
        if packet is not None:
            return packet
        library = self._libraries.get(own)
        if library is None:
            library = self._libraries[own] = torch.library.Library(own, "DEF")
        for schema in self.schema(namespace, name):
            library.define(schema.text.split("::")[-1])
            library.impl(schema.full_name, self._kernel(namespace, schema),
                         "CompositeExplicitAutograd")
        return getattr(getattr(torch.ops, own), name)

    def implement(self, namespace: str, name: str, fn: Callable[..., object]) -> None:
        """Compute `namespace::name` with `fn(schema, **bound arguments)`."""
        self.implementations[(namespace, name)] = fn

    def _kernel(self, namespace: str, schema: OpSchema) -> Callable[..., object]:
        qualified = f"{namespace}::{schema.name}"

        def kernel(*args, **kwargs):
            bound = schema.bind(args, kwargs)
            self.calls.append((qualified, bound))
            fn = self.implementations.get((namespace, schema.name))
            result = fn(schema, **bound) if fn is not None else placeholders(schema, bound)
            _check_arity(qualified, schema, result)
            return result
        return kernel

    def close(self) -> None:
        for namespace, library in self._libraries.items():
            library._destroy()
            torch.ops.__dict__.pop(namespace, None)  # torch.ops caches a namespace's packets
        self._libraries.clear()

    # -- the modules a replay reaches them through ----------------------------------------------
    def torch_npu(self, **extra: object) -> types.ModuleType:
        """A `torch_npu` whose operator attributes are these (resolved on first use), with
        `atb` as torch_npu lays it out; `extra` adds other attributes."""
        operators = self

        class Atb(types.ModuleType):
            def __getattr__(self, name):
                if name.startswith("__"):
                    raise AttributeError(name)
                return operators.op("atb", name)

        class TorchNpu(types.ModuleType):
            def __getattr__(self, name):
                if name.startswith("__"):
                    raise AttributeError(name)
                namespace = "atb" if name in TOP_LEVEL_ATB else "npu"
                if not operators.schemas.overloads(namespace, name):
                    raise AttributeError(f"torch_npu has no {name} in the schema sources")
                return operators.op(namespace, name)

        module = TorchNpu("torch_npu")
        module.atb = Atb("torch_npu.atb")
        for key, value in extra.items():
            setattr(module, key, value)
        return module

    def custom_operator(self, namespace: str, name: str):
        """What `torch.ops.<namespace>.<name>` is on a stack with these sources."""
        return self.op(namespace, name)


def placeholders(schema: OpSchema, bound: dict[str, object]) -> object:
    """What the schema returns, computing nothing: empty tensors, and the arguments that
    `Tensor(a!)` returns alias."""
    values = []
    for kind, alias in zip(schema.returns or (), schema.aliases or (None,) * 99):
        if alias is not None:
            values.append(bound[alias])
        elif kind == "Tensor":
            values.append(torch.empty(0))
        elif kind == "List[Tensor]":
            values.append([torch.empty(0)])
        else:
            values.append(0)
    if not values:
        return None
    return values[0] if len(values) == 1 else tuple(values)


def _check_arity(qualified: str, schema: OpSchema, result: object) -> None:
    count = 0 if result is None else len(result) if isinstance(result, tuple) else 1
    if schema.returned is not None and count != schema.returned:
        raise RuntimeError(f"{qualified}: the implementation returned {count} value(s), its "
                           f"schema {schema.returned}")
