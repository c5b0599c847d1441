"""DeepSeek-V3.2 sparse attention (DSA): LightningIndexer picks, for every query token, the
top-k KV positions; SparseFlashAttention attends to those positions only.

NPU APIs (op-plugin op_plugin/config/op_plugin_functions.yaml; vllm-ascend
csrc/torch_binding.cpp registers `torch.ops._C_ascend.*` with the same signatures, which its
DeepSeek-V3.2 backend calls: vllm_ascend/device/device_op.py):
- `npu_lightning_indexer(query, key, weights, *, actual_seq_lengths_query,
  actual_seq_lengths_key, block_table, layout_query="BSND", layout_key="BSND",
  sparse_count=2048, sparse_mode=3, ...) -> (sparse_indices, sparse_values)`;
- `npu_sparse_flash_attention(query, key, value, sparse_indices, scale_value, *, block_table,
  actual_seq_lengths_query, actual_seq_lengths_kv, query_rope, key_rope, sparse_block_size=1,
  layout_query, layout_kv, sparse_mode=3, ..., attention_mode, return_softmax_lse)
  -> (attention_out, softmax_max, softmax_sum)`.
vllm-ascend calls both with layout_query="TND", layout_key/kv="PA_BSND", sparse_mode=3,
SFA with sparse_block_size=1 and attention_mode=2 (MLA absorbed). Semantics from the operator
READMEs (vllm-ascend csrc/attention/{lightning_indexer,sparse_flash_attention}/README.md):
index score = sum over heads of w * relu(q . k); sparse indices are positions inside the
sequence, valid ones first, -1 after; SFA's softmax max/sum are (N2, T, N1 / N2) for TND.
Assumed: the causal limit of sparse_mode 3 is bottom-right aligned as in FIA; SFA's scale
1/sqrt(D + rope dim) (the model's is not in the row).

The replay prefers torch_npu's functions and falls back to vllm-ascend's ops (which need the
custom-op environment) when torch_npu lacks them.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import torch

from .attention import (
    cumulative,
    gather_pages,
    kv_lengths,
    pad_index,
    paged_block_table,
    query_lengths,
    row_chunks,
    runtime_int,
    valid_rows,
)
from .binding import Variant, bound_call
from .case import KernelCase
from .custom_ops import custom_op_environment, operator
from .sparse_runtime import from_arguments
from .spec import KernelSpec, api_results, implemented
from .tensors import torch_dtype

PAGED = "PA_BSND"
REPLAY_SOURCE = "replay_arguments"


@dataclass(frozen=True)
class SparsePlan:
    q_layout: str  # TND or BSND
    kv_layout: str  # PA_BSND, BSND or TND
    heads: int
    kv_heads: int
    head_dim: int
    q_lens: tuple[int, ...]
    kv_lens: tuple[int, ...]
    q_seq: int
    kv_seq: int
    block_size: int
    causal: bool  # sparse_mode 3

    @property
    def batch(self) -> int:
        return len(self.q_lens)

    @property
    def tokens(self) -> int:
        return sum(self.q_lens) if self.q_layout == "TND" else self.batch * self.q_seq

    @property
    def group(self) -> int:
        return self.heads // self.kv_heads

    def token_dims(self, *tail: int) -> tuple[int, ...]:
        """Per-token output dims: (T, *tail) for TND, (B, S, *tail) for BSND."""
        if self.q_layout == "TND":
            return (self.tokens, *tail)
        return (self.batch, self.q_seq, *tail)


def sparse_plan(case: KernelCase, query: int, key: int, table: int, q_lens_slot: int
                ) -> SparsePlan:
    name = case.kernel_type
    q, k, bt = case.input(query).dims, case.input(key).dims, case.input(table)
    if len(q) not in (3, 4):
        raise case.error(f"{name}: query {q} is neither TND nor BSND")
    q_layout = "TND" if len(q) == 3 else "BSND"
    heads, head_dim = q[-2], q[-1]
    if bt.present:
        if len(k) != 4 or len(bt.dims) != 2:
            raise case.error(f"{name}: a paged key must be (blocks, block_size, N, D) with a "
                             f"2-D block table, got {k} and {bt.dims}")
        kv_layout, block_size, kv_heads = PAGED, k[1], k[2]
    elif len(k) in (3, 4):
        kv_layout, block_size, kv_heads = ("TND" if len(k) == 3 else "BSND"), 0, k[-2]
    else:
        raise case.error(f"{name}: key {k} is neither TND nor BSND")
    if k[-1] != head_dim or heads % kv_heads:
        raise case.error(f"{name}: query {q} and key {k} differ in head dim or head groups")
    if q_layout == "BSND":
        batch = q[0]
    elif bt.present:
        batch = bt.dims[0]
    else:
        lens = case.input(q_lens_slot)
        batch = lens.dims[0] if lens.present and lens.dims else 1
    q_seq = q[0] if q_layout == "TND" else q[1]
    q_lens = query_lengths(case, q_layout, batch, q_seq) if q_layout == "TND" \
        else (q_seq,) * batch
    kv_seq = 0 if bt.present else (k[0] if kv_layout == "TND" else k[1])
    kv_lens = kv_lengths(case, kv_layout, batch, kv_seq, bt, block_size,
                         k[0] if bt.present else 0)
    sparse_mode = runtime_int(case, "sparse_mode")
    sparse_mode = 3 if sparse_mode is None else sparse_mode
    if sparse_mode not in (0, 3):
        raise case.error(f"{name}: sparse_mode {sparse_mode} (0 and 3 are supported)")
    return SparsePlan(q_layout, kv_layout, heads, kv_heads, head_dim, q_lens, kv_lens, q_seq,
                      kv_seq, block_size, sparse_mode == 3)


def token_sequences(plan: SparsePlan, device) -> tuple[torch.Tensor, torch.Tensor]:
    """Each query token's sequence and position in it (token order of the query)."""
    seq = torch.repeat_interleave(torch.arange(plan.batch, device=device),
                                  torch.tensor(plan.q_lens, device=device))
    starts = torch.tensor([0, *cumulative(plan.q_lens)[:-1]], device=device)
    position = torch.arange(seq.numel(), device=device) - starts[seq]
    return seq, position


def allowed_lengths(plan: SparsePlan, device) -> torch.Tensor:
    """How many KV positions each query token may see (bottom-right causal for mode 3)."""
    seq, position = token_sequences(plan, device)
    kv = torch.tensor(plan.kv_lens, device=device)[seq]
    if not plan.causal:
        return kv
    q = torch.tensor(plan.q_lens, device=device)[seq]
    return (kv - q + position + 1).clamp(1, None).minimum(kv)


def padded_allowed(plan: SparsePlan, device) -> torch.Tensor:
    """(B, 1, S, L) bool: which KV positions each (padded) query position may see."""
    i = torch.arange(max(plan.q_lens), device=device).view(1, 1, -1, 1)
    j = torch.arange(max(plan.kv_lens), device=device).view(1, 1, 1, -1)
    kv = torch.tensor(plan.kv_lens, device=device).view(-1, 1, 1, 1)
    q = torch.tensor(plan.q_lens, device=device).view(-1, 1, 1, 1)
    allowed = j < kv
    if plan.causal:
        allowed = allowed & (j <= (kv - q + i).clamp(min=0))
    return allowed


def kv_rows(plan: SparsePlan, seq: torch.Tensor, position: torch.Tensor,
            table: torch.Tensor | None) -> torch.Tensor:
    """The row of (sequence, position) in the key viewed as (rows, N2, D)."""
    if plan.kv_layout == PAGED:
        block = table[seq, position // plan.block_size].to(torch.int64)
        return block * plan.block_size + position % plan.block_size
    if plan.kv_layout == "BSND":
        return seq * plan.kv_seq + position
    starts = torch.tensor([0, *cumulative(plan.kv_lens)[:-1]], device=position.device)
    return starts[seq] + position


def flat_tokens(t: torch.Tensor) -> torch.Tensor:
    """A key/value (or query) tensor as (rows, N, D)."""
    return t.reshape(-1, *t.shape[-2:])


def npu_op(backend, name: str) -> tuple[Callable, str]:
    """torch_npu's `name`, else vllm-ascend's `torch.ops._C_ascend.<name>` (checked first for
    the custom-op environment it needs); and which of the two it is.

    torch_npu's first: it runs CANN's kernel of the row's type (LightningIndexer), and every
    torch_npu since 2.9.0 has both (op-plugin 7.3.0 op_plugin_functions.yaml). DeepSeek-V3.2 in
    vllm-ascend calls the `_C_ascend` ones (v0.18.0 attention/sfa_v1.py:988, 1009), whose
    indexer up to v0.20.2rc1 is another kernel (LightningIndexerVllm, kernel_types.py)."""
    op = getattr(backend.torch_npu, name, None)
    if op is not None:
        return op, f"torch_npu.{name}"
    if getattr(backend, "custom_operator", None) is None:
        missing = custom_op_environment()
        if missing:
            raise RuntimeError(f"torch_npu has no {name} and vllm-ascend's needs: "
                               + "; ".join(missing))
    return operator(backend, "_C_ascend", name), f"torch.ops._C_ascend.{name}"


# vllm-ascend's `_C_ascend` schemas up to v0.20.2rc1 (csrc/torch_binding.cpp): the indexer has
# no pre_tokens / next_tokens / return_value and returns the indices alone; sparse flash
# attention takes sparse_block_size before `*` and has no attention_mode / return_softmax_lse,
# returning the output alone. From v0.21.0rc1 both match torch_npu's.
OLD_C_ASCEND = "vllm-ascend <= v0.20.2rc1 schema"


def build_paging(plan: SparsePlan, case: KernelCase, tensors: dict, backend, generator,
                 key: int, table: int, q_lens: int, kv_lens: int) -> None:
    """Block table and the sequence-length tensors (int32, cumulative for TND)."""
    device = backend.device
    if plan.kv_layout == PAGED:
        tensors["block_table"] = paged_block_table(plan.batch, case.input(table).dims[1],
                                                  case.input(key).dims[0], backend, generator)
    if case.input(q_lens).present or plan.q_layout == "TND":
        values = cumulative(plan.q_lens) if plan.q_layout == "TND" else list(plan.q_lens)
        tensors["actual_seq_lengths_query"] = torch.tensor(values, dtype=torch.int32,
                                                           device=device)
    if case.input(kv_lens).present or plan.kv_layout in (PAGED, "TND"):
        values = cumulative(plan.kv_lens) if plan.kv_layout == "TND" else list(plan.kv_lens)
        tensors["actual_seq_lengths_kv"] = torch.tensor(values, dtype=torch.int32,
                                                        device=device)


def layout_kwargs(plan: SparsePlan, tensors: dict) -> dict:
    return {"block_table": tensors.get("block_table"),
            "actual_seq_lengths_query": tensors.get("actual_seq_lengths_query"),
            "sparse_mode": 3 if plan.causal else 0}


# -- LightningIndexer -------------------------------------------------------------------------
LI_QUERY, LI_KEY, LI_WEIGHTS, LI_Q_LENS, LI_K_LENS, LI_TABLE = range(6)


def indexer_plan(case: KernelCase) -> tuple[SparsePlan, int]:
    plan = sparse_plan(case, LI_QUERY, LI_KEY, LI_TABLE, LI_Q_LENS)
    weights = case.input(LI_WEIGHTS).dims
    if weights != case.input(LI_QUERY).dims[:-1]:
        raise case.error(f"LightningIndexer: weights {weights} must be the query's "
                         f"{case.input(LI_QUERY).dims[:-1]}")
    out = case.output(0).dims
    if len(out) < 2 or out[:-1] != plan.token_dims(plan.kv_heads):
        raise case.error(f"LightningIndexer: sparse_indices {out} is not "
                         f"{plan.token_dims(plan.kv_heads, 'count')}", column="Output Shapes")
    return plan, out[-1]


class LightningIndexer(KernelSpec):
    kernel_type = "LightningIndexer"
    portable = "torch: gather pages, per-head matmul + relu, weighted sum, topk"
    unordered_outputs = (0,)  # the selected key indices: a set per query
    work = ("2*pairs*N*D + 2*pairs*N flops (pairs: causal query-key pairs); bytes of every slot of"
            " the row")

    def check(self, case: KernelCase) -> None:
        super().check(case)
        indexer_plan(case)

    def build_inputs(self, case, backend, generator):
        plan, _ = indexer_plan(case)
        tensors = {name: self.tensor(case, i, backend, generator)
                   for i, name in ((LI_QUERY, "query"), (LI_KEY, "key"), (LI_WEIGHTS, "weights"))}
        build_paging(plan, case, tensors, backend, generator, LI_KEY, LI_TABLE, LI_Q_LENS,
                     LI_K_LENS)
        return tensors

    def portable_call(self, tensors, case) -> Callable[[], object]:
        plan, count = indexer_plan(case)
        query, key, weights = tensors["query"], tensors["key"], tensors["weights"]
        table = tensors.get("block_table")
        device = query.device
        b, n2, g = plan.batch, plan.kv_heads, plan.group
        s_max, l_max = max(plan.q_lens), max(plan.kv_lens)
        tnd = plan.q_layout == "TND"
        pad = pad_index(plan.q_lens, device) if tnd else None
        keep = valid_rows(plan.q_lens, device) if pad is not None else None
        allowed = padded_allowed(plan, device)  # (B, 1, S, L)
        positions = torch.arange(l_max, device=device)
        rows = (kv_rows(plan, torch.arange(b, device=device).unsqueeze(-1), positions, None)
                if plan.kv_layout != PAGED else None)
        values_wanted = case.output(1).present

        def per_sequence(x):  # (T | B, S, ...) -> (B, S, ...)
            if tnd and pad is not None:
                x = x.index_select(0, pad)
            return x.reshape(b, s_max, *x.shape[1 if tnd else 2:])

        def lightning_indexer():
            if plan.kv_layout == PAGED:
                keys = gather_pages(key, table, l_max, plan.block_size, n2, "BnBsH")
            else:
                keys = flat_tokens(key)[rows].transpose(1, 2)  # (B, N2, L, D)
            kt = keys.transpose(-1, -2)
            q = per_sequence(query).view(b, s_max, n2, g, -1)
            w = per_sequence(weights).view(b, s_max, n2, g).float()
            score = torch.zeros((b, n2, s_max, l_max), dtype=torch.float32, device=device)
            for head in range(g):  # heads one by one: no (S, G, L) intermediate
                part = torch.matmul(q[:, :, :, head].transpose(1, 2), kt).relu_()
                score += part.float() * w[:, :, :, head].transpose(1, 2).unsqueeze(-1)
            score.masked_fill_(~allowed, float("-inf"))
            top, index = score.topk(min(count, l_max), dim=-1)
            index = index.masked_fill(top == float("-inf"), -1)
            if index.shape[-1] < count:
                pad_to = (0, count - index.shape[-1])
                index = torch.nn.functional.pad(index, pad_to, value=-1)
                top = torch.nn.functional.pad(top, pad_to, value=float("-inf"))
            outs = [index.to(torch.int32)] + ([top.to(query.dtype)] if values_wanted else [])
            outs = [x.transpose(1, 2) for x in outs]  # (B, S, N2, count)
            if tnd:
                outs = [x.reshape(-1, n2, count) for x in outs]
                if keep is not None:
                    outs = [x.index_select(0, keep) for x in outs]
            return tuple(outs) if values_wanted else outs[0]
        return implemented("torch gather + per-head matmul + topk", lightning_indexer)

    def npu_call(self, tensors, case, backend) -> Callable[[], object]:
        plan, count = indexer_plan(case)
        t = tensors
        kwargs = layout_kwargs(plan, t)
        kwargs.update(actual_seq_lengths_key=t.get("actual_seq_lengths_kv"),
                      layout_query=plan.q_layout, layout_key=plan.kv_layout,
                      sparse_count=count)
        args = (t["query"], t["key"], t["weights"])
        values = case.output(1).present
        variants = [Variant("return_value schema", args, dict(kwargs, return_value=values),
                            returns=2)]
        if not values:  # the old schema computes no sparse_values
            variants.append(Variant(OLD_C_ASCEND, args, kwargs, returns=1))
        op, name = npu_op(backend, "npu_lightning_indexer")
        return bound_call(op, name, *variants)

    def results(self, returned, tensors, case):
        # (sparse_indices, sparse_values): values empty unless asked for (return_value);
        # the old `_C_ascend` schema returns the indices alone, the portable path what the
        # row records.
        return api_results(returned, (True, case.output(1).present))

    def runtime_cells(self, case: KernelCase) -> dict[str, str]:
        plan, count = indexer_plan(case)
        return from_arguments(case, q_lens=plan.q_lens, kv_lens=plan.kv_lens,
                              causal=plan.causal, topk=count, source=REPLAY_SOURCE)

    def flops(self, case: KernelCase) -> float:
        plan, _ = indexer_plan(case)
        seen = sum(allowed_lengths(plan, "cpu").tolist())
        return 2.0 * seen * plan.heads * plan.head_dim + 2.0 * seen * plan.heads


# -- SparseFlashAttention ---------------------------------------------------------------------
(SF_QUERY, SF_KEY, SF_VALUE, SF_INDICES, SF_TABLE, SF_Q_LENS, SF_KV_LENS, SF_Q_ROPE,
 SF_K_ROPE) = range(9)


def flash_plan(case: KernelCase) -> tuple[SparsePlan, int, int]:
    """(plan, selected count per token, rope dim)."""
    plan = sparse_plan(case, SF_QUERY, SF_KEY, SF_TABLE, SF_Q_LENS)
    if case.input(SF_VALUE).dims != case.input(SF_KEY).dims:
        raise case.error("SparseFlashAttention: value must have the key's shape")
    indices = case.input(SF_INDICES).dims
    if len(indices) < 2 or indices[:-1] != plan.token_dims(plan.kv_heads):
        raise case.error(f"SparseFlashAttention: sparse_indices {indices} is not "
                         f"{plan.token_dims(plan.kv_heads, 'count')}")
    q_rope, k_rope = case.input(SF_Q_ROPE), case.input(SF_K_ROPE)
    if q_rope.present != k_rope.present:
        raise case.error("SparseFlashAttention: query_rope and key_rope go together")
    rope = q_rope.dims[-1] if q_rope.present else 0
    if rope and (q_rope.dims[:-1] != case.input(SF_QUERY).dims[:-1]
                 or k_rope.dims[:-1] != case.input(SF_KEY).dims[:-1] or k_rope.dims[-1] != rope):
        raise case.error(f"SparseFlashAttention: rope slots {q_rope.dims} / {k_rope.dims} do "
                         f"not match query and key")
    out = case.output(0)
    if out.present and out.dims != case.input(SF_QUERY).dims:
        raise case.error(f"SparseFlashAttention: attention_out {out.dims} is not the query's "
                         f"shape", column="Output Shapes")
    return plan, indices[-1], rope


def softmax_dims(plan: SparsePlan) -> tuple[int, ...]:
    if plan.q_layout == "TND":
        return (plan.kv_heads, plan.tokens, plan.group)
    return (plan.batch, plan.kv_heads, plan.q_seq, plan.group)


def sparse_positions(plan: SparsePlan, count: int, backend, generator: torch.Generator
                     ) -> torch.Tensor:
    """(T, N2, count) int32: per token and KV head, `count` distinct positions it may see
    (random), valid ones first and -1 where it sees fewer."""
    device = backend.device
    l_max = max(plan.kv_lens)
    limit = allowed_lengths(plan, device).view(-1, 1, 1)
    draws = torch.rand((plan.tokens, plan.kv_heads, l_max), device=device, generator=generator)
    draws = draws.masked_fill(torch.arange(l_max, device=device) >= limit, -1.0)
    top, index = draws.topk(min(count, l_max), dim=-1)
    index = index.masked_fill(top < 0, -1)
    if index.shape[-1] < count:
        index = torch.nn.functional.pad(index, (0, count - index.shape[-1]), value=-1)
    return index.to(torch.int32)


class SparseFlashAttention(KernelSpec):
    kernel_type = "SparseFlashAttention"
    portable = "torch: gather the selected positions, matmul softmax"
    work = ("2*T*N*count*(2*D + rope) flops (count: sparse positions per token); bytes of every "
            "slot of the row")

    def check(self, case: KernelCase) -> None:
        super().check(case)
        flash_plan(case)

    def build_inputs(self, case, backend, generator):
        plan, count, rope = flash_plan(case)
        names = ((SF_QUERY, "query"), (SF_KEY, "key"), (SF_VALUE, "value"))
        if rope:
            names += ((SF_Q_ROPE, "query_rope"), (SF_K_ROPE, "key_rope"))
        tensors = {name: self.tensor(case, i, backend, generator) for i, name in names}
        positions = sparse_positions(plan, count, backend, generator)
        tensors["sparse_indices"] = positions.view(case.input(SF_INDICES).dims).to(
            torch_dtype(case.input(SF_INDICES).dtype, case))
        build_paging(plan, case, tensors, backend, generator, SF_KEY, SF_TABLE, SF_Q_LENS,
                     SF_KV_LENS)
        return tensors

    def portable_call(self, tensors, case) -> Callable[[], object]:
        plan, count, rope = flash_plan(case)
        t = tensors
        table, scale = t.get("block_table"), 1.0 / math.sqrt(plan.head_dim + rope)
        seq, _ = token_sequences(plan, t["query"].device)
        seq = seq.view(-1, 1, 1)
        heads = torch.arange(plan.kv_heads, device=seq.device).view(1, -1, 1)
        tokens, n2, g = plan.tokens, plan.kv_heads, plan.group
        stats_wanted = case.output(1).numel > 1

        def select(x, rows, hs):
            return flat_tokens(x)[rows, hs]  # (chunk, N2, count, D)

        chunks = row_chunks(tokens, n2 * count * (2 * plan.head_dim + rope + g))
        dims = softmax_dims(plan)

        def sparse_flash_attention():
            query = flat_tokens(t["query"]).view(tokens, n2, g, -1)
            q_rope = (flat_tokens(t["query_rope"]).view(tokens, n2, g, -1) if rope else None)
            positions = t["sparse_indices"].reshape(tokens, n2, count).to(torch.int64)
            out = torch.empty(query.shape, dtype=query.dtype, device=query.device)
            peak = torch.empty((tokens, n2, g), dtype=torch.float32, device=query.device)
            total = torch.empty_like(peak)
            for a, b in chunks:
                pos = positions[a:b]
                rows = kv_rows(plan, seq[a:b], pos.clamp(min=0), table)
                q, k = query[a:b], select(t["key"], rows, heads)
                if rope:
                    q = torch.cat([q, q_rope[a:b]], dim=-1)
                    k = torch.cat([k, select(t["key_rope"], rows, heads)], dim=-1)
                scores = torch.matmul(q, k.transpose(-1, -2)).float() * scale  # (c, N2, G, K)
                scores.masked_fill_(~(pos >= 0).unsqueeze(2), float("-inf"))
                top = scores.amax(dim=-1, keepdim=True)
                weights = (scores - top).exp_()
                norm = weights.sum(dim=-1, keepdim=True)
                v = select(t["value"], rows, heads)
                out[a:b] = torch.matmul((weights / norm).to(v.dtype), v)
                peak[a:b], total[a:b] = top.squeeze(-1), norm.squeeze(-1)
            out = out.view(t["query"].shape)
            if not stats_wanted:
                return out
            stats = [x.permute(1, 0, 2) for x in (peak, total)]  # (N2, T, G)
            if plan.q_layout == "BSND":
                stats = [x.reshape(n2, plan.batch, plan.q_seq, g).transpose(0, 1)
                         for x in stats]
            return out, *(x.reshape(dims) for x in stats)
        return implemented("torch gather + matmul softmax", sparse_flash_attention)

    def npu_call(self, tensors, case, backend) -> Callable[[], object]:
        plan, _, rope = flash_plan(case)
        t = tensors
        kwargs = layout_kwargs(plan, t)
        kwargs.update(actual_seq_lengths_kv=t.get("actual_seq_lengths_kv"),
                      query_rope=t.get("query_rope"), key_rope=t.get("key_rope"),
                      sparse_block_size=1, layout_query=plan.q_layout, layout_kv=plan.kv_layout)
        scale = 1.0 / math.sqrt(plan.head_dim + rope)
        args = (t["query"], t["key"], t["value"], t["sparse_indices"], scale)
        stats = case.output(1).numel > 1
        variants = [Variant("attention_mode schema", args,
                            dict(kwargs, attention_mode=2, return_softmax_lse=stats), returns=3)]
        if not stats:
            variants.append(Variant(OLD_C_ASCEND, args, kwargs, returns=1))
        op, name = npu_op(backend, "npu_sparse_flash_attention")
        return bound_call(op, name, *variants)

    def results(self, returned, tensors, case):
        # (attention_out, softmax_max, softmax_sum), the last two empty without
        # return_softmax_lse; one tensor from the old `_C_ascend` schema.
        stats = case.output(1).numel > 1
        return api_results(returned, (True, stats, stats))

    def runtime_cells(self, case: KernelCase) -> dict[str, str]:
        plan, count, _ = flash_plan(case)
        return from_arguments(case, q_lens=plan.q_lens, kv_lens=plan.kv_lens,
                              causal=plan.causal, topk=count, source=REPLAY_SOURCE)

    def flops(self, case: KernelCase) -> float:
        plan, count, rope = flash_plan(case)
        return 2.0 * plan.tokens * plan.heads * count * (2 * plan.head_dim + rope)
