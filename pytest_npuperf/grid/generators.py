"""Generators for kernels whose shapes are not a plain product of iterators.

- `fused_infer_attention_score`: prefill and decode scenes; MHA/GQA (TND, paged KV cache
  with block tables for decode) and MLA (TND with rope slots for prefill, BNSD_NBSD paged
  for decode); the 31-slot input layout (query 0, key 1, value 2, mask 4, seq lens 5, kv seq
  lens 6, block table 14, query rope 24, key rope 25) and the `Runtime ...` columns filled.
- `grouped_matmul`: MoE expert GEMMs (gate/up and down) with the experts of one EP rank;
  the group list in its catalog slot.
- `dispatch_ffn_combine`: the fused MoE dispatch + FFN + combine of one EP rank (7 inputs,
  2 outputs, `EP Size`).
- `split_qkv_rmsnorm_rope`: the QKV split + q/k RMSNorm + RoPE kernel of GQA models.

Each generator yields `Candidate`s in a fixed order (models as given, TP and EP ascending, then
its parameters in order), with the numeric variables that constraints may use.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field

from ..db.columns import (
    CACHE_LAYOUT_BNSD,
    CACHE_LAYOUT_BSH,
    DISPATCH_FFN_COMBINE,
    EP_SIZE,
    FIA_RUNTIME_FIELDS,
    PHASE_DECODE,
    PHASE_PREFILL,
    runtime_column,
)
from ..db.shapes import NULL_FORMAT, UNDEFINED_DTYPE, Slot
from ..kernels import catalog
from ..kernels.catalog import (
    FIA_BLOCK_TABLE,
    FIA_INPUT_SLOTS,
    FIA_KEY,
    FIA_KEY_ROPE,
    FIA_KV_SEQ_LENS,
    FIA_MASK,
    FIA_QUERY,
    FIA_QUERY_ROPE,
    FIA_SEQ_LENS,
    FIA_VALUE,
)
from ..kernels.entry import SlotLayout
from .models import Model

Values = Sequence


@dataclass
class Candidate:
    """One generated row: slots, dtypes, formats, extra identity cells, constraint variables."""

    inputs: tuple[Slot, ...]
    in_dtypes: tuple[str, ...]
    in_formats: tuple[str, ...]
    outputs: tuple[Slot, ...]
    out_dtypes: tuple[str, ...]
    out_formats: tuple[str, ...]
    extra: dict[str, str] = field(default_factory=dict)
    variables: dict[str, int | float] = field(default_factory=dict)


class _Slots:
    """Builds a slot list by index, or by name on a catalog layout; unset slots are empty
    (DT_UNDEFINED, NULL)."""

    def __init__(self, count: int, layout: tuple[SlotLayout, ...] = ()) -> None:
        self.shapes: list[Slot] = [None] * count
        self.dtypes = [UNDEFINED_DTYPE] * count
        self.formats = [NULL_FORMAT] * count
        self.layout = layout
        self.index = {slot.name: i for i, slot in enumerate(layout)}

    @classmethod
    def of(cls, layout: tuple[SlotLayout, ...]) -> _Slots:
        return cls(len(layout), layout)

    def set(self, index: int, shape: tuple[int, ...], dtype: str, fmt: str = "ND") -> None:
        self.shapes[index] = tuple(int(d) for d in shape)
        self.dtypes[index] = dtype
        self.formats[index] = fmt

    def put(self, name: str, shape: tuple[int, ...], dtype: str | None = None) -> None:
        """Slot `name` of the layout; dtype and format default to the layout's."""
        index = self.index[name]
        slot = self.layout[index]
        self.set(index, shape, dtype or slot.dtype, slot.format)

    def parts(self) -> tuple[tuple[Slot, ...], tuple[str, ...], tuple[str, ...]]:
        return tuple(self.shapes), tuple(self.dtypes), tuple(self.formats)


def _io(inputs: _Slots, outputs: _Slots, extra: dict[str, str] | None = None,
        variables: dict[str, int | float] | None = None) -> Candidate:
    i_shapes, i_dtypes, i_formats = inputs.parts()
    o_shapes, o_dtypes, o_formats = outputs.parts()
    return Candidate(i_shapes, i_dtypes, i_formats, o_shapes, o_dtypes, o_formats,
                     extra or {}, variables or {})


@dataclass(frozen=True)
class GeneratorSpec:
    name: str
    params: dict[str, tuple]          # parameter -> default values
    variables: tuple[str, ...]        # names constraints may use
    run: Callable[[Mapping[str, Values], list[Model]], Iterator[Candidate]]
    description: str = ""


# ---------------------------------------------------------------------------------------------
# FusedInferAttentionScore

FIA_SLOTS = FIA_INPUT_SLOTS
Q, K, V, MASK, SEQ, KV_SEQ = FIA_QUERY, FIA_KEY, FIA_VALUE, FIA_MASK, FIA_SEQ_LENS, FIA_KV_SEQ_LENS
BLOCK_TABLE, Q_ROPE, K_ROPE = FIA_BLOCK_TABLE, FIA_QUERY_ROPE, FIA_KEY_ROPE
CAUSAL_MASK = (2048, 2048)
FIA_SOURCE = "shape_grid"
FIA_COMPLETENESS = "shape_grid_scene_generated"


def _cumulative(lengths: Sequence[int]) -> str:
    out, total = [], 0
    for n in lengths:
        total += n
        out.append(str(total))
    return ",".join(out)


def _fia_runtime(scene: str, *, q_lens: str, kv_lens: str, batch: int, avg: float, heads: int,
                 kv_heads: int, sparse_mode: int, layout: str, block_size: int,
                 attn_state: str, cache_mode: str, block_table: tuple[int, int] | None,
                 valid_blocks: int | None, phase: str, cache_layout: str = "") -> dict[str, str]:
    """Every `Runtime ...` cell of a generated row; what a dense bf16 scene does not have
    (topk, sparse blocks and indices, a quantisation mode) stays empty."""
    fields = dict.fromkeys(FIA_RUNTIME_FIELDS, "")
    fields.update({
        "source_profile": f"{FIA_SOURCE}:{scene}",
        "actual_seq_lengths_shape": str(batch), "actual_seq_lengths_values": q_lens,
        "actual_seq_lengths_kv_shape": str(batch), "actual_seq_lengths_kv_values": kv_lens,
        "avg_seq_len": f"{avg:.6f}",
        "block_table_shape": ",".join(map(str, block_table)) if block_table else "",
        "block_table_valid_blocks": str(valid_blocks) if valid_blocks is not None else "",
        "num_heads": str(heads), "num_key_value_heads": str(kv_heads),
        "sparse_mode": str(sparse_mode), "input_layout": layout, "block_size": str(block_size),
        "attn_state": attn_state, "kv_cache_mode": cache_mode,
        "metadata_completeness": FIA_COMPLETENESS, "operator_input_shapes_raw": "",
        "phase": phase, "batch_size": str(batch), "cache_layout": cache_layout,
    })
    return {runtime_column(k): v for k, v in fields.items()}


def fia_blocks(kv_len: int, batch: int, block_size: int, min_blocks: int) -> tuple[int, int]:
    """(blocks per sequence, blocks in the pool) of a paged KV cache."""
    width = max(1, math.ceil(kv_len / block_size))
    return width, max(min_blocks, batch * width)


def _choices(params: Mapping[str, Values], key: str, allowed: tuple[str, ...]) -> list[str]:
    """A generator parameter whose values must come from a fixed set."""
    values = [str(v) for v in params[key]]
    for value in values:
        if value not in allowed:
            raise ValueError(f"unknown {key} {value!r} ({', '.join(allowed)})")
    return values


def _fia(params: Mapping[str, Values], models: list[Model]) -> Iterator[Candidate]:
    dtype = str(params["dtype"][0])
    scenes = _choices(params, "scenes", ("prefill", "decode"))
    for model in models:
        for tp in model.tp:
            heads = model.heads_per_rank(tp)
            if model.mla:
                kv_heads = 1
            else:
                kv_heads = model.kv_heads_per_rank(tp)
                if heads % kv_heads:
                    continue  # GQA needs whole groups of query heads per KV head
            base = {"tp": tp, "heads": heads, "kv_heads": kv_heads, "head_dim": model.head_dim,
                    "mla": int(model.mla)}
            for scene in scenes:
                if scene == "prefill":
                    for batch in params["prefill_batch"]:
                        for seq in params["prefill_seq"]:
                            yield _fia_prefill(model, dtype, int(batch), int(seq), base)
                else:
                    for block_size in params["block_size"]:
                        for batch in params["decode_batch"]:
                            for kv_len in params["decode_kv_len"]:
                                yield _fia_decode(model, dtype, int(batch), int(kv_len),
                                                  int(block_size), int(params["min_blocks"][0]),
                                                  base)


def _fia_prefill(model: Model, dtype: str, batch: int, seq: int, base: dict) -> Candidate:
    heads, kv_heads = base["heads"], base["kv_heads"]
    tokens = batch * seq
    ins, outs = _Slots(FIA_SLOTS), _Slots(2)
    lens = _cumulative([seq] * batch)
    if model.mla:
        assert model.nope and model.rope
        d = model.nope
        kv_heads = heads  # MLA prefill runs as MHA on the up-projected K/V
        ins.set(Q_ROPE, (tokens, heads, model.rope), dtype)
        ins.set(K_ROPE, (tokens, heads, model.rope), dtype)
        state, scene = "mla_prefill_runtime", "mla_prefill"
    else:
        d = model.head_dim
        state, scene = "prefill_no_cache", "dense_prefill"
    ins.set(Q, (tokens, heads, d), dtype)
    ins.set(K, (tokens, kv_heads, d), dtype)
    ins.set(V, (tokens, kv_heads, d), dtype)
    ins.set(MASK, CAUSAL_MASK, "DT_INT8")
    ins.set(SEQ, (batch,), "DT_INT64")
    ins.set(KV_SEQ, (batch,), "DT_INT64")
    outs.set(0, (tokens, heads, d), dtype)
    outs.set(1, (tokens, heads, 1), "DT_FLOAT")
    runtime = _fia_runtime(scene, q_lens=lens, kv_lens=lens, batch=batch, avg=seq, heads=heads,
                           kv_heads=kv_heads, sparse_mode=3, layout="TND", block_size=0,
                           attn_state=state, cache_mode="non_paged_direct", block_table=None,
                           valid_blocks=None, phase=PHASE_PREFILL)
    variables = {**base, "kv_heads": kv_heads, "decode": 0, "batch": batch, "seq": seq,
                 "kv_len": seq, "tokens": tokens, "block_size": 0, "blocks": 0}
    return _io(ins, outs, runtime, variables)


def _fia_decode(model: Model, dtype: str, batch: int, kv_len: int, block_size: int,
                min_blocks: int, base: dict) -> Candidate:
    heads, kv_heads = base["heads"], base["kv_heads"]
    width, blocks = fia_blocks(kv_len, batch, block_size, min_blocks)
    ins, outs = _Slots(FIA_SLOTS), _Slots(2)
    kv_lens = ",".join([str(kv_len)] * batch)
    if model.mla:
        assert model.kv_lora and model.rope
        d = model.kv_lora
        ins.set(Q, (batch, heads, 1, d), dtype)
        ins.set(K, (blocks, 1, block_size, d), dtype)
        ins.set(V, (blocks, 1, block_size, d), dtype)
        ins.set(Q_ROPE, (batch, heads, 1, model.rope), dtype)
        ins.set(K_ROPE, (blocks, 1, block_size, model.rope), dtype)
        outs.set(0, (batch, heads, 1, d), dtype)
        outs.set(1, (batch, heads, 1, 1), "DT_FLOAT")
        q_lens, sparse, layout = ",".join(["1"] * batch), 0, "BNSD_NBSD"
        state, scene, cache_layout = "mla_paged_runtime", "mla_decode", CACHE_LAYOUT_BNSD
    else:
        d = model.head_dim
        ins.set(Q, (batch, heads, d), dtype)
        ins.set(K, (blocks, block_size, kv_heads * d), dtype)
        ins.set(V, (blocks, block_size, kv_heads * d), dtype)
        ins.set(MASK, CAUSAL_MASK, "DT_INT8")
        outs.set(0, (batch, heads, d), dtype)
        outs.set(1, (batch, heads, 1), "DT_FLOAT")
        q_lens, sparse, layout = _cumulative([1] * batch), 3, "TND"
        state, scene, cache_layout = "paged_runtime", "dense_decode", CACHE_LAYOUT_BSH
    ins.set(SEQ, (batch,), "DT_INT64")
    ins.set(KV_SEQ, (batch,), "DT_INT64")
    ins.set(BLOCK_TABLE, (batch, width), "DT_INT32")
    runtime = _fia_runtime(scene, q_lens=q_lens, kv_lens=kv_lens, batch=batch, avg=kv_len,
                           heads=heads, kv_heads=kv_heads, sparse_mode=sparse, layout=layout,
                           block_size=block_size, attn_state=state,
                           cache_mode="paged_cache_pool", block_table=(batch, width),
                           valid_blocks=width, phase=PHASE_DECODE, cache_layout=cache_layout)
    variables = {**base, "decode": 1, "batch": batch, "seq": 1, "kv_len": kv_len,
                 "tokens": batch, "block_size": block_size, "blocks": blocks}
    return _io(ins, outs, runtime, variables)


# ---------------------------------------------------------------------------------------------
# MoE: GroupedMatmul and DispatchFFNCombine

GMM = catalog.require("GroupedMatmul")
DFC = catalog.require(DISPATCH_FFN_COMBINE)



def _moe_models(models: list[Model]) -> list[Model]:
    return [m for m in models if m.moe]


def _ep_sizes(params: Mapping[str, Values], model: Model) -> list[int]:
    given = params.get("ep") or ()
    sizes = [int(e) for e in given] if given else list(model.ep)
    assert model.experts is not None
    return [e for e in sizes if e >= 1 and model.experts % e == 0]


def _grouped_matmul(params: Mapping[str, Values], models: list[Model]) -> Iterator[Candidate]:
    dtype = str(params["dtype"][0])
    phases = _choices(params, "phase", ("gate_up", "down"))
    for model in _moe_models(models):
        assert model.experts and model.expert_intermediate
        for tp in (int(t) for t in params["tp"]):
            if tp < 1 or model.expert_intermediate % tp:
                continue
            inter = model.expert_intermediate // tp
            for ep in _ep_sizes(params, model):
                per_rank = model.experts // ep
                for phase in phases:
                    gate_up = phase == "gate_up"
                    k, n = (model.hidden, 2 * inter) if gate_up else (inter, model.hidden)
                    for tokens in (int(t) for t in params["tokens"]):
                        ins, outs = _Slots.of(GMM.inputs), _Slots.of(GMM.outputs)
                        ins.put("x", (tokens, k), dtype)
                        ins.put("weight", (per_rank, k, n), dtype)
                        ins.put("group_list", (per_rank,))
                        outs.put("y", (tokens, n), dtype)
                        yield _io(ins, outs, variables={
                            "tokens": tokens, "tp": tp, "ep": ep, "experts": model.experts,
                            "experts_per_rank": per_rank, "hidden": model.hidden, "k": k,
                            "n": n, "top_k": model.top_k or 1, "gate_up": int(gate_up)})


def _dispatch_ffn_combine(params: Mapping[str, Values], models: list[Model]
                          ) -> Iterator[Candidate]:
    dtype = str(params["dtype"][0])
    weight_dtype = str(params["weight_dtype"][0])
    for model in _moe_models(models):
        assert model.experts and model.expert_intermediate and model.top_k
        hidden, n, top_k = model.hidden, 2 * model.expert_intermediate, model.top_k
        for ep in _ep_sizes(params, model):
            if ep < 2:
                continue  # a multi-rank operator: EP size 1 has nothing to dispatch
            per_rank = model.experts // ep
            for tokens in (int(t) for t in params["tokens"]):
                ins, outs = _Slots.of(DFC.inputs), _Slots.of(DFC.outputs)
                ins.put("x", (tokens, hidden), dtype)
                ins.put("weight1", (per_rank, hidden, n), weight_dtype)  # gate + up
                ins.put("weight2", (per_rank, n // 2, hidden), weight_dtype)  # down
                ins.put("expert_idx", (tokens, top_k))
                ins.put("scale1", (per_rank * n,))
                ins.put("scale2", (per_rank * hidden,))
                ins.put("probs", (tokens, top_k))
                outs.put("out", (tokens, hidden), dtype)
                outs.put("expert_token_nums", (per_rank,))
                yield _io(ins, outs, {EP_SIZE: str(ep)}, {
                    "tokens": tokens, "ep": ep, "experts": model.experts,
                    "experts_per_rank": per_rank, "hidden": hidden, "n": n, "top_k": top_k})


# ---------------------------------------------------------------------------------------------
# split_qkv_rmsnorm_rope_kernel

SPLIT_QKV = catalog.require("split_qkv_rmsnorm_rope_kernel")

def _split_qkv(params: Mapping[str, Values], models: list[Model]) -> Iterator[Candidate]:
    dtype = str(params["dtype"][0])
    for model in models:
        if model.mla:
            continue  # MLA models project q and kv separately
        for tp in model.tp:
            heads, kv_heads = model.heads_per_rank(tp), model.kv_heads_per_rank(tp)
            d = model.head_dim
            q_hidden, kv_hidden = heads * d, kv_heads * d
            for tokens in (int(t) for t in params["tokens"]):
                ins, outs = _Slots.of(SPLIT_QKV.inputs), _Slots.of(SPLIT_QKV.outputs)
                ins.put("qkv", (tokens, q_hidden + 2 * kv_hidden), dtype)
                ins.put("norm_weight", (d,), dtype)
                outs.put("q", (tokens, q_hidden), dtype)
                outs.put("k", (tokens, kv_hidden), dtype)
                outs.put("v", (tokens, kv_hidden), dtype)
                yield _io(ins, outs, variables={
                    "tokens": tokens, "tp": tp, "heads": heads, "kv_heads": kv_heads,
                    "head_dim": d, "q_hidden": q_hidden, "kv_hidden": kv_hidden})


GENERATORS: dict[str, GeneratorSpec] = {
    "fused_infer_attention_score": GeneratorSpec(
        "fused_infer_attention_score",
        params={"scenes": ("prefill", "decode"), "prefill_batch": (1, 2, 4, 8),
                "prefill_seq": (512, 1024, 2048, 4096),
                "decode_batch": (1, 2, 4, 8, 16, 32), "decode_kv_len": (1024, 2048, 4096, 8192),
                "block_size": (128,), "min_blocks": (16,), "dtype": ("DT_BF16",)},
        variables=("tp", "heads", "kv_heads", "head_dim", "mla", "decode", "batch", "seq",
                   "kv_len", "tokens", "block_size", "blocks"),
        run=_fia),
    "grouped_matmul": GeneratorSpec(
        "grouped_matmul",
        params={"tokens": (1, 16, 64, 256, 1024, 4096), "ep": (), "tp": (1,),
                "phase": ("gate_up", "down"), "dtype": ("DT_BF16",)},
        variables=("tokens", "tp", "ep", "experts", "experts_per_rank", "hidden", "k", "n",
                   "top_k", "gate_up"),
        run=_grouped_matmul),
    "dispatch_ffn_combine": GeneratorSpec(
        "dispatch_ffn_combine",
        params={"tokens": (1, 8, 32, 128, 512), "ep": (), "dtype": ("DT_BF16",),
                "weight_dtype": ("DT_INT8",)},
        variables=("tokens", "ep", "experts", "experts_per_rank", "hidden", "n", "top_k"),
        run=_dispatch_ffn_combine),
    "split_qkv_rmsnorm_rope": GeneratorSpec(
        "split_qkv_rmsnorm_rope",
        params={"tokens": (1, 4, 16, 64, 256, 1024, 4096), "dtype": ("DT_BF16",)},
        variables=("tokens", "tp", "heads", "kv_heads", "head_dim", "q_hidden", "kv_hidden"),
        run=_split_qkv),
}
