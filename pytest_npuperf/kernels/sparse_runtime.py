"""The `Runtime ...` cells of LightningIndexer and SparseFlashAttention rows: the scalar
arguments and sequence lengths of the call, which the kernel table does not hold and the
simulator reads (msmodeling's ProfilingDataSource and InterpolatingDataSource).

What the simulator reads for these two kernels (its runtime-attention path): `Runtime
avg_seq_len` (required), then `sparse_mode`, `num_key_value_heads`, `input_layout`, `topk`,
`block_size`, `num_heads`, `cache_layout`, `kv_cache_mode` and, for SparseFlashAttention,
`sparse_block_size`, `sparse_indices_pattern`, `sparse_indices_valid_count`; for
interpolation also the query offsets (`actual_seq_lengths_values`, cumulative) and the KV
lengths per sequence (`actual_seq_lengths_kv_values`), and only rows whose
`metadata_completeness` is `complete`. Its own queries spell the paged cache `kv_cache_mode:
paged`, `cache_layout: PA_BSND`, `sparse_indices_pattern: uniform`, and take the average KV
length as the integer mean.

Two sources:
- `from_shapes`: a profiled row (a kernel table, a trace): what its shapes say (heads, KV
  heads, layout, block size, top-k, batch); the lengths are not in it, so the row stays
  `inferred_only` (the simulator then does not match it, as it cannot know its work);
- `from_arguments`: a replayed row: the arguments the replay itself passes (the lengths its
  plan uses: the row's Runtime values when given, else an even split of the query tokens and
  the block pool; sparse mode 3 unless given; sparse_block_size 1; indices drawn uniformly
  among the positions each token may see), `complete`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from ..db.columns import FIA_RUNTIME_FIELDS, PHASE_DECODE, PHASE_PREFILL, runtime_column
from .case import KernelCase

LIGHTNING_INDEXER, SPARSE_FLASH_ATTENTION = "LightningIndexer", "SparseFlashAttention"
KERNELS = (LIGHTNING_INDEXER, SPARSE_FLASH_ATTENTION)
PAGED_LAYOUT, PAGED_MODE = "PA_BSND", "paged"
COMPLETE, INFERRED = "complete", "inferred_only"
PATTERN = "uniform"
PHASE_MIXED = "mixed"

# (query, key, block table, query lengths, KV lengths, indices: (side, slot)) per kernel
_SLOTS = {LIGHTNING_INDEXER: (0, 1, 5, 3, 4, ("output", 0)),
          SPARSE_FLASH_ATTENTION: (0, 1, 4, 5, 6, ("input", 3))}


def _cells(fields: dict[str, str]) -> dict[str, str]:
    return {runtime_column(f): str(fields.get(f, "")) for f in FIA_RUNTIME_FIELDS}


def _dims_text(dims: Sequence[int]) -> str:
    return ",".join(str(d) for d in dims)


def from_shapes(case: KernelCase, *, source: str = "") -> dict[str, str]:
    """The Runtime cells a LightningIndexer / SparseFlashAttention row's shapes tell."""
    q_at, k_at, table_at, q_lens_at, kv_lens_at, (side, index_at) = _SLOTS[case.kernel_type]
    q, k, table = case.input(q_at), case.input(k_at), case.input(table_at)
    indices = case.output(index_at) if side == "output" else case.input(index_at)
    fields: dict[str, str] = {"source_profile": source, "metadata_completeness": INFERRED}
    if q.present and len(q.dims) in (3, 4):
        fields["input_layout"] = "TND" if len(q.dims) == 3 else "BSND"
        fields["num_heads"] = str(q.dims[-2])
    paged = table.present and len(table.dims) == 2 and k.present and len(k.dims) == 4
    if paged:
        fields.update(block_size=str(k.dims[1]), num_key_value_heads=str(k.dims[2]),
                      cache_layout=PAGED_LAYOUT, kv_cache_mode=PAGED_MODE,
                      block_table_shape=_dims_text(table.dims), batch_size=str(table.dims[0]))
    elif k.present and len(k.dims) >= 3:
        fields["num_key_value_heads"] = str(k.dims[-2])
    for name, slot in (("actual_seq_lengths_shape", case.input(q_lens_at)),
                       ("actual_seq_lengths_kv_shape", case.input(kv_lens_at))):
        if slot.present:
            fields[name] = _dims_text(slot.dims)
    if indices.present and indices.dims:
        fields["topk"] = str(indices.dims[-1])
    return _cells(fields)


def _phase(q_lens: Sequence[int], kv_lens: Sequence[int]) -> str:
    active = [(q, k) for q, k in zip(q_lens, kv_lens) if q > 0]
    if all(q == k for q, k in active):
        return PHASE_PREFILL
    if all(q == 1 for q, _ in active):
        return PHASE_DECODE
    return PHASE_MIXED


def from_arguments(case: KernelCase, *, q_lens: Sequence[int], kv_lens: Sequence[int],
                   causal: bool, topk: int, source: str) -> dict[str, str]:
    """The Runtime cells of the call a replay makes: `from_shapes` plus its sequence lengths,
    sparse mode and the sparse-attention arguments; `complete` for a TND query over a paged
    cache (the layout vLLM-Ascend runs and the simulator's runtime path reads)."""
    cells = from_shapes(case, source=source)
    fields = {f: cells[runtime_column(f)] for f in FIA_RUNTIME_FIELDS}
    cumulative, total = [], 0
    for n in q_lens:
        total += n
        cumulative.append(total)
    fields.update(
        actual_seq_lengths_values=_dims_text(cumulative),
        actual_seq_lengths_kv_values=_dims_text(kv_lens),
        avg_seq_len=str(sum(kv_lens) // len(kv_lens)) if kv_lens else "",
        sparse_mode="3" if causal else "0", topk=str(topk), batch_size=str(len(q_lens)),
        phase=_phase(q_lens, kv_lens))
    block_size = int(fields["block_size"] or 0)
    if block_size > 0:
        fields["block_table_valid_blocks"] = _dims_text(math.ceil(n / block_size)
                                                       for n in kv_lens)
    if case.kernel_type == SPARSE_FLASH_ATTENTION:
        fields.update(sparse_block_size="1", sparse_indices_pattern=PATTERN,
                      sparse_indices_valid_count=str(min(topk, max(kv_lens))))
    if fields.get("input_layout") == "TND" and fields.get("kv_cache_mode") == PAGED_MODE:
        fields["metadata_completeness"] = COMPLETE
    return _cells(fields)
