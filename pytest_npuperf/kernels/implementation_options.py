"""Implementations of a kernel type: the ways this device can run it, an axis of each case.

On an NPU a kernel type replays its real operator (`npu`). Elsewhere the portable path
(`eager`: the kernel's math in plain torch ops) is the real kernel for GEMMs (cuBLAS, oneDNN)
but an unfused emulation for almost everything else: on an H200 the eager RMS norm of a 1 GB
tensor ran at 6.4 % of the HBM bound, where a serving engine runs one fused kernel at several
TB/s. So each kernel type lists what a user of this device could run:

- `npu`: the NPU operator of the kernel's catalog entry (only on an NPU);
- `eager`: the portable path, kernel by kernel;
- `compiled`: torch.compile (inductor) of the portable path, for the kernel families inductor
  fuses into one kernel (norms, activations, rope, quantisation, softmax, elementwise, cache
  updates). It is compiled before the case is timed (compile time is never a sample), and a
  compile failure falls back to eager, which the case's note says;
- vendor libraries (`kernels/vendors/`), each registered beside the kernel types it replays
  and never required: one that is not installed is listed as absent, with how to get it.

`--npuperf-impl` (harness/options.py) picks among them: a name (that implementation where it
applies, the device's default elsewhere), `best` (every available one measured, the fastest
that passes verification stored), `all` (one case per implementation: `-k compiled` selects
them) or `auto`: `best` on a GPU, `npu` on an NPU, `eager` on a CPU, where inductor compiles a
C++ kernel per shape in seconds, longer than the case.

Torch-free at import: collection lists implementations without importing a replay.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable

from .implementation import COMPILED, Implementation, Option, Unsupported

__all__ = ["ALL", "AUTO", "BEST", "COMPILED", "EAGER", "MODES", "NPU", "Implementation", "Option",
           "Unsupported", "options"]

NPU, EAGER = "npu", "eager"
AUTO, BEST, ALL = "auto", "best", "all"
MODES = (AUTO, BEST, ALL)
# Kernel families whose portable path is several kernels that inductor fuses into one.
COMPILED_FAMILIES = ("norm", "activation", "rope", "quant", "softmax", "elementwise", "cache")
# Shapes per kernel type before dynamo would stop compiling and silently run eager: far more
# than a database's distinct ranks and dtypes per kernel type (dims become dynamic after the
# second shape); past it, the case fails over to eager with a note instead (`compile_call`).
RECOMPILE_LIMIT = 64
# Inductor; the tests of the mechanism use a backend that compiles in milliseconds.
COMPILE_BACKEND = "inductor"


NPU_IMPL = Implementation(NPU, "the NPU operator (the catalog's NPU API)", ("npu",))
EAGER_IMPL = Implementation(EAGER, "the portable path in plain torch ops, kernel by kernel",
                            ("cpu", "cuda", "npu"))
COMPILED_IMPL = Implementation(COMPILED, "torch.compile (inductor) of the portable path: one "
                               "fused kernel where inductor can", ("cpu", "cuda"))


def _vendors() -> tuple[Implementation, ...]:
    from .vendors import VENDORS

    return VENDORS


def options(kernel_type: str, family: str, device: str, *, portable: bool) -> list[Option]:
    """The implementations of a kernel type on `device`, the device's default first; absent
    ones included (with why), so that `npuperf kernels` can list them. `portable`: the spec
    has a portable path (eager and compiled run it)."""
    found: list[Option] = []
    if device == "npu":
        found.append(Option(NPU_IMPL))
    if portable:
        found.append(Option(EAGER_IMPL))
        if family in COMPILED_FAMILIES and device != "npu":
            found.append(Option(COMPILED_IMPL, COMPILED_IMPL.absent(device)))
    for vendor in _vendors():
        if kernel_type in vendor.kernel_types and device in vendor.devices:
            found.append(Option(vendor, vendor.absent(device)))
    return found


def default_name(device: str) -> str:
    """What runs a kernel type when nothing else is asked for: the NPU operator on an NPU,
    the portable path elsewhere."""
    return NPU if device == "npu" else EAGER


def resolve_mode(mode: str, device: str) -> str:
    """`auto` for `device`: best on a GPU, the default implementation elsewhere."""
    if mode != AUTO:
        return mode
    return BEST if device == "cuda" else default_name(device)


def known_names() -> list[str]:
    """Every implementation name, builtins first."""
    return [NPU, EAGER, COMPILED, *dict.fromkeys(v.name for v in _vendors())]


def absent_everywhere(name: str, device: str) -> str:
    """Why the implementation `name` can run no kernel type on `device` ("" when it can run
    some)."""
    if name == NPU:
        return "" if device == "npu" else f"the NPU operators run on an NPU, not {device}"
    if name == EAGER:
        return ""
    found = [COMPILED_IMPL] if name == COMPILED else [v for v in _vendors() if v.name == name]
    reasons = [i.absent(device) for i in found]
    return "" if any(not r for r in reasons) else (reasons[0] if reasons else "unknown")


def vendor(name: str, kernel_type: str) -> Implementation | None:
    return next((v for v in _vendors() if v.name == name and kernel_type in v.kernel_types),
                None)


def load_build(target: str) -> Callable:
    module_name, _, function = target.partition(":")
    return getattr(importlib.import_module(module_name), function)


# -- compiled -----------------------------------------------------------------------------------
def compile_call(call: Callable[[], object]) -> Callable[[], object]:
    """`call` through torch.compile (inductor). Dynamo compiles one graph per shape family of
    the call's code (shared by every row of a kernel type: dims turn dynamic after the second
    shape); past RECOMPILE_LIMIT it raises rather than run eager under the compiled name."""
    import torch
    import torch._dynamo.config as dynamo

    dynamo.recompile_limit = max(dynamo.recompile_limit, RECOMPILE_LIMIT)
    dynamo.fail_on_recompile_limit_hit = True
    return torch.compile(call, backend=COMPILE_BACKEND)

