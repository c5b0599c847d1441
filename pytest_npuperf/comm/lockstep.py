"""Before the first collective, the ranks check that they selected the same cases.

Every rank runs every selected case in collection order; a rank with another selection (a
different -k, another file) would send its collectives to cases the others are not running
and the job would hang or mix sizes. The ranks exchange the number and a hash of their case
ids over the control group: any difference is reported, naming each rank's selection.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

from .channel import Channel


def selection_summary(case_ids: Sequence[str]) -> str:
    digest = hashlib.sha256("\n".join(case_ids).encode()).hexdigest()[:12]
    first = f", first {case_ids[0]}" if case_ids else ""
    return f"{len(case_ids)} case(s){first}, ids hash {digest}"


def compare_selection(control: Channel, case_ids: Sequence[str]) -> str | None:
    """None when every rank selected the same cases, else what each rank selected."""
    replies = [r.decode(errors="replace") for r in
               control.all_gather_bytes(selection_summary(case_ids).encode())]
    if len(set(replies)) == 1:
        return None
    return "; ".join(f"rank {rank}: {text}" for rank, text in enumerate(replies)
                     if rank == 0 or text != replies[0])
