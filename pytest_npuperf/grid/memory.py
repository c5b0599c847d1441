"""Memory estimate of a row: every input and output slot, elements x dtype bytes (docs/format.md §9).

A row whose estimate exceeds the budget is not generated; a row exactly at the budget is.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from ..db.shapes import Slot, dtype_bytes

GIB = 1024 ** 3


def estimate_bytes(inputs: Sequence[Slot], in_dtypes: Sequence[str], outputs: Sequence[Slot],
                   out_dtypes: Sequence[str]) -> float:
    total: float = 0
    for slots, dtypes in ((inputs, in_dtypes), (outputs, out_dtypes)):
        for slot, dtype in zip(slots, dtypes):
            if slot is not None:
                total += math.prod(slot) * dtype_bytes(dtype)
    return total


def budget_bytes(max_hbm_gb: float | None) -> float:
    """The budget in bytes for `--max-hbm-gb` (GiB); 0 or None means no budget."""
    if not max_hbm_gb:
        return math.inf
    return float(max_hbm_gb) * GIB
