"""`npuperf kernels`: every kernel type of the catalog, how it replays, and whether it can here.

One row per kernel type: its family and core, the NPU API its replay calls, whether that is a
vllm-ascend custom operator, what the portable path (CPU, CUDA) runs, the FLOP and byte
formulas of one call, the inputs a model reads from memory at every call (measured cold,
kernels/cache_state.py), and whether this machine can replay it (which device, which custom-op
environment is missing, which kernels have no replay or no portable path).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import asdict, dataclass

from . import catalog
from .custom_ops import custom_op_environment
from .implementation_options import options


@dataclass(frozen=True)
class KernelInfo:
    kernel_type: str
    same_call: tuple[str, ...]  # kernel types one replay covers (itself included)
    family: str
    core: str
    npu_api: str
    custom_op: bool
    replay: str | None
    portable: str  # what runs off the NPU ("" without a replay)
    work: str  # FLOP and byte formulas of one call
    replayable_here: bool
    why: str  # how it replays here, or why it cannot
    streamed: tuple[str, ...] = ()  # inputs a model reads cold: rotated by --npuperf-cache model
    # Implementations on the device (kernels/implementation_options.py): (name, why absent or "").
    implementations: tuple[tuple[str, str], ...] = ()


def _spec_class(target: str):
    from .registry import load_replay

    return load_replay(target)


def describe(device: str, custom_env: Callable[[], list[str]] = custom_op_environment
             ) -> list[KernelInfo]:
    """Every kernel type, as it replays on a `device` ("npu", "cuda" or "cpu")."""
    missing_env: list[str] | None = None
    infos = []
    for entry in catalog.entries():
        portable, work, here, why = "", "", False, "no replay yet"
        streamed, implementations = entry.streamed, ()
        if entry.replay is not None:
            try:
                spec = _spec_class(entry.replay)
            except Exception as exc:  # a user's replay module may fail in any way
                why = f"replay {entry.replay} cannot be imported: {type(exc).__name__}: {exc}"
            else:
                has_portable = spec.has_portable_path()
                streamed = spec.streamed
                implementations = tuple(
                    (o.name, o.absent) for o in options(entry.name, entry.family, device,
                                                        portable=has_portable))
                portable = spec.portable if has_portable else "none (NPU only)"
                work = spec.work
                if device == "npu":
                    if entry.custom_op and missing_env is None:
                        missing_env = custom_env()
                    gaps = missing_env if entry.custom_op else []
                    here = not gaps
                    why = ("npu: " + entry.npu_api if here else
                           "custom-op environment: " + "; ".join(gaps))
                else:
                    here = has_portable
                    why = (f"{device}: portable path" if here else
                           f"NPU only: {entry.npu_api} has no portable path")
        for kernel_type in entry.kernel_types:
            infos.append(KernelInfo(kernel_type, entry.kernel_types, entry.family, entry.core,
                                    entry.npu_api, entry.custom_op, entry.replay, portable,
                                    work, here, why, streamed, implementations))
    return infos


COLUMNS = (("kernel type", "kernel_type"), ("family", "family"), ("NPU API", "npu_api"),
           ("custom op", "custom_op"), ("portable path", "portable"), ("read cold", "streamed"),
           ("here", "why"), ("implementations here", "implementations"),
           ("work (FLOPs; bytes)", "work"))


def _cell(info: KernelInfo, field: str) -> str:
    value = getattr(info, field)
    if field == "custom_op":
        return "vllm-ascend" if value else "-"
    if field == "why":
        return ("yes, " if info.replayable_here else "no, ") + value
    if field == "streamed":
        return ", ".join(value) if value else "-"
    if field == "implementations":
        here = [name for name, absent in value if not absent]
        absent = [name for name, why in value if why]
        text = ", ".join(here) or "-"
        return f"{text} (absent: {', '.join(absent)})" if absent else text
    return str(value) if value else "-"


def render(infos: list[KernelInfo], device: str) -> str:
    rows = [[title for title, _ in COLUMNS]]
    rows += [[_cell(info, field) for _, field in COLUMNS] for info in infos]
    widths = [max(len(row[i]) for row in rows) for i in range(len(COLUMNS))]
    lines = ["  ".join(cell.ljust(width) for cell, width in zip(row, widths)).rstrip()
             for row in rows]
    lines.insert(1, "  ".join("-" * width for width in widths))
    replays = sum(1 for i in infos if i.replay)
    here = sum(1 for i in infos if i.replayable_here)
    lines += ["", f"{len(infos)} kernel types: {replays} with a replay, {here} replayable here "
                  f"({device})",
              "implementations: the first of each is the device's default; --npuperf-impl "
              "NAME|best|all picks"]
    absent = {name: why for info in infos for name, why in info.implementations if why}
    lines += [f"  absent here: {name}: {why}" for name, why in absent.items()]
    return "\n".join(lines)


def to_json(infos: list[KernelInfo], device: str) -> str:
    return json.dumps({"device": device, "kernels": [asdict(i) for i in infos]}, indent=2)
