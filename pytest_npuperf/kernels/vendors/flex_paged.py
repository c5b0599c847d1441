"""torch's FlexAttention over a paged KV cache, read in place: the FusedInferAttentionScore
rows of a paged cache without gathering their pages inside the timed call.

The whole pool is the key sequence (a view: no copy), every query token is one row, and a
block mask (block = one cache page) lets a query see only the pages its sequence's block
table names, up to its length (and its causal limit): compiled, FlexAttention visits only
those pages. `flex_attention(query, key, value, score_mod=None, block_mask=None, scale=None,
enable_gqa=False, return_lse=False, kernel_options=None, *, return_aux=None)` and
`create_block_mask(mask_mod, B, H, Q_LEN, KV_LEN, device=None, BLOCK_SIZE=128, ...)`
(torch.nn.attention.flex_attention); the LSE is requested with `return_aux=AuxRequest(lse=
True)`, which inductor's CPU template does not produce (torch 2.13): on a CPU rows that want
the LSE are left to another implementation.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from .. import implementation_options
from ..attention import NONE, RIGHT_DOWN, fia_plan
from ..implementation import Unsupported
from ..spec import implemented
from .layouts import lse_layout, out_layout


def fused_infer_attention(spec, inputs, case, backend) -> Callable[[], object]:
    plan = fia_plan(case)
    if not plan.paged:
        raise Unsupported("not a paged cache: the scaled-dot-product kernels read it in place")
    if plan.rope_dim:
        raise Unsupported("rope slots (MLA): one q.k product per score here")
    if plan.cache_layout != "BnBsH" and plan.kv_heads > 1:
        raise Unsupported(f"{plan.cache_layout} cache of {plan.kv_heads} heads: not one "
                          f"(heads, tokens, dim) view")
    if plan.causal not in (NONE, RIGHT_DOWN):
        raise Unsupported(f"{plan.causal} masking")
    if plan.in_layout != "TND" and any(n != plan.q_seq for n in plan.q_lens):
        raise Unsupported("padded queries of unequal lengths in a batched layout")
    query = inputs["query"]
    if query.device.type == "cpu" and plan.lse:
        raise Unsupported("the LSE: FlexAttention compiled for a CPU does not return it")
    try:
        from torch.nn.attention.flex_attention import (
            AuxRequest,
            create_block_mask,
            flex_attention,
        )
    except ImportError as exc:
        raise Unsupported(f"no FlexAttention in this torch: {exc}") from None
    device, block = query.device, plan.block_size
    pool = inputs["key"].shape[0]
    table = inputs["block_table"].to(torch.int64).cpu()
    owner = torch.full((pool,), -1, dtype=torch.int64)
    logical = torch.zeros(pool, dtype=torch.int64)
    for seq, length in enumerate(plan.kv_lens):
        for index in range(-(-length // block)):
            owner[table[seq, index]], logical[table[seq, index]] = seq, index
    seq_of = torch.tensor([s for s, n in enumerate(plan.q_lens) for _ in range(n)])
    pos = torch.tensor([p for n in plan.q_lens for p in range(n)])
    q_len, kv_len = torch.tensor(plan.q_lens), torch.tensor(plan.kv_lens)
    owner, logical, seq_of, pos, q_len, kv_len = (
        t.to(device) for t in (owner, logical, seq_of, pos, q_len, kv_len))
    causal = plan.causal == RIGHT_DOWN

    def visible(b, h, q_idx, kv_idx):
        page, seq = kv_idx // block, seq_of[q_idx]
        at = logical[page] * block + kv_idx % block
        ok = (owner[page] == seq) & (at < kv_len[seq])
        if causal:
            ok = ok & (at <= kv_len[seq] - q_len[seq] + pos[q_idx])
        return ok

    tokens = sum(plan.q_lens)
    mask = create_block_mask(visible, 1, None, tokens, pool * block, device=device,
                             BLOCK_SIZE=(_query_block(tokens), block))
    k, v = (_heads_pool(inputs[name], plan) for name in ("key", "value"))
    q = _query_rows(query, plan)  # (1, N, T, D)
    attend = torch.compile(flex_attention, backend=implementation_options.COMPILE_BACKEND)
    extra = {"return_aux": AuxRequest(lse=True)} if plan.lse else {}
    empty = torch.zeros(1, dtype=torch.float32, device=device)
    batched = plan.in_layout != "TND"

    def call():
        found = attend(q, k, v, block_mask=mask, scale=plan.scale,
                       enable_gqa=plan.group > 1, **extra)
        out, lse = (found[0], found[1].lse) if plan.lse else (found, None)
        rows = out[0].transpose(0, 1)  # (T, N, D)
        if batched:
            rows = rows.reshape(plan.batch, -1, *rows.shape[1:])
        if lse is None:
            return out_layout(plan, rows), empty
        heads_tokens = lse[0]  # (N, T)
        if batched:
            heads_tokens = heads_tokens.reshape(plan.heads, plan.batch, -1).transpose(0, 1)
        return out_layout(plan, rows), lse_layout(plan, heads_tokens)
    call()  # compile now: no sample ever times a compilation
    return implemented("FlexAttention (compiled) over the paged cache in place, block mask "
                       "from the block table" + (" + its LSE" if plan.lse else ""), call)


def _query_block(tokens: int) -> int:
    """The query rows of one mask block: a power of two, at most 128."""
    size = 1
    while size < min(tokens, 128):
        size *= 2
    return size


def _heads_pool(cache: torch.Tensor, plan) -> torch.Tensor:
    """The pool as one (1, N_kv, blocks * block_size, D) key sequence, a view."""
    blocks = cache.shape[0]
    if plan.cache_layout == "BnBsH":
        rows = cache.reshape(blocks * plan.block_size, plan.kv_heads, -1)
        return rows.permute(1, 0, 2).unsqueeze(0)
    return cache.reshape(1, blocks * plan.block_size, -1).unsqueeze(0)  # one KV head


def _query_rows(query: torch.Tensor, plan) -> torch.Tensor:
    """The queries as (1, N, T, D): token-major as they are, batched ones flattened."""
    if plan.in_layout == "TND":
        rows = query
    elif plan.in_layout == "BNSD":
        rows = query.transpose(1, 2).reshape(-1, plan.heads, query.shape[-1])
    else:  # BSND, BSH
        rows = query.reshape(-1, plan.heads, query.shape[-1] // (
            plan.heads if plan.in_layout == "BSH" else 1))
    return rows.transpose(0, 1).unsqueeze(0)
