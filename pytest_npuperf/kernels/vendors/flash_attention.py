"""FlashAttention-2 (Dao-AILab/flash-attention, flash_attn/flash_attn_interface.py) as an
implementation of FusedInferAttentionScore: the attention kernel most GPU serving engines
run, with the softmax LSE from the same kernel and a paged cache read in place.

- `flash_attn_varlen_func(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k,
  dropout_p=0.0, softmax_scale=None, causal=False, ..., return_attn_probs=False,
  block_table=None)`: q (total_q, nheads, headdim), k/v (total_k, nheads_k, headdim), int32
  cumulative lengths; returns out, or (out, softmax_lse (nheads, total_q), S_dmask) with
  return_attn_probs (S_dmask is only computed with dropout);
- `flash_attn_func(q, k, v, dropout_p=0.0, softmax_scale=None, causal=False, ...,
  return_attn_probs=False)`: (batch, seqlen, nheads, headdim), lse (batch, nheads, seqlen);
- `flash_attn_with_kvcache(q, k_cache, v_cache, ..., cache_seqlens=None, ...,
  block_table=None, softmax_scale=None, causal=False, ..., return_softmax_lse=False)`: a
  paged cache (num_blocks, page_block_size, nheads_k, headdim) read through an int32 block
  table, in place; page_block_size a multiple of 256 in FlashAttention-2.

causal=True is aligned to the bottom right (FIA's sparse_mode 3); rope slots (MLA) would have
to be concatenated inside the timed call, and an arbitrary mask is not a flash-attn argument:
such rows are `Unsupported` here and measured by another implementation.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable

import torch

from ..attention import LEFT_UP, NONE, RIGHT_DOWN, AttentionPlan, cumulative, fia_plan
from ..implementation import Unsupported
from ..spec import implemented
from .layouts import lse_layout, out_layout

PAGE_MULTIPLE = 256  # FlashAttention-2's paged KV block size


def fused_infer_attention(spec, inputs, case, backend) -> Callable[[], object]:
    plan = fia_plan(case)
    causal = _causal(plan)
    if plan.rope_dim:
        raise Unsupported("rope slots (MLA): flash-attn takes one q.k product; concatenating "
                          "them would be timed")
    if plan.head_dim != plan.value_dim:
        raise Unsupported(f"value head dim {plan.value_dim} differs from {plan.head_dim}")
    query = inputs["query"]
    if query.dtype not in (torch.float16, torch.bfloat16):
        raise Unsupported(f"{query.dtype}: flash-attn runs float16 and bfloat16")
    try:
        import flash_attn
    except ImportError as exc:
        raise Unsupported(f"flash_attn cannot be imported: {exc}") from None
    empty = torch.zeros(1, dtype=torch.float32, device=query.device)  # the no-LSE output
    if plan.paged:
        attend, name = _paged(flash_attn, plan, inputs, causal), "flash_attn_with_kvcache (paged)"
    elif plan.in_layout == "TND":
        attend, name = _varlen(flash_attn, plan, inputs, causal), "flash_attn_varlen_func"
    else:
        attend, name = _batched(flash_attn, plan, inputs, causal), "flash_attn_func"

    def call():
        out, lse = attend()
        return out_layout(plan, out), (lse_layout(plan, lse) if plan.lse else empty)
    return implemented(name + (" + its softmax LSE" if plan.lse else ""), call)


def _causal(plan: AttentionPlan) -> bool:
    if plan.causal == NONE:
        return False
    if plan.causal == RIGHT_DOWN or (plan.causal == LEFT_UP and plan.q_lens == plan.kv_lens):
        return True
    raise Unsupported(f"{plan.causal} masking: flash-attn aligns causal masks bottom right only")


def _uniform(plan: AttentionPlan, *, keys: bool = True) -> None:
    if len(set(plan.q_lens)) > 1 or (keys and len(set(plan.kv_lens)) > 1):
        raise Unsupported("padded sequences of unequal lengths in a batched layout")


def _bsnd(t: torch.Tensor, layout: str, heads: int, batch: int) -> torch.Tensor:
    """A (batch, seq, heads, dim) view of a tensor in `layout` (no copy)."""
    if layout == "BNSD":
        return t.transpose(1, 2)
    if layout == "BSH":
        return t.view(batch, t.shape[1], heads, -1)
    if layout == "TND":
        return t.view(batch, -1, heads, t.shape[-1])
    return t


def _varlen(flash_attn, plan, inputs, causal):
    q, k, v = inputs["query"], inputs["key"], inputs["value"]
    device = q.device
    cu_q = torch.tensor([0, *cumulative(plan.q_lens)], dtype=torch.int32, device=device)
    cu_k = torch.tensor([0, *cumulative(plan.kv_lens)], dtype=torch.int32, device=device)
    max_q, max_k = max(plan.q_lens), max(plan.kv_lens)
    with_lse = bool(plan.lse)

    def attend():
        found = flash_attn.flash_attn_varlen_func(
            q, k, v, cu_q, cu_k, max_q, max_k, dropout_p=0.0, softmax_scale=plan.scale,
            causal=causal, return_attn_probs=with_lse)
        return (found[0], found[1]) if with_lse else (found, None)
    return attend


def _batched(flash_attn, plan, inputs, causal):
    _uniform(plan)
    layout, batch = plan.in_layout, plan.batch
    q = _bsnd(inputs["query"], layout, plan.heads, batch)
    k = _bsnd(inputs["key"], layout, plan.kv_heads, batch)
    v = _bsnd(inputs["value"], layout, plan.kv_heads, batch)
    with_lse = bool(plan.lse)

    def attend():
        found = flash_attn.flash_attn_func(q, k, v, dropout_p=0.0, softmax_scale=plan.scale,
                                           causal=causal, return_attn_probs=with_lse)
        return (found[0], found[1]) if with_lse else (found, None)
    return attend


def _paged(flash_attn, plan, inputs, causal):
    if plan.block_size % PAGE_MULTIPLE:
        raise Unsupported(f"cache blocks of {plan.block_size} tokens: FlashAttention-2 pages "
                          f"are multiples of {PAGE_MULTIPLE}")
    if plan.cache_layout != "BnBsH":
        raise Unsupported(f"{plan.cache_layout} cache: flash-attn reads (blocks, block_size, "
                          f"heads, dim)")
    _uniform(plan, keys=False)  # a cache's lengths are its cache_seqlens
    key, value = inputs["key"], inputs["value"]
    k_cache = key.view(key.shape[0], plan.block_size, plan.kv_heads, -1)
    v_cache = value.view(value.shape[0], plan.block_size, plan.kv_heads, -1)
    q = _bsnd(inputs["query"], plan.in_layout, plan.heads, plan.batch)
    device = q.device
    table = inputs["block_table"].to(torch.int32)
    lengths = torch.tensor(plan.kv_lens, dtype=torch.int32, device=device)
    function = flash_attn.flash_attn_with_kvcache
    # FlashAttention-3's interface names the block table `page_table`.
    table_name = "block_table" if "block_table" in inspect.signature(function).parameters \
        else "page_table"
    with_lse = bool(plan.lse)

    def attend():
        found = function(q, k_cache, v_cache, cache_seqlens=lengths, softmax_scale=plan.scale,
                         causal=causal, return_softmax_lse=with_lse, **{table_name: table})
        return (found[0], found[1]) if with_lse else (found, None)
    return attend
