"""Stand-ins for the NPU operators the replays call, generated from the real schemas.

tests/data/npu_schemas/<stack>/ holds verbatim excerpts of each supported stack's upstream
schema sources (its SOURCES.md names repository, tag, commit and path): vllm-ascend v0.18.0
(the stack the embedded database is named after: torch_npu 2.9.0) and v0.25.1rc1 (the newest
release tag: torch_npu 2.10.0.post2). The product's SchemaOperators define every torch_npu,
torch.ops.atb, torch.ops._C_ascend and torch.ops.vllm operator from that text with
torch.library, so torch itself binds every call the way it binds the installed operator (a
call that does not bind raises, and its test fails) and each operator returns its schema's
arity. Every call is recorded as (namespace::name, {parameter: argument}, defaults applied).

`npu_backend(calls, stack)`: the NPU backend's own logic over such a torch_npu (tensors on the
host), its `_C_ascend` and `vllm` operators the same stack's. `compute_like_the_api(...)`
makes the operators return the portable path's outputs where the real API computes an output
and an empty placeholder where it returns one, for verification tests.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from pathlib import Path

import pytest
import torch

from pytest_npuperf.devices.npu import NpuBackend
from pytest_npuperf.kernels.schema_ops import SchemaOperators, placeholders
from pytest_npuperf.kernels.schema_sources import SchemaSet, read_schema_dir

DATA = Path(__file__).parent / "data" / "npu_schemas"
EMBEDDED, NEWEST = "v0.18.0", "v0.25.1rc1"
STACKS = (EMBEDDED, NEWEST)


def schema_dir(stack: str) -> Path:
    return DATA / stack


@functools.cache
def schema_set(stack: str) -> SchemaSet:
    return read_schema_dir(schema_dir(stack))


@functools.cache
def stack_operators(stack: str) -> SchemaOperators:
    """One set of operators per stack and process (torch.library namespaces stay defined)."""
    return SchemaOperators(schema_set(stack), tag="test")


class Calls(list):
    """(namespace::name, {parameter: argument}) of every call, in order."""

    def of(self, name: str) -> dict:
        found = [args for op, args in self if _named(op, name)]
        assert found, f"{name} was not called (calls: {[op for op, _ in self]})"
        return found[-1]


def _named(qualified: str, name: str) -> bool:
    return qualified == name or qualified.endswith("::" + name)


def only_call(calls: list, name: str) -> dict:
    """The arguments of the one call of `name` (bare, or namespace::name)."""
    found = [arguments for called, arguments in calls if _named(called, name)]
    assert len(found) == 1, (name, [c for c, _ in calls])
    return found[0]


def _format_cast(schema, self, acl_format, **_):
    return self.clone()  # the host has one layout: the data, in a tensor of its own


class HostNpu(NpuBackend):
    """The NPU backend's own logic (format casts, group names, graphs) over a stand-in
    torch_npu built from a stack's schemas, with host tensors."""

    def __init__(self, operators: SchemaOperators, group: str | None = None,
                 hide: tuple[str, ...] = ()) -> None:
        self.torch_npu = operators.torch_npu()
        for name in hide:  # an older torch_npu without these: getattr(.., None) reads None
            self.torch_npu.__dict__[name] = None
        self.operators = operators
        self.custom_operator = operators.custom_operator
        self.index = 0
        self.database_device_name = None
        self._cann_mstx = None
        self._graphs = None
        self._group = group

    @property
    def device(self) -> torch.device:
        return torch.device("cpu")

    def process_group_name(self, ranks: int) -> str | None:
        return self._group


def npu_backend(calls: list | None = None, stack: str = NEWEST, group: str | None = None,
                hide: tuple[str, ...] = ()) -> HostNpu:
    """A fresh stand-in NPU of `stack`, recording into `calls`."""
    operators = stack_operators(stack)
    operators.calls = calls if calls is not None else []
    operators.implementations.clear()
    operators.implement("npu", "npu_format_cast", _format_cast)
    return HostNpu(operators, group, hide)


@pytest.fixture
def npu():
    """(backend, calls): the stand-in NPU of the newest stack."""
    calls = Calls()
    return npu_backend(calls), calls


# -- outputs as the real APIs return them ------------------------------------------------------
# Which of an operator's returns it computes, given its arguments; the others are empty
# placeholders. From the API documentation of each (op-plugin docs/context/torch_npu-*.md) and
# issue 22's reading of the sources: FIA's LSE is (0,) without softmax_lse_flag (torch_npu >=
# 7.2.0), the indexer's values empty without return_value, SFA's softmax max/sum without
# return_softmax_lse, npu_grouped_matmul_swiglu_quant's output_offset always.
API_OUTPUTS: dict[str, Callable[[dict], tuple[bool, ...]]] = {
    "npu_fused_infer_attention_score": lambda a: (True, a["softmax_lse_flag"]),
    "npu_lightning_indexer": lambda a: (True, a.get("return_value", False)),
    "npu_sparse_flash_attention": lambda a: (True,) + (a.get("return_softmax_lse", False),) * 2,
    "npu_grouped_matmul_swiglu_quant": lambda a: (True, True, False),
    "npu_kv_rmsnorm_rope_cache": lambda a: (True, True, a["is_output_kv"], a["is_output_kv"]),
}


def compute_like_the_api(operators: SchemaOperators, namespace: str, name: str,
                         outputs: Callable[[], tuple[torch.Tensor, ...]]) -> None:
    """Make `namespace::name` return `outputs()` (the portable path's, in order) at the
    positions the real API computes, placeholders elsewhere (and where the row records fewer
    outputs than the API computes); an output the operator writes in place (`Tensor(a!)`) is
    copied into the tensor it was given."""

    def implementation(schema, **bound):
        values = outputs()
        count = len(schema.returns or ())
        if not count:  # written in place: the portable path wrote the same tensors
            return None
        computed = API_OUTPUTS.get(name, lambda a: (True,) * count)(bound)[:count]
        if len(values) > sum(computed):
            raise AssertionError(f"{name}: the API computes {sum(computed)} output(s), the "
                                 f"portable path gave {len(values)}")
        shape = placeholders(schema, bound)
        shaped = list(shape) if isinstance(shape, tuple) else [shape] if count else []
        given = iter(values)
        for position, (wanted, alias) in enumerate(zip(computed, schema.aliases)):
            value = next(given, None) if wanted else None
            if value is None:  # not computed, or not recorded by the row: a placeholder
                continue
            if alias is not None:
                bound[alias].copy_(value)
            elif schema.returns[position] == "List[Tensor]":
                shaped[position] = [value]
            else:
                shaped[position] = value
        if not count:
            return None
        return shaped[0] if count == 1 else tuple(shaped)

    operators.implement(namespace, name, implementation)


_PROBE = torch.library.Library("npuperf_test_probe", "DEF")
_PROBE.define("number(int value) -> int")
_PROBE.impl("number", lambda value: value, "CompositeExplicitAutograd")


def same_dtype(value: object, dtype: torch.dtype) -> bool:
    """Whether an argument is `dtype` as an operator received it: torch passes a dtype given
    for an `int` parameter (torch_npu 2.10's `int? output_dtype`) as its ScalarType number."""
    return value == dtype or value == torch.ops.npuperf_test_probe.number(dtype)
