"""Building database rows for kernel spec tests: slots by position, empty ones kept."""

from __future__ import annotations

import numpy as np
import torch

from pytest_npuperf.devices import CpuBackend
from pytest_npuperf.kernels.case import case_from_row
from pytest_npuperf.kernels.registry import spec_for

CPU = CpuBackend()
Slot = tuple  # (shape, dtype) or (shape, dtype, format); None for an empty slot


def side(slots: list[Slot | None]) -> tuple[str, str, str]:
    """Shape, dtype and format cells of one side of a row."""
    shapes = ";".join("" if s is None else ",".join(map(str, s[0])) for s in slots)
    dtypes = ";".join("DT_UNDEFINED" if s is None else s[1] for s in slots)
    formats = ";".join("NULL" if s is None else (s[2] if len(s) > 2 else "ND") for s in slots)
    return shapes, dtypes, formats


def row(inputs: list[Slot | None], outputs: list[Slot | None], **extra: str) -> dict[str, str]:
    shapes, dtypes, formats = side(inputs)
    out_shapes, out_dtypes, out_formats = side(outputs)
    cells = {"Input Shapes": shapes, "Input Data Types": dtypes, "Input Formats": formats,
             "Output Shapes": out_shapes, "Output Data Types": out_dtypes,
             "Output Formats": out_formats}
    cells.update({(k if k == "EP Size" else f"Runtime {k}"): v for k, v in extra.items()})
    return cells


def slots(count: int, filled: dict[int, Slot]) -> list[Slot | None]:
    return [filled.get(i) for i in range(count)]


def prepare(kernel_type: str, cells: dict[str, str], backend=CPU):
    case = case_from_row(kernel_type, cells, file=f"db/{kernel_type}.csv", row_number=2)
    return case, spec_for(kernel_type).prepare(case, backend)


def f64(t: torch.Tensor) -> np.ndarray:
    """A tensor as float64 numpy, for the independent references."""
    return t.detach().double().numpy()
