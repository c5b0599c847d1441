"""What every kernel spec provides: slot layout, input building, the NPU call, a portable
torch call, and the work it does (FLOPs, bytes).

A spec covers one or more kernel types (database files): `torch.mm` replays MatMulV2,
MatMulV3 and MatMulCommon rows alike, since which of them runs is only known after profiling.
What it covers, its slot layout, its NPU API and whether it is a custom operator come from its
kernel catalog entry (`kernels/kernel_types.py`); a spec class only says its `kernel_type`.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import ClassVar

import torch

from ..db.errors import CellError
from . import catalog, implementation_options
from .cache_state import Rotation, RotationArena, cycling, input_sets, plan
from .case import KernelCase, TensorSlot
from .custom_ops import custom_op_environment
from .entry import SlotLayout
from .implementation_options import (
    COMPILED,
    EAGER,
    NPU,
    Unsupported,
    compile_call,
    default_name,
    load_build,
    vendor,
)
from .tensors import generator_for, input_tensor, strided_input

__all__ = ["KernelSpec", "NpuOnly", "Prepared", "ReplaySkipped", "SameCall", "SlotLayout",
           "Unsupported", "api_results", "implemented", "present"]

# What a spec's portable path runs when it does not say (`KernelSpec.portable`), which is also
# what `Prepared.implementation` says of a portable call that does not name itself.
PLAIN_TORCH = "plain torch"


class ReplaySkipped(Exception):
    """This row cannot run here (e.g. a multi-rank kernel without its process group): the
    case is skipped with this message and the row is kept as it is."""


class NpuOnly(ReplaySkipped):
    """A kernel without a portable path was asked to run off the NPU: its case is skipped,
    naming the operator."""


def implemented(name: str, call: Callable[[], object],
                outputs: tuple[int, ...] | None = None) -> Callable[[], object]:
    """Tag a call with what it runs (e.g. which scaled-dot-product backend or grouped GEMM),
    which travels to the row's `MicroBench Implementation`; `outputs`: the kernel's outputs
    (by index) it computes, when not all of them (what verification compares)."""
    call.implementation = name  # type: ignore[attr-defined]
    if outputs is not None:
        call.outputs = outputs  # type: ignore[attr-defined]
    return call


@dataclass
class Prepared:
    """A case ready to run: the measured call, the work it does, and its inputs (`sets`: one
    per rotated copy, shared by every implementation prepared on them)."""

    call: Callable[[], object]
    flops: float = 0.0
    bytes: float = 0.0
    tensors: dict[str, torch.Tensor] = field(default_factory=dict)
    implementation: str = ""  # what `call` runs, as the row's MicroBench Implementation says
    rotation: Rotation = field(default_factory=lambda: Rotation("warm"))
    impl: str = EAGER  # which implementation (kernels/implementation_options.py)
    note: str = ""  # e.g. why another implementation runs than the one asked for
    # The spec's outputs (by index) the call computes, when not all of them (a vendor kernel
    # without the rstd an NPU RMS norm also returns): what verification compares.
    outputs: tuple[int, ...] | None = None
    sets: list[dict[str, torch.Tensor]] = field(default_factory=list)


def _not_built() -> object:
    raise RuntimeError("no implementation prepared yet")


class KernelSpec(ABC):
    kernel_type: ClassVar[str]
    covers: ClassVar[tuple[str, ...]] = ()
    inputs: ClassVar[tuple[SlotLayout, ...]]
    outputs: ClassVar[tuple[SlotLayout, ...]]
    npu_api: ClassVar[str]
    # Inputs a model reads from memory at every call (cache_state.py): the catalog's.
    streamed: ClassVar[tuple[str, ...]] = ()
    # Kernels from vllm-ascend's custom op package need its environment variables.
    custom_op: ClassVar[bool] = False
    # `bytes_moved` is what the kernel must move (each input read once, each output written
    # once, nothing it can skip): a memory bound from it holds, and a measurement beating it
    # is suspect (measure/roofline.py). False where it counts slots the kernel may not read.
    bytes_exact: ClassVar[bool] = False
    # What the portable path runs and the work of one call, as `npuperf kernels` shows them.
    portable: ClassVar[str] = PLAIN_TORCH
    work: ClassVar[str] = ""
    # Outputs (by index) whose last dimension is a set, not a sequence: top-k indices, whose
    # order among (near-)equal scores depends on the device's arithmetic. --npuperf-verify
    # compares them sorted.
    unordered_outputs: ClassVar[tuple[int, ...]] = ()
    # A kernel that takes any number of inputs past its layout (Index: one index tensor per
    # indexed dim) says so; any other row listing tensors past the layout is refused.
    variadic_inputs: ClassVar[bool] = False

    def __init_subclass__(cls, **kwargs) -> None:
        """Metadata a subclass does not set itself comes from its catalog entry."""
        super().__init_subclass__(**kwargs)
        entry = catalog.entry_for(cls.__dict__.get("kernel_type", ""))
        if entry is None:
            return
        metadata = {"covers": entry.kernel_types if len(entry.kernel_types) > 1 else (),
                    "inputs": entry.inputs, "outputs": entry.outputs,
                    "npu_api": entry.npu_api, "custom_op": entry.custom_op,
                    "streamed": entry.streamed}
        for name, value in metadata.items():
            if name not in cls.__dict__:
                setattr(cls, name, value)

    @classmethod
    def kernel_types(cls) -> tuple[str, ...]:
        return cls.covers or (cls.kernel_type,)

    @classmethod
    def has_portable_path(cls) -> bool:
        """False for a kernel that only its NPU operator computes (it defines no
        `portable_call`): off the NPU its cases are skipped, naming the operator."""
        return cls.portable_call is not KernelSpec.portable_call

    def prepare(self, case: KernelCase, backend, cache: str = "warm", impl: str | None = None,
                arena: RotationArena | None = None) -> Prepared:
        """Check the row, build inputs once on the device, and the call of `impl` on them (the
        device's default: the NPU operator on an NPU, the portable path elsewhere); with
        `cache` model or cold, the call rotates the inputs it reads cold (cache_state.py),
        their copies in `arena` when given."""
        impl = impl or default_name(backend.kind)
        self.check(case)  # a kernel's own checks say more than the generic one after them
        self._check_extra_inputs(case)
        self._check_runnable(case, backend, impl)
        check_memory(case, backend)
        generator = generator_for(case, backend.device)
        tensors = self.build_inputs(case, backend, generator)
        rotation = plan(cache, tensors, self.streamed, backend.l2_cache_bytes())
        inputs = Prepared(call=_not_built, flops=self.flops(case),
                          bytes=self.bytes_touched(case, tensors), tensors=tensors,
                          rotation=rotation, sets=input_sets(tensors, rotation, arena))
        return self.implement(inputs, impl, case, backend)

    def implement(self, prepared: Prepared, impl: str, case: KernelCase, backend) -> Prepared:
        """The call of `impl` on `prepared`'s inputs (a new Prepared sharing them). Unsupported
        when the implementation cannot run this row."""
        self._check_runnable(case, backend, impl)
        calls = [self.call_of(impl, inputs, case, backend) for inputs in prepared.sets]
        note = ""
        if impl == COMPILED:
            calls, note = self._compiled(calls, prepared, case, backend)
            if note:
                impl = EAGER
        call = cycling(calls)
        return replace(prepared, call=call, impl=impl, note=note,
                       implementation=self.describe(impl, call),
                       outputs=getattr(calls[0], "outputs", None))

    def call_of(self, impl: str, inputs: dict[str, torch.Tensor], case: KernelCase, backend
                ) -> Callable[[], object]:
        """One set of inputs' call in `impl`."""
        if impl == NPU:
            return self.npu_call(inputs, case, backend)
        if impl in (EAGER, COMPILED):
            return self.portable_call(inputs, case)
        found = vendor(impl, case.kernel_type)
        if found is None:
            raise Unsupported(f"{impl} has no {case.kernel_type}")
        return load_build(found.build)(self, inputs, case, backend)

    def _compiled(self, calls: list[Callable[[], object]], prepared: Prepared,
                  case: KernelCase, backend) -> tuple[list[Callable[[], object]], str]:
        """The calls through torch.compile, compiled now (a call of the first set), so that no
        sample ever times a compilation; on a failure the eager calls, and why."""
        compiled = [compile_call(c) for c in calls]
        try:
            for call in compiled:  # each set's first call: one compilation, then guard hits
                call()
            backend.synchronize()
        except Exception as exc:  # inductor's errors have no common base class
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            return calls, f"torch.compile failed ({type(exc).__name__}: {first[:200]}): eager measured"
        for call, plain in zip(compiled, calls):
            call.implementation = getattr(plain, "implementation", None)  # type: ignore[attr-defined]
        return compiled, ""

    def describe(self, impl: str, call: Callable[[], object]) -> str:
        """What the row's MicroBench Implementation says: the implementation, then what it
        ran where the call names it."""
        named = getattr(call, "implementation", None)
        if impl == NPU:
            return f"{NPU}: {named or self.npu_api.split('(')[0].strip()}"
        if impl == EAGER:
            return f"{EAGER}: {named or self.portable}"
        if impl == COMPILED:
            backend = implementation_options.COMPILE_BACKEND
            return f"{COMPILED}: torch.compile[{backend}] of {named or self.portable}"
        return f"{impl}: {named}" if named else impl

    def _check_runnable(self, case: KernelCase, backend, impl: str) -> None:
        if impl in (EAGER, COMPILED) and not self.has_portable_path():
            raise NpuOnly(f"{case.kernel_type} runs only on an NPU: {self.npu_api}"
                          f"{' (a vllm-ascend custom operator)' if self.custom_op else ''} "
                          f"has no portable path; skipped on {backend.kind}")
        # A backend that brings its own operators (the offline schema check's) loads none.
        if impl == NPU and self.custom_op and backend.kind == "npu" \
                and not hasattr(backend, "custom_operator"):
            missing = custom_op_environment()
            if missing:
                raise case.error(f"{case.kernel_type} runs from vllm-ascend's custom operators: "
                                 + "; ".join(missing), column=None)

    def _check_extra_inputs(self, case: KernelCase) -> None:
        """A row listing tensors past the kernel's layout would be measured without them, and
        get a duration that is not its own (whatever the spec's own `check` looks at)."""
        extra = [slot for slot in case.inputs[len(self.inputs):] if slot.present]
        if extra and not self.variadic_inputs:
            raise case.error(f"{case.kernel_type}: {len(case.inputs):,} input slots, "
                             f"{len(extra):,} of them with a shape beyond the {len(self.inputs)} "
                             f"this kernel takes")

    def check(self, case: KernelCase) -> None:
        """Raise `case.error(...)` when the row cannot describe a call of this kernel."""
        needed = [i for i, slot in enumerate(self.inputs) if not slot.optional]
        for i in needed:
            if not case.input(i).present:
                raise case.error(f"{case.kernel_type}: input slot {i} ({self.inputs[i].name}) "
                                 f"is empty; expected a shape")

    def runtime_cells(self, case: KernelCase) -> dict[str, str]:
        """`Runtime ...` cells of a row that the replay's own arguments decide (its sequence
        lengths, scalar arguments), for readers of the database; none by default."""
        return {}

    def tensor(self, case: KernelCase, index: int, backend, generator: torch.Generator,
               **kwargs) -> torch.Tensor:
        """Input slot `index`, as the model passed it: with the row's `Input Strides` where
        the model's tensor was a transposed, broadcast or expanded view."""
        strides = case.input_strides(index)
        if strides is not None and case.input(index).format in ("ND", "FORMAT_ND"):
            return strided_input(case.input(index), strides, case, backend, generator, **kwargs)
        return input_tensor(case.input(index), case, backend, generator, **kwargs)

    @abstractmethod
    def build_inputs(self, case: KernelCase, backend, generator: torch.Generator
                     ) -> dict[str, torch.Tensor]:
        ...

    def portable_call(self, tensors: dict[str, torch.Tensor], case: KernelCase
                      ) -> Callable[[], object]:
        """The same computation in plain torch, for CPU and CUDA (a spec that cannot offer
        one leaves this out: see `has_portable_path`)."""
        raise NpuOnly(f"{case.kernel_type} has no portable path")

    @abstractmethod
    def npu_call(self, tensors: dict[str, torch.Tensor], case: KernelCase, backend
                 ) -> Callable[[], object]:
        """The call the reference replays on the NPU (CONTRACT.md §10)."""

    def results(self, returned: object, tensors: dict[str, torch.Tensor], case: KernelCase
                ) -> tuple[torch.Tensor, ...]:
        """The tensors a call produced, in an order both paths share (what --npuperf-verify
        compares); an in-place kernel returns the tensors it updated."""
        if isinstance(returned, torch.Tensor):
            return (returned,)
        if isinstance(returned, (tuple, list)):
            return tuple(t for t in returned if isinstance(t, torch.Tensor))
        return ()

    def flops(self, case: KernelCase) -> float:
        return 0.0

    def bytes_moved(self, case: KernelCase) -> float:
        """Bytes read and written once: the inputs and outputs of the row."""
        return case.io_bytes

    def bytes_touched(self, case: KernelCase, tensors: dict[str, torch.Tensor]) -> float:
        """The bytes of a call on these inputs, where they depend on the values (the experts
        a grouped GEMM's tokens went to); `bytes_moved` otherwise."""
        return self.bytes_moved(case)


UNCHECKED_BYTES = 64 << 20


def check_memory(case: KernelCase, backend) -> None:
    """Skip a row whose tensors do not fit in the memory the device has left, before anything
    is allocated: on a host, Linux would hand the memory out and its OOM killer end the whole
    session once the pages are written. Counted: every input and output slot, plus the
    float32 staging copy of the largest input that random data is drawn in. A row of less
    than UNCHECKED_BYTES is not checked: reading the host's memory took longer than building
    it (a host without that much left ends the session however small the row)."""
    try:
        needed = case.io_bytes
    except CellError:
        return  # an unknown dtype: building the tensors says so, naming the cell
    needed += max((slot.numel * 4 for slot in case.inputs if slot.present), default=0)
    if needed < UNCHECKED_BYTES:
        return
    available = backend.available_memory()
    if available is None:
        return
    if needed > available:
        raise ReplaySkipped(f"{case.kernel_type}: its tensors need {_gib(needed)} and "
                            f"{backend.kind} has {_gib(available)} available; nothing was "
                            f"allocated")


def _gib(size: float) -> str:
    return f"{size / 2 ** 30:,.1f} GiB"


class SameCall(KernelSpec):
    """A kernel torch itself dispatches to (aclnn on the NPU): one call for every device."""

    def npu_call(self, tensors, case, backend) -> Callable[[], object]:
        return self.portable_call(tensors, case)


def present(slots: tuple[TensorSlot, ...]) -> list[TensorSlot]:
    return [s for s in slots if s.present]


def returned_values(returned: object) -> tuple[object, ...]:
    """What a call returned, as a tuple (a lone tensor is one value; a `Tensor[]` return, a
    list, is unpacked)."""
    if isinstance(returned, (tuple, list)):
        return tuple(returned)
    return () if returned is None else (returned,)


def api_results(returned: object, keep: tuple[bool, ...]) -> tuple[torch.Tensor, ...]:
    """The outputs at the `keep` positions of what an API returned, in its order.

    The NPU operators return their full output list with empty placeholders where a flag
    asked for nothing (an LSE of shape (0,), an empty output_offset); an older schema may
    return fewer values, and a portable path only what it computes. Positions past the end
    of what came back are left out: the verification then counts the outputs and says so."""
    values = returned_values(returned)
    return tuple(v for v, wanted in zip(values, keep) if wanted and isinstance(v, torch.Tensor))
