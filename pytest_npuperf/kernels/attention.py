"""Attention kernels: FusedInferAttentionScore (prefill and decode, MHA/GQA/MLA, paged KV
cache) and RINGMLAPrefillBF16Kernel.

NPU APIs:
- `torch_npu.npu_fused_infer_attention_score(query, key, value, *, pse_shift, atten_mask,
  actual_seq_lengths, actual_seq_lengths_kv, ..., block_table, ..., query_rope, key_rope, ...,
  num_heads, scale, pre_tokens, next_tokens, input_layout, num_key_value_heads, sparse_mode,
  inner_precise, block_size, ..., softmax_lse_flag) -> (attention_out, softmax_lse)`
  (op-plugin op_plugin/config/op_plugin_functions.yaml; semantics from
  docs/zh/custom_APIs/torch_npu/torch_npu-npu_fused_infer_attention_score.md: sequence lengths
  are Python lists, cumulative for TND; a paged cache is (blocks, block_size, H) or
  (blocks, N, block_size, D); sparse_mode 2/3 take the 2048 x 2048 lower-triangular mask and
  mean top-left / bottom-right aligned causal attention; with Q_S = 1 and no rope
  sparse_mode is ignored; rope slots make it MLA: q.k + q_rope.k_rope).
- `torch_npu.atb.npu_ring_mla(q_nope, q_rope, k_nope, k_rope, value, mask, seqlen, head_num,
  kv_head_num, *, pre_out, prev_lse, qk_scale, kernel_type, mask_type, input_layout,
  calc_type[, output, softmax_lse]) -> (output, softmax_lse)` (op-plugin
  op_plugin/ops/atb/RingMlaAtb.cpp; `seqlen` a host tensor of per-sequence query lengths,
  vllm-ascend v0.18.0 attention/mla_v1.py:1141 passes `prefill.query_lens`: the ATB operation's
  input 6, [batch], hicann/ascend-transformer-boost src/ops_infer/ring_mla/
  ring_mla_operation.cpp; called as vllm-ascend's MLA prefill calls it: high-precision
  kernel, triu mask, first ring, out= buffers).

Off the NPU the same math runs through `torch.nn.functional.scaled_dot_product_attention`:
paged K/V gathered through the block table into contiguous tensors, rope slots concatenated
to q and k, the causal pattern of `sparse_mode` as a mask (or `is_causal`), GQA through
`enable_gqa`. The backend (flash, memory-efficient, cuDNN, math) is the first that accepts the
case, pinned for the measurement and recorded. The softmax LSE, when the row has one, is a
float32 logsumexp of the scores, computed in the same call. The softmax scale is
1/sqrt(head dim + rope dim) (the real models' scale is not in the row; it does not change the
work).
"""

from __future__ import annotations

import contextlib
import math
import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace

import torch
import torch.nn.functional as F

from . import catalog
from .binding import Variant, bound_call, torch_npu_call
from .case import KernelCase
from .spec import KernelSpec, api_results, implemented
from .tensors import torch_dtype

CAUSAL_MASK_SIZE = 2048  # the optimised mask of sparse_mode 2/3/4 (FIA documentation)
RING_MASK_SIZE = 512  # vllm-ascend's MLA prefill mask for npu_ring_mla
NONE, RIGHT_DOWN, LEFT_UP, MASK = "none", "right_down", "left_up", "mask"
_SEQ_LAYOUTS = {"TND": 3, "BSH": 3, "BSND": 4, "BNSD": 4}
_OUT_LAYOUTS = ("TND", "BSH", "BSND", "BNSD", "NBSD", "NTD")


@dataclass(frozen=True)
class AttentionPlan:
    """One attention call: layouts, heads, dims, per-sequence lengths, paging, masking."""

    layout_name: str  # the API's input_layout, e.g. "TND" or "BNSD_NBSD"
    in_layout: str  # of query (and of key/value when not paged)
    out_layout: str
    heads: int
    kv_heads: int
    head_dim: int
    value_dim: int
    rope_dim: int
    q_lens: tuple[int, ...]
    kv_lens: tuple[int, ...]
    q_seq: int  # the stored S of query (TND: the token count)
    kv_seq: int  # the stored S of key/value when not paged (TND: the token count)
    block_size: int = 0  # 0: not paged
    cache_layout: str = ""  # "BnBsH" (blocks, block_size, H) or "BnNBsD"
    sparse_mode: int = 0
    causal: str = NONE
    lse: str = ""  # "" (none), "TN1", "BNS1" or "NT": the LSE's layout
    scale: float = 1.0

    @property
    def batch(self) -> int:
        return len(self.q_lens)

    @property
    def paged(self) -> bool:
        return self.block_size > 0

    @property
    def group(self) -> int:
        return self.heads // self.kv_heads

    def pairs(self) -> int:
        """(query, key) pairs that are computed, summed over sequences."""
        total = 0
        for sq, sk in zip(self.q_lens, self.kv_lens):
            if self.causal == RIGHT_DOWN:
                total += sum(min(sk, max(0, sk - sq + i + 1)) for i in range(sq))
            elif self.causal == LEFT_UP:
                total += sum(min(sk, i + 1) for i in range(sq))
            else:
                total += sq * sk
        return total

    def out_dims(self, layout: str) -> tuple[int, ...]:
        b, n, dv, s, t = self.batch, self.heads, self.value_dim, self.q_seq, sum(self.q_lens)
        return {"TND": (t, n, dv), "NTD": (n, t, dv), "BSH": (b, s, n * dv),
                "BSND": (b, s, n, dv), "BNSD": (b, n, s, dv), "NBSD": (n, b, s, dv)}[layout]

    def lse_dims(self) -> tuple[int, ...]:
        t = sum(self.q_lens)
        return {"TN1": (t, self.heads, 1), "NT": (self.heads, t),
                "BNS1": (self.batch, self.heads, self.q_seq, 1)}[self.lse]


# -- reading a row ----------------------------------------------------------------------------
def runtime_int(case: KernelCase, field: str) -> int | None:
    text = case.runtime.get(field, "")
    if not text:
        return None
    try:
        return int(float(text))
    except ValueError:
        raise case.error(f"{case.kernel_type}: Runtime {field} {text!r} is not a number",
                         column=f"Runtime {field}") from None


def runtime_ints(case: KernelCase, field: str) -> list[int] | None:
    text = case.runtime.get(field, "").strip().strip("[]()")
    if not text:
        return None
    try:
        return [int(float(v)) for v in text.replace(";", ",").split(",") if v.strip()]
    except ValueError:
        raise case.error(f"{case.kernel_type}: Runtime {field} {text!r} is not a list of "
                         f"numbers", column=f"Runtime {field}") from None


def split_evenly(total: int, parts: int) -> tuple[int, ...]:
    base, extra = divmod(total, parts)
    return tuple(base + (1 if i < extra else 0) for i in range(parts))


def from_cumulative(values: list[int]) -> tuple[int, ...]:
    return tuple(b - a for a, b in zip([0, *values[:-1]], values))


def cumulative(lengths: tuple[int, ...]) -> list[int]:
    out, total = [], 0
    for n in lengths:
        total += n
        out.append(total)
    return out


def _heads_and_dim(case: KernelCase, dims: tuple[int, ...], layout: str, heads: int | None,
                   what: str) -> tuple[int, int]:
    """(heads, head dim) of a tensor stored in `layout`; BSH needs the head count given."""
    if layout == "TND":
        return dims[1], dims[2]
    if layout == "BSND":
        return dims[2], dims[3]
    if layout == "BNSD":
        return dims[1], dims[3]
    if not heads or dims[2] % heads:
        raise case.error(f"{case.kernel_type}: {what} {dims} in BSH needs its head count "
                         f"(Runtime num_heads / num_key_value_heads)")
    return heads, dims[2] // heads


def _seq_len(dims: tuple[int, ...], layout: str) -> int:
    return dims[0] if layout == "TND" else dims[2] if layout == "BNSD" else dims[1]


FIA_SUPPORTED = {"query", "key", "value", "atten_mask", "actual_seq_lengths",
                 "actual_seq_lengths_kv", "block_table", "query_rope", "key_rope"}


def fia_plan(case: KernelCase) -> AttentionPlan:
    """The attention call a FusedInferAttentionScore row records (raises case.error)."""
    fia = catalog.require(case.kernel_type)
    for i, slot in enumerate(fia.inputs):
        if case.input(i).present and slot.name not in FIA_SUPPORTED:
            raise case.error(f"FusedInferAttentionScore: input slot {i} ({slot.name}) is "
                             f"filled; rows using it are not replayed")
    q, k, v = (case.input(i).dims for i in (catalog.FIA_QUERY, catalog.FIA_KEY, catalog.FIA_VALUE))
    q_rope = case.input(catalog.FIA_QUERY_ROPE)
    k_rope = case.input(catalog.FIA_KEY_ROPE)
    if q_rope.present != k_rope.present:
        raise case.error("FusedInferAttentionScore: query_rope and key_rope go together")
    rope_dim = q_rope.dims[-1] if q_rope.present else 0
    if rope_dim and (k_rope.dims[-1] != rope_dim or q_rope.dims[:-1] != q[:-1]):
        raise case.error(f"FusedInferAttentionScore: rope slots {q_rope.dims} and "
                         f"{k_rope.dims} do not match query {q}")
    name = case.runtime.get("input_layout") or _default_layout(q, bool(rope_dim))
    in_layout, _, out_name = name.partition("_")
    if _SEQ_LAYOUTS.get(in_layout) != len(q):
        raise case.error(f"FusedInferAttentionScore: query {q} does not fit input_layout "
                         f"{name!r}", column="Runtime input_layout")
    heads, head_dim = _heads_and_dim(case, q, in_layout, runtime_int(case, "num_heads"),
                                     "query")
    block_table = case.input(catalog.FIA_BLOCK_TABLE)
    kv = _kv_geometry(case, k, v, in_layout, head_dim, block_table.present)
    kv_heads, value_dim, block_size, cache_layout = kv
    if heads % kv_heads:
        raise case.error(f"FusedInferAttentionScore: {heads} query heads in {kv_heads} KV "
                         f"groups")
    batch = _batch(case, q, in_layout, block_table)
    q_seq = _seq_len(q, in_layout)
    q_lens = query_lengths(case, in_layout, batch, q_seq)
    kv_seq = 0 if block_table.present else _seq_len(k, in_layout)
    kv_lens = kv_lengths(case, in_layout, batch, kv_seq, block_table, block_size,
                         k[0] if block_table.present else 0)
    sparse_mode = runtime_int(case, "sparse_mode")
    mask = case.input(catalog.FIA_MASK).present
    if sparse_mode is None:
        sparse_mode = 3 if mask else 0
    causal = _causal(case, sparse_mode, mask, max(q_lens) == 1 and not rope_dim)
    lse_slot = case.output(1)
    lse = ("TN1" if in_layout == "TND" else "BNS1") if lse_slot.numel > 1 else ""
    plan = AttentionPlan(name, in_layout, in_layout, heads, kv_heads, head_dim, value_dim,
                         rope_dim, q_lens, kv_lens, q_seq, kv_seq, block_size, cache_layout,
                         sparse_mode, causal, lse, 1.0 / math.sqrt(head_dim + rope_dim))
    plan = _with_out_layout(case, plan, (out_name, in_layout) if out_name else (in_layout,))
    if lse and lse_slot.numel != math.prod(plan.lse_dims()):
        raise case.error(f"FusedInferAttentionScore: softmax_lse {lse_slot.dims} is not "
                         f"{plan.lse_dims()}", column="Output Shapes")
    return plan


def _default_layout(q: tuple[int, ...], rope: bool) -> str:
    if len(q) == 3:
        return "TND"
    return "BNSD_NBSD" if rope else "BNSD"


def _kv_geometry(case: KernelCase, k: tuple[int, ...], v: tuple[int, ...], layout: str,
                 head_dim: int, paged: bool) -> tuple[int, int, int, str]:
    """(KV heads, value head dim, block size, cache layout) of the key/value slots."""
    given = runtime_int(case, "num_key_value_heads")
    if paged:
        if len(k) == 3 and len(v) == 3 and k[:2] == v[:2]:
            kv_heads = given or max(1, k[2] // head_dim)
            if k[2] != kv_heads * head_dim or v[2] % kv_heads:
                raise case.error(f"FusedInferAttentionScore: paged key {k} is not "
                                 f"(blocks, block_size, {kv_heads} x {head_dim})")
            geometry = (kv_heads, v[2] // kv_heads, k[1], "BnBsH")
        elif len(k) == 4 and len(v) == 4 and k[:3] == v[:3] and k[3] == head_dim:
            geometry = (k[1], v[3], k[2], "BnNBsD")
        else:
            raise case.error(f"FusedInferAttentionScore: paged key {k} / value {v} are "
                             f"neither (blocks, block_size, H) nor (blocks, N, block_size, D)")
        size = runtime_int(case, "block_size")
        if size and size != geometry[2]:
            raise case.error(f"FusedInferAttentionScore: Runtime block_size {size} but the "
                             f"cache has blocks of {geometry[2]}", column="Runtime block_size")
        return geometry
    if len(k) != _SEQ_LAYOUTS[layout] or len(v) != len(k):
        raise case.error(f"FusedInferAttentionScore: key {k} / value {v} are not {layout}")
    kv_heads, k_dim = _heads_and_dim(case, k, layout, given, "key")
    _, value_dim = _heads_and_dim(case, v, layout, kv_heads, "value")
    if k_dim != head_dim:
        raise case.error(f"FusedInferAttentionScore: key head dim {k_dim} != query's "
                         f"{head_dim}")
    return kv_heads, value_dim, 0, ""


def _batch(case: KernelCase, q: tuple[int, ...], layout: str, block_table) -> int:
    if layout != "TND":
        batch = q[0]
    elif block_table.present:
        batch = block_table.dims[0]
    elif case.input(catalog.FIA_SEQ_LENS).present:
        batch = case.input(catalog.FIA_SEQ_LENS).dims[0]
    else:
        batch = runtime_int(case, "actual_seq_lengths_shape") or 1
    if block_table.present and (len(block_table.dims) != 2 or block_table.dims[0] != batch):
        raise case.error(f"FusedInferAttentionScore: block_table {block_table.dims} is not "
                         f"(batch {batch}, blocks per sequence)")
    return batch


def query_lengths(case: KernelCase, layout: str, batch: int, q_seq: int) -> tuple[int, ...]:
    if layout != "TND":
        return (q_seq,) * batch  # actual_seq_lengths only applies to TND
    values = runtime_ints(case, "actual_seq_lengths_values")
    lens = from_cumulative(values) if values else split_evenly(q_seq, batch)
    if len(lens) != batch or sum(lens) != q_seq or min(lens) < 1:
        raise case.error(f"{case.kernel_type}: query lengths {list(lens)} do not split "
                         f"{q_seq} tokens into {batch} sequences",
                         column="Runtime actual_seq_lengths_values")
    return lens


def kv_lengths(case: KernelCase, layout: str, batch: int, kv_seq: int, block_table,
               block_size: int, blocks: int) -> tuple[int, ...]:
    """Per-sequence KV lengths: the row's Runtime values (cumulative for TND without paging),
    else an even split of the stored tokens, else (paged) each sequence's share of the pool."""
    values = runtime_ints(case, "actual_seq_lengths_kv_values")
    column = "Runtime actual_seq_lengths_kv_values"
    if block_table.present:
        capacity = block_table.dims[1] * block_size
        if values:
            lens = tuple(values) * batch if len(values) == 1 else tuple(values)
        else:
            # No lengths recorded: each sequence fills its share of the block pool.
            avg = runtime_int(case, "avg_seq_len")
            share = min(capacity, max(1, blocks * block_size // batch))
            lens = (min(avg, capacity) if avg else share,) * batch
        if len(lens) != batch or max(lens) > capacity or min(lens) < 1:
            raise case.error(f"{case.kernel_type}: KV lengths {list(lens)} do not fit "
                             f"{batch} block-table rows of {capacity} tokens", column=column)
        return lens
    if layout == "TND":
        lens = from_cumulative(values) if values else split_evenly(kv_seq, batch)
        ok = len(lens) == batch and sum(lens) == kv_seq
    else:
        lens = (tuple(values) * batch if values and len(values) == 1
                else tuple(values or (kv_seq,) * batch))
        ok = len(lens) == batch and max(lens) <= kv_seq
    if not ok or min(lens) < 1:
        raise case.error(f"{case.kernel_type}: KV lengths {list(lens)} do not fit the "
                         f"stored {kv_seq} tokens of {batch} sequences", column=column)
    return lens


def _causal(case: KernelCase, sparse_mode: int, mask: bool, single_query: bool) -> str:
    if sparse_mode not in (0, 1, 2, 3):
        raise case.error(f"FusedInferAttentionScore: sparse_mode {sparse_mode} is not "
                         f"replayed (0-3 are)", column="Runtime sparse_mode")
    if single_query:
        return NONE  # the API ignores sparse_mode for Q_S = 1 without rope
    if sparse_mode in (0, 1):
        if sparse_mode == 1 and not mask:
            raise case.error("FusedInferAttentionScore: sparse_mode 1 needs atten_mask")
        return MASK if mask else NONE
    return LEFT_UP if sparse_mode == 2 else RIGHT_DOWN


def _with_out_layout(case: KernelCase, plan: AttentionPlan, candidates) -> AttentionPlan:
    """The output layout: the first candidate the row's output shape agrees with."""
    known = [c for c in candidates if c in _OUT_LAYOUTS]
    if not known:
        raise case.error(f"{case.kernel_type}: output layout of {plan.layout_name!r} is not "
                         f"replayed")
    out = case.output(0).shape
    chosen = next((c for c in known if out is None or tuple(out) == plan.out_dims(c)), None)
    if chosen is None:
        raise case.error(f"{case.kernel_type}: output {out} is not "
                         f"{plan.out_dims(known[0])}", column="Output Shapes")
    return replace(plan, out_layout=chosen)


# -- valid inputs -----------------------------------------------------------------------------
def paged_block_table(batch: int, width: int, blocks: int, backend,
                generator: torch.Generator) -> torch.Tensor:
    """(batch, width) int32 block ids: each sequence's blocks distinct (a random permutation
    of the pool, reused cyclically when the sequences need more blocks than it has); the
    unused tail of a row holds valid ids too."""
    perm = torch.randperm(blocks, device=backend.device, generator=generator)
    rows = torch.arange(batch * width, device=backend.device) % blocks
    return perm[rows].view(batch, width).to(torch.int32)


def causal_mask(shape: tuple[int, ...], dtype: torch.dtype, device) -> torch.Tensor:
    """1 above the bottom-right aligned diagonal of the last two dims (masked), 0 below: the
    2048 x 2048 mask of sparse_mode 2/3 is its square case."""
    rows, cols = shape[-2], shape[-1]
    i = torch.arange(rows, device=device).unsqueeze(-1)
    j = torch.arange(cols, device=device)
    return (j > i + (cols - rows)).to(dtype).expand(shape).contiguous()


# -- the portable call ------------------------------------------------------------------------
_SDPA_GQA: bool | None = None


def _sdpa_has_gqa() -> bool:
    global _SDPA_GQA
    if _SDPA_GQA is None:
        try:
            F.scaled_dot_product_attention(torch.zeros(1, 2, 1, 1), torch.zeros(1, 1, 1, 1),
                                           torch.zeros(1, 1, 1, 1), enable_gqa=True)
            _SDPA_GQA = True
        except TypeError:
            _SDPA_GQA = False
    return _SDPA_GQA


def sdpa_backends(device: torch.device) -> list[tuple[str, object]]:
    """Scaled-dot-product backends to try, fastest first; [] when torch cannot pin one."""
    try:
        from torch.nn.attention import SDPBackend
    except ImportError:
        return []
    names = (("flash", "FLASH_ATTENTION"), ("efficient", "EFFICIENT_ATTENTION"),
             ("cudnn", "CUDNN_ATTENTION"), ("math", "MATH"))
    if device.type != "cuda":
        names = (names[0], names[3])
    return [(label, getattr(SDPBackend, attr)) for label, attr in names
            if hasattr(SDPBackend, attr)]


@dataclass(frozen=True)
class LseKernel:
    """One of torch's attention kernels that returns the softmax LSE with the output:
    `run(q, k, v, additive mask or None, is_causal, scale) -> (out, lse)`."""

    name: str
    run: Callable
    gqa: bool  # takes fewer key/value heads than query heads as they are
    needs_no_mask: bool = False


def lse_kernels(device: torch.device) -> list[LseKernel]:
    """The kernels behind scaled_dot_product_attention that return the LSE (aten's own ops:
    flash and cuDNN compute it in the same pass, the memory-efficient kernel too), fastest
    first; they are what `F.scaled_dot_product_attention` runs, minus the LSE it drops."""
    aten = torch.ops.aten
    if device.type == "cpu":
        if not hasattr(aten, "_scaled_dot_product_flash_attention_for_cpu"):
            return []
        return [LseKernel("aten._scaled_dot_product_flash_attention_for_cpu",
                          lambda q, k, v, m, causal, scale:
                          aten._scaled_dot_product_flash_attention_for_cpu(
                              q, k, v, 0.0, causal, attn_mask=m, scale=scale)[:2], gqa=True)]
    if device.type != "cuda":
        return []
    found = []
    if hasattr(aten, "_scaled_dot_product_flash_attention"):
        found.append(LseKernel("aten._scaled_dot_product_flash_attention",
                               lambda q, k, v, m, causal, scale:
                               aten._scaled_dot_product_flash_attention(
                                   q, k, v, 0.0, causal, False, scale=scale)[:2],
                               gqa=True, needs_no_mask=True))
    if hasattr(aten, "_scaled_dot_product_cudnn_attention"):
        found.append(LseKernel("aten._scaled_dot_product_cudnn_attention",
                               lambda q, k, v, m, causal, scale:
                               aten._scaled_dot_product_cudnn_attention(
                                   q, k, v, m, True, 0.0, causal, False, scale=scale)[:2],
                               gqa=False))
    if hasattr(aten, "_scaled_dot_product_efficient_attention"):
        found.append(LseKernel("aten._scaled_dot_product_efficient_attention",
                               lambda q, k, v, m, causal, scale:
                               aten._scaled_dot_product_efficient_attention(
                                   q, k, v, m, True, 0.0, causal, scale=scale)[:2],
                               gqa=False))
    return found


class AttentionRunner:
    """The portable attention call of a plan: gather, attend, lay out like the kernel."""

    def __init__(self, plan: AttentionPlan, device: torch.device,
                 mask: torch.Tensor | None = None) -> None:
        self.plan = plan
        self.device = device
        self.s_max, self.l_max = max(plan.q_lens), max(plan.kv_lens)
        tnd = plan.in_layout == "TND"
        self.q_pad = pad_index(plan.q_lens, device) if tnd else None
        self.kv_pad = pad_index(plan.kv_lens, device) if tnd and not plan.paged else None
        self.valid_rows = valid_rows(plan.q_lens, device) if self.q_pad is not None else None
        self.is_causal, self.allowed = self._masking(mask)
        self.gqa = plan.group > 1 and _sdpa_has_gqa()

    def _masking(self, mask: torch.Tensor | None) -> tuple[bool, torch.Tensor | None]:
        """(is_causal, allowed (B|1, 1, S, L) bool or None) for scaled_dot_product_attention."""
        plan = self.plan
        uniform = len(set(plan.q_lens)) == 1 and len(set(plan.kv_lens)) == 1
        if uniform and plan.causal == NONE:
            return False, None
        if uniform and plan.causal in (RIGHT_DOWN, LEFT_UP) and self.s_max == self.l_max:
            return True, None
        i = torch.arange(self.s_max, device=self.device).view(1, 1, -1, 1)
        j = torch.arange(self.l_max, device=self.device).view(1, 1, 1, -1)
        q_len = torch.tensor(plan.q_lens, device=self.device).view(-1, 1, 1, 1)
        kv_len = torch.tensor(plan.kv_lens, device=self.device).view(-1, 1, 1, 1)
        allowed = j < kv_len
        if plan.causal == RIGHT_DOWN:
            allowed = allowed & (j <= i + kv_len - q_len)
        elif plan.causal == LEFT_UP:
            allowed = allowed & (j <= i)
        elif plan.causal == MASK and mask is not None:
            allowed = allowed & ~_crop_mask(mask, self.s_max, self.l_max).bool()
        # Padding queries (past their sequence) attend one key: no all-masked row, no NaN.
        return False, allowed | ((i >= q_len) & (j == 0))

    # the pieces of the call
    def _bnsd(self, t: torch.Tensor, heads: int, lens, seq: int, pad) -> torch.Tensor:
        """A query/key/value tensor stored in the plan's layout as (B, N, S, D)."""
        layout, batch = self.plan.in_layout, self.plan.batch
        if layout == "TND":
            if pad is not None:
                t = t.index_select(0, pad)
            return t.view(batch, -1, heads, t.shape[-1]).transpose(1, 2)
        if layout == "BSH":
            return t.view(batch, seq, heads, -1).transpose(1, 2)
        return t.transpose(1, 2) if layout == "BSND" else t

    def keys(self, t: torch.Tensor, table: torch.Tensor | None) -> torch.Tensor:
        plan = self.plan
        if plan.paged:
            return gather_pages(t, table, self.l_max, plan.block_size, plan.kv_heads,
                                plan.cache_layout)
        kv = self._bnsd(t, plan.kv_heads, plan.kv_lens, plan.kv_seq, self.kv_pad)
        return kv[:, :, :self.l_max]

    def queries(self, t: torch.Tensor) -> torch.Tensor:
        plan = self.plan
        return self._bnsd(t, plan.heads, plan.q_lens, plan.q_seq, self.q_pad)

    def to_output(self, o: torch.Tensor) -> torch.Tensor:
        """(B, N, S, Dv) -> the kernel's output layout."""
        plan, layout = self.plan, self.plan.out_layout
        if layout in ("BNSD", "NBSD", "BSND", "BSH"):
            if layout == "BNSD":
                return o.contiguous()
            if layout == "NBSD":
                return o.transpose(0, 1).contiguous()
            o = o.transpose(1, 2).contiguous()
            return o if layout == "BSND" else o.view(plan.batch, plan.q_seq, -1)
        tokens = self._tokens(o.transpose(1, 2))
        return tokens if layout == "TND" else tokens.transpose(0, 1).contiguous()

    def _tokens(self, bsn: torch.Tensor) -> torch.Tensor:
        """(B, S, ...) -> (T, ...) keeping each sequence's real positions."""
        flat = bsn.reshape(-1, *bsn.shape[2:])
        return flat if self.valid_rows is None else flat.index_select(0, self.valid_rows)

    def lse(self, q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
        """log-sum-exp of the scaled, masked scores in float32, in the plan's LSE layout."""
        plan = self.plan
        kt = k.float().transpose(-1, -2)  # (B, N_kv, D, L): query heads grouped onto it
        allowed = self.allowed
        if self.is_causal:
            allowed = torch.ones(self.s_max, self.l_max, dtype=torch.bool,
                                 device=q.device).tril()
        parts = []
        batch, heads = plan.batch, plan.heads
        for a, b in row_chunks(self.s_max, batch * heads * self.l_max):
            grouped = q[:, :, a:b].float().reshape(batch, plan.kv_heads, -1, q.shape[-1])
            scores = torch.matmul(grouped, kt).view(batch, heads, b - a, -1) * plan.scale
            if allowed is not None:
                scores = scores.masked_fill(~allowed[..., a:b, :], float("-inf"))
            parts.append(torch.logsumexp(scores, dim=-1))
        return self.lse_layout(torch.cat(parts, dim=-1))

    def lse_layout(self, lse: torch.Tensor) -> torch.Tensor:
        """A (B, N, S) LSE in the plan's LSE layout."""
        if self.plan.lse == "BNS1":
            return lse.unsqueeze(-1)
        tokens = self._tokens(lse.transpose(1, 2))  # (T, N)
        return tokens.unsqueeze(-1) if self.plan.lse == "TN1" else \
            tokens.transpose(0, 1).contiguous()

    def call(self, tensors: Mapping[str, torch.Tensor]) -> Callable[[], object]:
        """The measured call on tensors named query, key, value (query_rope, key_rope,
        block_table when the plan has them)."""
        plan = self.plan
        allowed, is_causal = self.allowed, self.is_causal
        # Without a mask the query heads of a KV head can share one "sequence" (decode, MQA):
        # no K/V expansion, the same scores.
        fold = plan.group > 1 and allowed is None and not is_causal
        gqa = self.gqa and not fold
        expand = plan.group if plan.group > 1 and not gqa and not fold else 1
        extra = {"enable_gqa": True} if gqa else {}
        operands = self._operands(tensors, fold)

        def attention(pin=contextlib.nullcontext):
            q, k, qa, ka, va = operands(expand)
            with pin():
                o = F.scaled_dot_product_attention(qa, ka, va, attn_mask=allowed,
                                                   is_causal=is_causal, scale=plan.scale,
                                                   **extra)
            out = self.to_output(o.view(plan.batch, plan.heads, self.s_max, -1))
            if plan.lse:
                return out, self.lse(q, k)
            return out, torch.zeros(1, dtype=torch.float32, device=out.device)

        if plan.lse:
            fused = self._with_lse(tensors, fold, expand)
            if fused is not None:
                return fused
        label, pin = self._pick_backend(attention)
        parts = [f"scaled_dot_product_attention[{label}]"]
        if plan.paged:
            parts.append("paged KV gathered")
        if plan.lse:
            parts.append("float32 logsumexp")
        return implemented(" + ".join(parts), lambda: attention(pin))

    def _operands(self, tensors: Mapping[str, torch.Tensor], fold: bool
                  ) -> Callable[[int], tuple[torch.Tensor, ...]]:
        """What a call computes on (inside the timed call): q and k as the math needs them
        (rope slots concatenated, pages gathered), and the kernel's operands: q folded onto
        the KV heads, or k and v expanded `expand` times for a kernel without GQA."""
        plan = self.plan
        query, key, value = tensors["query"], tensors["key"], tensors["value"]
        q_rope, k_rope = tensors.get("query_rope"), tensors.get("key_rope")
        table = tensors.get("block_table")

        def operands(expand: int):
            q, k, v = self.queries(query), self.keys(key, table), self.keys(value, table)
            if q_rope is not None:
                q = torch.cat([q, self.queries(q_rope)], dim=-1)
                k = torch.cat([k, self.keys(k_rope, table)], dim=-1)
            qa, ka, va = q, k, v
            if fold:
                qa = q.reshape(plan.batch, plan.kv_heads, -1, q.shape[-1])
            elif expand > 1:
                ka, va = k.repeat_interleave(expand, 1), v.repeat_interleave(expand, 1)
            return q, k, qa, ka, va
        return operands

    def _with_lse(self, tensors: Mapping[str, torch.Tensor], fold: bool, expand: int
                  ) -> Callable[[], object] | None:
        """The call through the first of torch's attention kernels that returns the softmax
        LSE itself (lse_kernels), as a serving engine's kernel does: no second pass over the
        scores. None when none of them takes this case (the math backend then computes the
        LSE in float32 beside it)."""
        plan = self.plan
        query = tensors["query"]
        allowed, is_causal = self.allowed, self.is_causal
        additive = None if allowed is None else torch.zeros(
            allowed.shape, dtype=query.dtype, device=query.device).masked_fill_(
                ~allowed, float("-inf"))
        operands = self._operands(tensors, fold)

        def attention(kernel: LseKernel):
            _, _, qa, ka, va = operands(1 if kernel.gqa else plan.group)
            o, lse = kernel.run(qa, ka, va, additive, is_causal, plan.scale)
            # An LSE may come padded (the memory-efficient kernel rounds S up to 32).
            lse = lse.reshape(qa.shape[0], qa.shape[1], -1)[..., :qa.shape[2]]
            out = self.to_output(o.view(plan.batch, plan.heads, self.s_max, -1))
            return out, self.lse_layout(lse.reshape(plan.batch, plan.heads, self.s_max))

        for kernel in lse_kernels(self.device):
            if kernel.needs_no_mask and additive is not None:
                continue
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    attention(kernel)
            except (RuntimeError, TypeError, AttributeError):
                continue  # this kernel does not take the case (dtype, dims, mask layout)
            parts = [f"{kernel.name} + its softmax LSE"]
            if plan.paged:
                parts.append("paged KV gathered")
            return implemented(" + ".join(parts), lambda kernel=kernel: attention(kernel))
        return None

    def _pick_backend(self, attention) -> tuple[str, Callable]:
        """The first backend that runs this case, and a context manager pinning it."""
        try:
            from torch.nn.attention import sdpa_kernel
        except ImportError:
            return "torch's choice", contextlib.nullcontext
        for label, backend in sdpa_backends(self.device):
            def pin(backend=backend):
                return sdpa_kernel([backend])
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    attention(pin)
            except RuntimeError:
                continue
            return label, pin
        return "torch's choice", contextlib.nullcontext


def pad_index(lens: tuple[int, ...], device) -> torch.Tensor | None:
    """For token-major (TND) sequences of unequal lengths: the token row of each (sequence,
    position) padded to the longest (padding repeats a sequence's last row); None when the
    lengths are equal and a view does."""
    if len(set(lens)) == 1:
        return None
    width, starts = max(lens), [0, *cumulative(lens)[:-1]]
    rows = [min(s + p, s + n - 1) for s, n in zip(starts, lens) for p in range(width)]
    return torch.tensor(rows, device=device)


def valid_rows(lens: tuple[int, ...], device) -> torch.Tensor:
    """The rows of a (B * longest, ...) padded tensor that hold real positions, in order."""
    width = max(lens)
    return torch.tensor([b * width + p for b, n in enumerate(lens) for p in range(n)],
                        device=device)


def row_chunks(rows: int, per_row: int, budget: int = 1 << 25) -> list[tuple[int, int]]:
    """Slices of `rows` whose intermediates of `per_row` elements each stay within `budget`
    elements: long sequences are processed piecewise, as the fused kernels stream them."""
    step = max(1, budget // max(per_row, 1))
    return [(a, min(a + step, rows)) for a in range(0, rows, step)]


def gather_pages(cache: torch.Tensor, table: torch.Tensor, tokens: int, block_size: int,
                 kv_heads: int, cache_layout: str) -> torch.Tensor:
    """The first `tokens` tokens of each sequence's blocks as (B, N_kv, L, D): the cache is
    (blocks, block_size, H) or (blocks, block_size, N, D) ("BnBsH", token-major) or
    (blocks, N, block_size, D) ("BnNBsD")."""
    batch, width = table.shape[0], -(-tokens // block_size)
    blocks = cache.index_select(0, table[:, :width].reshape(-1).to(torch.int64))
    if cache_layout == "BnBsH":
        seq = blocks.reshape(batch, width * block_size, kv_heads, -1)
        return seq[:, :tokens].transpose(1, 2)
    seq = blocks.view(batch, width, kv_heads, block_size, -1).permute(0, 2, 1, 3, 4)
    return seq.reshape(batch, kv_heads, width * block_size, -1)[:, :, :tokens]


def _crop_mask(mask: torch.Tensor, rows: int, cols: int) -> torch.Tensor:
    """An atten_mask of sparse_mode 0/1 as (B|1, 1, rows, cols)."""
    m = mask
    while m.dim() < 4:
        m = m.unsqueeze(0)
    return m[..., :rows, :cols]


def attention_bytes(case: KernelCase, plan: AttentionPlan, kv_slots: tuple[int, ...]) -> float:
    """Bytes read and written: the row's slots, except that of a paged cache only the
    sequences' tokens are read, not the whole pool."""
    total = case.io_bytes
    if not plan.paged:
        return total
    tokens = sum(plan.kv_lens)
    for index in kv_slots:
        slot = case.input(index)
        if slot.present:
            pool_tokens = slot.dims[0] * plan.block_size
            total -= slot.nbytes * (1 - min(1.0, tokens / pool_tokens))
    return total


def attention_flops(plan: AttentionPlan) -> float:
    return 2.0 * plan.heads * plan.pairs() * (plan.head_dim + plan.rope_dim + plan.value_dim)


# -- FusedInferAttentionScore -----------------------------------------------------------------
class FusedInferAttentionScore(KernelSpec):
    kernel_type = "FusedInferAttentionScore"
    portable = ("torch scaled_dot_product_attention (flash, efficient, cudnn or math backend, the "
                "first that runs; paged KV gathered first)")
    work = ("2*N*pairs*(D + rope + Dv) flops (pairs: query-key pairs the mask allows); bytes of "
            "every slot, a paged cache counted for the sequences' tokens only")

    def check(self, case: KernelCase) -> None:
        super().check(case)
        fia_plan(case)

    def build_inputs(self, case, backend, generator):
        plan = fia_plan(case)
        names = {catalog.FIA_QUERY: "query", catalog.FIA_KEY: "key",
                 catalog.FIA_VALUE: "value", catalog.FIA_QUERY_ROPE: "query_rope",
                 catalog.FIA_KEY_ROPE: "key_rope"}
        tensors = {name: self.tensor(case, i, backend, generator) for i, name in names.items()
                   if case.input(i).present}
        mask = case.input(catalog.FIA_MASK)
        if mask.present:
            tensors["atten_mask"] = causal_mask(mask.dims, torch_dtype(mask.dtype, case),
                                                backend.device)
        if plan.paged:
            table = case.input(catalog.FIA_BLOCK_TABLE)
            tensors["block_table"] = paged_block_table(plan.batch, table.dims[1],
                                                 case.input(catalog.FIA_KEY).dims[0], backend,
                                                 generator)
        return tensors

    def portable_call(self, tensors, case) -> Callable[[], object]:
        plan = fia_plan(case)
        device = tensors["query"].device
        return AttentionRunner(plan, device, tensors.get("atten_mask")).call(tensors)

    def npu_call(self, tensors, case, backend) -> Callable[[], object]:
        plan = fia_plan(case)
        t = tensors
        tnd = plan.in_layout == "TND"
        kwargs = {
            "atten_mask": t.get("atten_mask"), "block_table": t.get("block_table"),
            "query_rope": t.get("query_rope"), "key_rope": t.get("key_rope"),
            "num_heads": plan.heads, "scale": plan.scale, "input_layout": plan.layout_name,
            "num_key_value_heads": plan.kv_heads, "sparse_mode": plan.sparse_mode,
            "block_size": plan.block_size, "softmax_lse_flag": bool(plan.lse),
        }
        if tnd or case.input(catalog.FIA_SEQ_LENS).present:
            kwargs["actual_seq_lengths"] = cumulative(plan.q_lens) if tnd else list(plan.q_lens)
        if tnd or plan.paged or case.input(catalog.FIA_KV_SEQ_LENS).present:
            kwargs["actual_seq_lengths_kv"] = (cumulative(plan.kv_lens) if tnd and not plan.paged
                                               else list(plan.kv_lens))
        return torch_npu_call(backend, "npu_fused_infer_attention_score",
                              (t["query"], t["key"], t["value"]), kwargs, returns=2)

    def results(self, returned, tensors, case):
        # Both paths return (attention_out, softmax_lse); without softmax_lse_flag the NPU's
        # LSE is an empty placeholder (shape (0,) from torch_npu 7.2.0) and the portable
        # path's a zeros(1): compared only when the row has one.
        return api_results(returned, (True, bool(fia_plan(case).lse)))

    def flops(self, case: KernelCase) -> float:
        return attention_flops(fia_plan(case))

    def bytes_moved(self, case: KernelCase) -> float:
        return attention_bytes(case, fia_plan(case), (catalog.FIA_KEY, catalog.FIA_VALUE,
                                                      catalog.FIA_KEY_ROPE))


# -- RINGMLAPrefillBF16Kernel -----------------------------------------------------------------
Q_NOPE, Q_ROPE, K_NOPE, K_ROPE, VALUE, RING_MASK, SEQ_LEN = range(7)


def ring_plan(case: KernelCase) -> AttentionPlan:
    q, qr, k, kr, v = (case.input(i).dims for i in range(5))
    if any(len(d) != 3 for d in (q, qr, k, kr, v)):
        raise case.error("RINGMLAPrefillBF16Kernel: q/k nope and rope and value must be "
                         "(T, N, D)")
    tokens, heads, head_dim = q
    kv_heads, rope_dim = k[1], qr[2]
    if (qr[:2] != q[:2] or k[0] != tokens or k[2] != head_dim or kr != (tokens, kv_heads,
                                                                       rope_dim)
            or v[:2] != k[:2] or heads % kv_heads):
        raise case.error(f"RINGMLAPrefillBF16Kernel: shapes {q}, {qr}, {k}, {kr}, {v} do not "
                         f"form one MLA prefill")
    ring_state = [i for i in range(SEQ_LEN + 1, len(case.inputs)) if case.input(i).present]
    if ring_state:
        # A later ring step (calc_type_default, with pre_out / prev_lse: slots 13/14 of the
        # kernel's table per the reference replay) is another call than the first-ring one
        # replayed here: not replayed rather than replayed as something else.
        raise case.error(f"RINGMLAPrefillBF16Kernel: input slot(s) {ring_state} are filled "
                         f"(a ring step with prefix state); only first-ring rows are replayed")
    seq = case.input(SEQ_LEN).dims
    if len(seq) != 1 or not 1 <= seq[0] <= tokens:
        raise case.error(f"RINGMLAPrefillBF16Kernel: seq_len {seq} is not (batch,)")
    lens = split_evenly(tokens, seq[0])
    lse = "NT" if case.output(1).numel > 1 else ""
    plan = AttentionPlan("TND", "TND", "TND", heads, kv_heads, head_dim, v[2], rope_dim, lens,
                         lens, tokens, tokens, causal=RIGHT_DOWN, lse=lse,
                         scale=1.0 / math.sqrt(head_dim + rope_dim))
    plan = _with_out_layout(case, plan, ("TND",))
    if lse and case.output(1).dims != plan.lse_dims():
        raise case.error(f"RINGMLAPrefillBF16Kernel: lse {case.output(1).dims} is not "
                         f"{plan.lse_dims()}", column="Output Shapes")
    return plan


class RingMlaPrefill(KernelSpec):
    """Causal MLA prefill over sequences of equal length (the row has the count, not the
    lengths), with the LSE as (N, T)."""

    kernel_type = "RINGMLAPrefillBF16Kernel"
    portable = "torch scaled_dot_product_attention over [nope, rope], causal"
    work = ("2*N*pairs*(D + rope + Dv) flops (pairs: causal query-key pairs); bytes of every slot "
            "of the row")

    def check(self, case: KernelCase) -> None:
        super().check(case)
        ring_plan(case)

    def build_inputs(self, case, backend, generator):
        plan = ring_plan(case)
        names = ("q_nope", "q_rope", "k_nope", "k_rope", "value")
        tensors = {name: self.tensor(case, i, backend, generator) for i, name in enumerate(names)}
        mask = case.input(RING_MASK)
        tensors["mask"] = causal_mask(mask.dims, torch_dtype(mask.dtype, case), backend.device)
        # npu_ring_mla reads the lengths on the host.
        tensors["seq_len"] = torch.tensor(plan.q_lens, dtype=torch_dtype(
            case.input(SEQ_LEN).dtype, case))
        return tensors

    def portable_call(self, tensors, case) -> Callable[[], object]:
        plan = ring_plan(case)
        named = {"query": tensors["q_nope"], "key": tensors["k_nope"], "value": tensors["value"],
                 "query_rope": tensors["q_rope"], "key_rope": tensors["k_rope"]}
        return AttentionRunner(plan, tensors["q_nope"].device).call(named)

    def npu_call(self, tensors, case, backend) -> Callable[[], object]:
        plan = ring_plan(case)
        t = tensors
        args = (t["q_nope"], t["q_rope"], t["k_nope"], t["k_rope"], t["value"], t["mask"],
                t["seq_len"], plan.heads, plan.kv_heads)
        kwargs = dict(pre_out=None, prev_lse=None, qk_scale=plan.scale,
                      kernel_type="kernel_type_high_precision", mask_type="mask_type_triu",
                      input_layout="type_bsnd", calc_type="calc_type_first_ring")
        # vllm-ascend's MLA prefill calls the out= overload into buffers it allocated
        # (v0.18.0 attention/mla_v1.py:1131-1153): output (T, N, Dv), LSE (N, T) float32.
        tokens = sum(plan.q_lens)
        out = torch.empty((tokens, plan.heads, plan.value_dim), dtype=t["q_nope"].dtype,
                          device=t["q_nope"].device)
        lse = torch.empty((plan.heads, tokens), dtype=torch.float32, device=out.device)
        into = Variant("out= overload, as vllm-ascend's MLA prefill", args,
                       dict(kwargs, output=out, softmax_lse=lse), returns=2)
        plain = Variant("functional overload", args, kwargs, returns=2)
        return bound_call(backend.torch_npu.atb.npu_ring_mla, "torch_npu.atb.npu_ring_mla",
                          into, plain, namespace="atb")

    def results(self, returned, tensors, case):
        # (output, softmax_lse) on both paths; the LSE compared where the row records it.
        return api_results(returned, (True, bool(ring_plan(case).lse)))

    def flops(self, case: KernelCase) -> float:
        return attention_flops(ring_plan(case))
