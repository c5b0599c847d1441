"""Ranges around the calls of known module kinds while a workload is profiled, so that the
parser maps each call to one row of its kernel type (kernels/module_kinds.py).

- A module whose class is of a kind gets a range around its forward: a forward pre-hook and
  a forward hook on every module (torch's global module hooks), opening the range only for
  the classes of the table; the range's name carries the call's tensor inputs and the
  module's own parameters (dims, strides, type), the inputs the kernel row is built from.
- A function of a kind (`transformers.models.llama.modeling_llama.apply_rotary_pos_emb`) is
  wrapped where its module defines it, for as long as the ranges are on (the model's code
  looks it up there at each call); a module the workload has not imported is left alone.

A range costs a few microseconds of host time per call (the name is built once per module
instance and shapes); nothing is recorded outside a profiled step.
"""

from __future__ import annotations

import contextlib
import functools
import sys
from collections.abc import Iterator

from ..kernels.module_kinds import ModuleKind, ModuleKinds, Tensor, range_name


def _described(value) -> Tensor | None:
    import torch

    if not isinstance(value, torch.Tensor):
        return None
    return list(value.shape), list(value.stride()), str(value.dtype).removeprefix("torch.")


def _tensors(args, params=()) -> list[Tensor | None]:
    """The tensor arguments (an argument that is None keeps its slot), then parameters."""
    import torch

    found: list[Tensor | None] = []
    for value in args:
        if value is None or isinstance(value, torch.Tensor):
            found.append(_described(value))
    return found + [_described(p) for p in params]


class _Ranges:
    def __init__(self, kinds: ModuleKinds) -> None:
        self.kinds = kinds
        self.open: list = []  # the ranges entered, innermost last (forwards nest)

    def pre_hook(self, module, args) -> None:
        kind = self.kinds.of_module(type(module).__name__)
        if kind is None:
            return
        import torch

        params = list(module.parameters(recurse=False))
        name = range_name(kind.name, type(module).__name__, _tensors(args, params))
        handle = torch.autograd.profiler.record_function(name)
        handle.__enter__()
        self.open.append((module, handle))

    def post_hook(self, module, args, output) -> None:
        if self.open and self.open[-1][0] is module:
            self.open.pop()[1].__exit__(None, None, None)

    def wrap(self, function, kind: ModuleKind, label: str):
        import torch

        @functools.wraps(function)
        def ranged(*args, **kwargs):
            name = range_name(kind.name, label, _tensors(args))
            with torch.autograd.profiler.record_function(name):
                return function(*args, **kwargs)
        ranged.__npuperf_wrapped__ = function  # type: ignore[attr-defined]
        return ranged


@contextlib.contextmanager
def module_ranges(kinds: ModuleKinds) -> Iterator[None]:
    """Record a range around each call of the kinds' modules and functions meanwhile."""
    from torch.nn.modules import module as nn_module

    ranges = _Ranges(kinds)
    handles = [nn_module.register_module_forward_pre_hook(ranges.pre_hook),
               nn_module.register_module_forward_hook(ranges.post_hook)]
    patched = []
    for dotted, kind in kinds.functions():
        module_name, _, attribute = dotted.rpartition(".")
        module = sys.modules.get(module_name)  # the model's own: never imported here
        function = getattr(module, attribute, None) if module is not None else None
        if function is None or getattr(function, "__npuperf_wrapped__", None) is not None:
            continue
        setattr(module, attribute, ranges.wrap(function, kind, attribute))
        patched.append((module, attribute, function))
    try:
        yield
    finally:
        for handle in handles:
            handle.remove()
        for module, attribute, function in patched:
            setattr(module, attribute, function)
        while ranges.open:
            ranges.open.pop()[1].__exit__(None, None, None)
