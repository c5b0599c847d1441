"""Which implementations of its kernel type a case measures (`--npuperf-impl`,
kernels/implementation_options.py), and how one of them is kept.

- a case of `--npuperf-impl all` names its implementation: that one, or the case is skipped;
- `best`: every implementation available here, each verified against the float64 reference
  the first time it runs a kernel type, measured on the same inputs; the fastest that passed
  is kept, the others' medians go into the case's note;
- a name: that implementation where it applies, the device's default where it cannot run the
  row (a layout, dtype or block size it does not take), or where it has no such kernel type;
- the device's default otherwise.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..kernels.catalog import entry_for
from ..kernels.implementation_options import ALL, BEST, default_name, options


@dataclass(frozen=True)
class Choice:
    names: tuple[str, ...]  # in the order they are tried
    fastest: bool  # measure every one and keep the fastest; else the first that runs
    note: str = ""  # why the asked-for implementation is not among them


def available(kernel_type: str, device: str, *, portable: bool) -> list[str]:
    """The names of the implementations of `kernel_type` that can run here, the device's
    default first."""
    entry = entry_for(kernel_type)
    family = entry.family if entry is not None else ""
    return [o.name for o in options(kernel_type, family, device, portable=portable)
            if not o.absent]


def choose(mode: str, kernel_type: str, device: str, *, portable: bool,
           case_impl: str = "") -> Choice:
    """The implementations a case measures under `mode` (already resolved from `auto`)."""
    default = default_name(device)
    if case_impl:
        return Choice((case_impl,), False)
    here = available(kernel_type, device, portable=portable)
    if mode in (BEST, ALL):
        return Choice(tuple(here) or (default,), mode == BEST)
    if mode == default:
        return Choice((default,), False)
    if mode in here:
        return Choice((mode, default), False)
    return Choice((default,), False,
                  note=f"{mode} has no {kernel_type} on this device: {default} measured")
