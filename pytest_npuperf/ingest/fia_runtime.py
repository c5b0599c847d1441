"""`Runtime ...` metadata of FusedInferAttentionScore rows (docs/format.md §2, §10).

The kernel table records the 31 input slots of the attention call but not its scalar
arguments (heads, layout, block size, sparse mode). torch_npu's `operator_details.csv`, written
beside `kernel_details.csv`, lists the operator-level input shapes of each call (before any
internal reshaping). Its attention rows are paired with the kernel table's attention rows in
launch order, and the arguments are inferred from the shapes. Sequence-length *values* are
not in either file; those columns stay empty and `Runtime metadata_completeness` says so.
"""

from __future__ import annotations

import re
from pathlib import Path

import pandas as pd

from ..db.columns import (
    CACHE_LAYOUT_BNSD,
    CACHE_LAYOUT_BSH,
    FIA_RUNTIME_FIELDS,
    PHASE_DECODE,
    PHASE_PREFILL,
    runtime_column,
)
from ..db.csvfile import scan_csv
from ..db.errors import CellError, ContractError, NpuperfError, clip, os_error
from ..db.shapes import Shapes, Slot, format_slot, parse_shapes
from ..db.table import read_header
from ..kernels.catalog import (
    FIA_BLOCK_TABLE,
    FIA_KEY,
    FIA_KEY_ROPE,
    FIA_KV_SEQ_LENS,
    FIA_MASK,
    FIA_QUERY,
    FIA_QUERY_ROPE,
    FIA_SEQ_LENS,
)

QUERY, KEY, MASK, SEQ, SEQ_KV = FIA_QUERY, FIA_KEY, FIA_MASK, FIA_SEQ_LENS, FIA_KV_SEQ_LENS
BLOCK_TABLE, QUERY_ROPE, KEY_ROPE = FIA_BLOCK_TABLE, FIA_QUERY_ROPE, FIA_KEY_ROPE
_OPERATOR_NAME_COLUMNS = ("Name", "Type", "Op Name", "Op Type", "Operator Name", "Operator Type")
_FIA_NAME = "fusedinferattentionscore"


def _slot(shapes: Shapes, index: int) -> Slot:
    return shapes[index] if index < len(shapes) else None


def infer_runtime(shapes: Shapes, *, source: str = "", raw: str = "") -> dict[str, str]:
    """`Runtime ...` cells inferred from the attention call's input shapes."""
    q, k = _slot(shapes, QUERY), _slot(shapes, KEY)
    block_table = _slot(shapes, BLOCK_TABLE)
    mask = _slot(shapes, MASK)
    rope = _slot(shapes, QUERY_ROPE) is not None or _slot(shapes, KEY_ROPE) is not None
    paged = block_table is not None
    out: dict[str, str] = {
        "source_profile": source,
        "actual_seq_lengths_shape": format_slot(_slot(shapes, SEQ)),
        "actual_seq_lengths_kv_shape": format_slot(_slot(shapes, SEQ_KV)),
        "block_table_shape": format_slot(block_table),
        "operator_input_shapes_raw": raw,
    }
    layout = heads = kv_heads = ""
    if q is not None and len(q) == 3:
        layout, heads = "TND", str(q[1])
    elif q is not None and len(q) == 4:
        layout, heads = ("BNSD_NBSD" if rope else "BNSD"), str(q[1])
    if rope:
        kv_heads = "1"  # MLA: one latent KV head shared by all query heads
    elif k is not None and q is not None:
        if not paged and len(k) >= 2:
            kv_heads = str(k[1])
        elif paged and len(k) == 4:
            kv_heads = str(k[1])  # (blocks, kv_heads, block_size, head_dim)
        elif paged and len(k) == 3 and q[-1] and k[-1] % q[-1] == 0:
            kv_heads = str(k[-1] // q[-1])  # (blocks, block_size, kv_heads * head_dim)
    block_size = ""
    if paged and k is not None:
        block_size = str(k[1]) if len(k) == 3 else str(k[2]) if len(k) == 4 else ""
    if rope:
        sparse_mode = "3" if mask is not None else "0"
    else:
        sparse_mode = "3" if (paged or mask is not None) else "0"
    if paged:
        attn_state = "mla_paged_runtime" if rope else "paged_runtime"
    else:
        attn_state = "mla_prefill_runtime" if rope else "prefill_no_cache"
    batch = _batch_size(q, _slot(shapes, SEQ), block_table, layout)
    out.update({
        "num_heads": heads, "num_key_value_heads": kv_heads, "input_layout": layout,
        "block_size": block_size, "sparse_mode": sparse_mode, "attn_state": attn_state,
        "kv_cache_mode": "paged_cache_pool" if paged else "non_paged_direct",
        "metadata_completeness": "inferred_only",
        "phase": _phase(q, batch, layout, paged), "batch_size": str(batch or ""),
        "cache_layout": _cache_layout(k) if paged else "",
    })
    # topk, sparse_* and quant_mode describe sparse or quantised attention: the kernel table
    # does not tell them, so they stay empty (the simulator then neither matches nor rejects
    # on them).
    return {runtime_column(f): out.get(f, "") for f in FIA_RUNTIME_FIELDS}


def _batch_size(q: Slot, seq_lens: Slot, block_table: Slot, layout: str) -> int | None:
    """Requests in the call: the length of the sequence-length list, else the block table's
    rows (one per request), else BNSD's batch."""
    if seq_lens is not None and len(seq_lens) == 1:
        return seq_lens[0]
    if block_table is not None and len(block_table) == 2:
        return block_table[0]
    if q is not None and layout.startswith("BNSD"):
        return q[0]
    return None


def _phase(q: Slot, batch: int | None, layout: str, paged: bool) -> str:
    """prefill without a KV cache; decode when a paged call has one query token per request;
    empty when a paged call has more (chunked prefill or a mixed batch cannot be told apart)."""
    if not paged:
        return PHASE_PREFILL
    if q is None:
        return ""
    if layout.startswith("BNSD") and len(q) == 4 and q[2] == 1:
        return PHASE_DECODE
    if layout == "TND" and batch is not None and q[0] == batch:
        return PHASE_DECODE
    return ""


def _cache_layout(k: Slot) -> str:
    """Layout of the paged key cache, as `infer_runtime` reads its block size."""
    if k is None:
        return ""
    return CACHE_LAYOUT_BSH if len(k) == 3 else CACHE_LAYOUT_BNSD if len(k) == 4 else ""


def _sibling_operator_details(kernel_details: Path) -> Path | None:
    suffix = kernel_details.stem.removeprefix("kernel_details")
    for name in (f"operator_details{suffix}.csv", "operator_details.csv"):
        candidate = kernel_details.parent / name
        if candidate.is_file():
            return candidate
    return None


def _is_fia_name(text: str) -> bool:
    return _FIA_NAME in re.sub(r"[^a-z0-9]", "", str(text).lower())


def operator_fia_shapes(path: Path) -> list[str]:
    """Input Shapes of the attention calls in an operator_details table, in file order."""
    header = [h.strip() for h in read_header(path)]
    if "Input Shapes" not in header:
        raise NpuperfError(f"{path}: no 'Input Shapes' column (profile with record_shapes=True)")
    names = [c for c in _OPERATOR_NAME_COLUMNS if c in header]
    scan_csv(path)  # bounded: no NUL byte, no absurd line, before pandas buffers any of it
    try:
        frame = pd.read_csv(path, usecols=lambda c: c.strip() in {"Input Shapes", *names},
                            dtype=str, keep_default_na=False, encoding="utf-8-sig")
    except (pd.errors.ParserError, UnicodeDecodeError, ValueError) as exc:
        raise ContractError(f"{path}: malformed CSV: "
                            f"{clip(str(exc).strip().splitlines()[-1], 160)}") from None
    except OSError as exc:
        raise os_error(path, exc) from None
    frame.columns = [c.strip() for c in frame.columns]
    is_fia = pd.Series(False, index=frame.index)
    for column in names:
        is_fia |= frame[column].map(_is_fia_name)
    shapes = frame.loc[is_fia, "Input Shapes"]
    return [re.sub(r"[\r\n]+", "", s) for s in shapes if s.strip()]


def runtime_for_file(kernel_details: Path, kernel_shapes: list[str], source: str
                     ) -> tuple[list[dict[str, str]], str]:
    """Runtime cells for each attention row of one kernel table (in order), and a note.

    `kernel_shapes` are the kernel rows' `Input Shapes`. Where the sibling operator table
    pairs with a row, its shapes are used (they keep the operator's own layout); otherwise
    the kernel shapes are.
    """
    operator_path = _sibling_operator_details(kernel_details)
    operator_shapes: list[str] = operator_fia_shapes(operator_path) if operator_path else []
    note = ""
    if operator_path and len(operator_shapes) != len(kernel_shapes):
        note = (f"{operator_path}: {len(operator_shapes)} attention operator rows for "
                f"{len(kernel_shapes)} kernel rows; paired the first "
                f"{min(len(operator_shapes), len(kernel_shapes))} in order")
    out = []
    for i, kernel_cell in enumerate(kernel_shapes):
        raw = operator_shapes[i] if i < len(operator_shapes) else ""
        try:
            shapes = parse_shapes(raw) if raw else parse_shapes(kernel_cell)
        except CellError:
            raw, shapes = "", parse_shapes(kernel_cell)
        out.append(infer_runtime(shapes, source=source, raw=raw))
    return out, note
