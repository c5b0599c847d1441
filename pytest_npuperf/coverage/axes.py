"""How the simulator reads a kernel row as a point to interpolate between: its bucket (the
fields that must match exactly) and its axes (the numbers it interpolates along).

Facts of msmodeling's `InterpolatingDataSource` (tensor_cast/performance_model/
profiling_database/), by query family:

- compute (the GEMM kernels: MatMulV2/V3/Common, BatchMatMulV2, TransposeBatchMatMul,
  QuantBatchMatmulV3, GroupedMatmul, ...): axes M, K, N of `(M, K) x (K|N, N|K)` (a FRACTAL_NZ
  operand restored to ND first), tried as (M), (K), (N), (M,K), (M,N), (K,N), (M,K,N); the
  bucket holds the input count, dtypes and batch dims; the input formats split it (plain ND
  first);
- attention (FusedInferAttentionScore, `query_mode: attention_special`): axes seq
  (`Runtime avg_seq_len`), batch (`Runtime batch_size`), heads, head dim, every group of one to
  three of them; the bucket holds the dtype, q tokens, sparse mode, KV heads, layout;
- runtime attention (SparseFlashAttention, LightningIndexer): axes q_tokens and
  effective_kv_len (query tokens, and the KV length each query token sees on average), from the
  `Runtime actual_seq_lengths*` values; the bucket holds every runtime field it reads, and only
  rows whose `Runtime metadata_completeness` is `complete` count;
- MoE fused (DispatchFFNCombine): axis tokens; the bucket holds the weights, hidden, top-k and
  EP size;
- elementwise (`query_mode: elementwise`, e.g. Add): axis io_numel (elements read and written);
- generic compute (every other kernel): axis 0 of the first input (tokens), or the output's
  element count where the database's policy says `generic_compute: {axis: output_numel}`; the
  bucket holds the rest of the shapes and the dtypes.

The database's own `op_mapping.yaml` says which family an operator's kernel type is queried in
(`query_mode`), how many inputs count (`tc_input_count`) and its interpolation policy
(`interpolation_policy.kernel_overrides`: `max_interpolation_dim`, `axis_transform: sqrt_seq`,
`generic_compute`).

Differences, said where they matter: a slot the simulator would mis-align (an absent slot
before a present one) is read aligned here; q tokens of attention match exactly (the simulator
also accepts block-padded counts).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from itertools import combinations

from ..db.columns import (
    DISPATCH_FFN_COMBINE,
    EP_SIZE,
    FIA_KERNEL,
    INPUT_DTYPES,
    INPUT_FORMATS,
    INPUT_SHAPES,
    OUTPUT_DTYPES,
    OUTPUT_SHAPES,
    runtime_column,
)
from ..db.errors import CellError
from ..db.shapes import normalize_format, parse_shapes, profiler_dtype, split_list

COMPUTE, GENERIC, ATTENTION, RUNTIME_ATTENTION, MOE_FUSED, ELEMENTWISE = (
    "compute", "generic", "attention", "runtime_attention", "moe_fused", "elementwise")

MATMUL_KERNELS = frozenset({
    "MatMulV2", "MatMulV3", "MatMulCommon", "MatMul", "QuantBatchMatmulV3", "BatchMatMulV2",
    "TransposeBatchMatMul", "GroupedMatmul", "GroupedMatmulSwigluQuant", "BatchMatMulNd"})
BATCHED_MATMUL_KERNELS = frozenset({"BatchMatMulV2", "BatchMatMulNd", "TransposeBatchMatMul",
                                    "QuantBatchMatmulV3"})
RUNTIME_ATTENTION_KERNELS = frozenset({"SparseFlashAttention", "LightningIndexer",
                                       "LightningIndexerVllm"})
SPARSE_RUNTIME_KERNELS = frozenset({"SparseFlashAttention"})
# Kernel types whose bf16 and float rows share a bucket (the simulator's relaxed dtypes).
RELAXED_DTYPE_KERNELS = frozenset({"MatMulV2"})
COMPLETE = "complete"

Cells = Mapping[str, str]
Regime = tuple


@dataclass(frozen=True)
class AxisSpec:
    name: str
    rule: str | None = None  # the standard's rule for it (a grid or template.axis)
    sweep: bool = True  # judged per bucket (a workload axis); False: a structural axis
    sqrt: bool = False  # interpolated on its square root (the simulator's sqrt_seq)


@dataclass(frozen=True)
class Family:
    name: str
    axes: tuple[AxisSpec, ...]
    groups: tuple[tuple[str, ...], ...]
    max_dim: int | None = None

    def axis(self, name: str) -> AxisSpec | None:
        return next((a for a in self.axes if a.name == name), None)


@dataclass(frozen=True)
class Query:
    """A row (or a model's call) as the simulator's interpolation reads it."""

    kernel_type: str
    regime: Regime  # must match exactly
    axes: dict[str, float]
    subgroup: tuple = ()  # splits a regime, tried in order (compute: the input formats)


@dataclass
class Policy:
    """What a database's op_mapping.yaml says about one kernel type."""

    family: str | None = None  # from an operator mapping's query_mode
    tc_input_count: int | None = None
    max_dim: int | None = None
    sqrt_seq: bool = False
    generic_axis: str = "axis_0"


@dataclass
class Policies:
    by_kernel: dict[str, Policy] = field(default_factory=dict)

    def of(self, kernel_type: str) -> Policy:
        return self.by_kernel.get(kernel_type, Policy())

    @classmethod
    def from_op_mapping(cls, doc: Mapping | None) -> Policies:
        """The policies a database's op_mapping.yaml document sets (an empty one: defaults)."""
        out: dict[str, Policy] = {}
        doc = doc if isinstance(doc, Mapping) else {}
        mappings = doc.get("operator_mappings")
        mappings = mappings if isinstance(mappings, Mapping) else {}
        # profiling.<Type> first: the placeholder says least; an operator's mapping wins.
        for op, mapping in sorted(mappings.items(), key=lambda kv: not str(kv[0])
                                  .startswith("profiling.")):
            if not isinstance(mapping, Mapping) or not isinstance(mapping.get("kernel_type"), str):
                continue
            policy = out.setdefault(mapping["kernel_type"], Policy())
            mode = mapping.get("query_mode")
            if mode == "attention_special":
                policy.family = ATTENTION
            elif mode == "elementwise":
                policy.family = ELEMENTWISE
            elif mode == "moe_fused":
                policy.family = MOE_FUSED
            count = mapping.get("tc_input_count")
            if isinstance(count, int) and not isinstance(count, bool) and count > 0 \
                    and (policy.tc_input_count is None or not str(op).startswith("profiling.")):
                policy.tc_input_count = count
        overrides = (doc.get("interpolation_policy") or {}) if isinstance(
            doc.get("interpolation_policy"), Mapping) else {}
        overrides = overrides.get("kernel_overrides") or {}
        for kernel_type, override in (overrides.items() if isinstance(overrides, Mapping) else ()):
            if not isinstance(override, Mapping):
                continue
            policy = out.setdefault(str(kernel_type), Policy())
            dim = override.get("max_interpolation_dim")
            if isinstance(dim, int) and not isinstance(dim, bool):
                policy.max_dim = dim
            transform = override.get("axis_transform", override.get("shape_transform"))
            policy.sqrt_seq = transform in ("sqrt", "sqrt_seq")
            generic = override.get("generic_compute")
            if isinstance(generic, Mapping) and generic.get("axis") == "output_numel":
                policy.generic_axis = "output_numel"
        return cls(out)


def family_name(kernel_type: str, policy: Policy) -> str:
    if policy.family is not None:
        return policy.family
    if kernel_type in MATMUL_KERNELS:
        return COMPUTE
    if kernel_type == FIA_KERNEL:
        return ATTENTION
    if kernel_type in RUNTIME_ATTENTION_KERNELS:
        return RUNTIME_ATTENTION
    if kernel_type == DISPATCH_FFN_COMBINE:
        return MOE_FUSED
    return GENERIC


_GEMM_M = {"GroupedMatmul": "MOE_TOKENS_GRID", "GroupedMatmulSwigluQuant": "MOE_TOKENS_GRID"}
_GEMM_KN = {"TransposeBatchMatMul": "transpose_batch_matmul", "BatchMatMulNd": "batch_matmul_nd"}
_TOKENS_RULE = {"PadV3": "PAD_TOKENS_GRID", "ArgMaxV2": "argmax.batch",
                "MoeTokenPermute": "MOE_TOKENS_GRID", "MoeTokenUnpermute": "MOE_TOKENS_GRID"}
_ATTENTION_AXES = ("seq", "batch", "heads", "head_dim")


def family_of(kernel_type: str, policy: Policy) -> Family:
    name = family_name(kernel_type, policy)
    if name == COMPUTE:
        template = _GEMM_KN.get(kernel_type)
        kn = (f"{template}.K", f"{template}.N") if template else ("NK_GRID", "NK_GRID")
        return Family(COMPUTE, (AxisSpec("M", _GEMM_M.get(kernel_type, "M_GRID")),
                                AxisSpec("K", kn[0], sweep=False),
                                AxisSpec("N", kn[1], sweep=False)),
                      (("M",), ("K",), ("N",), ("M", "K"), ("M", "N"), ("K", "N"),
                       ("M", "K", "N")), policy.max_dim)
    if name == ATTENTION:
        return Family(ATTENTION, (
            AxisSpec("seq", "fused_attention.avg_seq_len", sqrt=policy.sqrt_seq),
            AxisSpec("batch", "fused_attention.batch"),
            AxisSpec("heads", "HEADS_GRID", sweep=False),
            AxisSpec("head_dim", "HEAD_DIM_GRID", sweep=False)),
            tuple(g for dim in range(1, 4) for g in combinations(_ATTENTION_AXES, dim)),
            policy.max_dim)
    if name == RUNTIME_ATTENTION:
        return Family(RUNTIME_ATTENTION, (AxisSpec("q_tokens"),
                                          AxisSpec("effective_kv_len", "ATTN_SEQ_GRID")),
                      (("q_tokens",), ("effective_kv_len",), ("q_tokens", "effective_kv_len")),
                      policy.max_dim)
    if name == MOE_FUSED:
        return Family(MOE_FUSED, (AxisSpec("tokens", "MOE_TOKENS_GRID"),), (("tokens",),))
    if name == ELEMENTWISE:
        return Family(ELEMENTWISE, (AxisSpec("io_numel"),), (("io_numel",),))
    if policy.generic_axis == "output_numel":
        return Family(GENERIC, (AxisSpec("output_numel"),), (("output_numel",),))
    return Family(GENERIC, (AxisSpec("axis_0", _TOKENS_RULE.get(kernel_type, "ELEM_TOKENS_GRID")),),
                  (("axis_0",),))


# ---------------------------------------------------------------------------------------------
# Reading a row

@dataclass(frozen=True)
class _Slots:
    shapes: tuple[tuple[int, ...], ...]  # present slots only
    dtypes: tuple[str, ...]
    formats: tuple[str, ...]


def _present(cells: Cells, shapes_col: str, dtypes_col: str, formats_col: str | None,
             limit: int | None = None) -> _Slots:
    """The present slots of one side, each with its own dtype and format; the first `limit`
    slots only (the mapping's tc_input_count)."""
    shapes = parse_shapes(str(cells.get(shapes_col, "") or ""))
    dtypes = split_list(cells.get(dtypes_col, "") or "")
    formats = split_list(cells.get(formats_col, "") or "") if formats_col else ()
    if limit is not None:
        shapes = shapes[:limit]
    out_s, out_d, out_f = [], [], []
    for i, slot in enumerate(shapes):
        if slot is None:
            continue
        out_s.append(tuple(slot))
        out_d.append(profiler_dtype(dtypes[i]) if i < len(dtypes) else "")
        out_f.append(normalize_format(formats[i]) if i < len(formats) else "ND")
    return _Slots(tuple(out_s), tuple(out_d), tuple(out_f))


def nz_to_nd(shape: tuple[int, ...]) -> tuple[int, ...]:
    """The simulator's FRACTAL_NZ restore: `(..., H, W, bh, bw)` -> `(..., H*bw, W*bh)`."""
    if len(shape) < 4:
        return shape
    *batch, h, w, bh, bw = shape
    return (*batch, h * bw, w * bh)


def _strip_batch(shape: tuple[int, ...]) -> tuple[int, ...]:
    return shape[1:] if len(shape) > 1 and shape[0] == 1 else shape


def _int(text: object) -> int | None:
    try:
        value = float(str(text).strip())
    except ValueError:
        return None
    return int(value) if math.isfinite(value) and value.is_integer() else None


def _ints(text: object) -> tuple[int, ...] | None:
    cleaned = str(text or "").strip().strip("[]()").replace(";", ",")
    if not cleaned:
        return None
    values = [_int(v) for v in cleaned.split(",") if v.strip()]
    return None if not values or any(v is None for v in values) else tuple(values)  # type: ignore[misc]


def _runtime(cells: Cells, name: str) -> str:
    return str(cells.get(runtime_column(name), "") or "").strip()


def _compute(kernel_type: str, cells: Cells, policy: Policy) -> Query | str:
    slots = _present(cells, INPUT_SHAPES, INPUT_DTYPES, INPUT_FORMATS, policy.tc_input_count)
    if len(slots.shapes) < 2:
        return "fewer than two input shapes"
    batched = kernel_type in BATCHED_MATMUL_KERNELS
    logical = [nz_to_nd(s) if f == "FRACTAL_NZ" else s
               for s, f in zip(slots.shapes, slots.formats)]
    lhs, rhs = logical[0], logical[1]
    if not batched:
        lhs = lhs[1:] if len(lhs) >= 3 and lhs[0] == 1 else lhs
        rhs = rhs[1:] if len(rhs) >= 3 and rhs[0] == 1 else rhs
    if len(lhs) < 2 or len(rhs) < 2:
        return "an operand of rank < 2"
    m, k = lhs[-2], lhs[-1]
    if rhs[-2] == k:
        n = rhs[-1]
    elif rhs[-1] == k:
        n = rhs[-2]
    else:
        return "operands share no K"
    dtypes = tuple("FLOAT_GROUP" if kernel_type in RELAXED_DTYPE_KERNELS
                   and d in ("DT_BF16", "FLOAT") else d for d in slots.dtypes)
    regime = (kernel_type, len(slots.shapes), dtypes, (tuple(lhs[:-2]), tuple(rhs[:-2])))
    return Query(kernel_type, regime, {"M": float(m), "K": float(k), "N": float(n)},
                 subgroup=slots.formats)


def _generic(kernel_type: str, cells: Cells, policy: Policy) -> Query | str:
    slots = _present(cells, INPUT_SHAPES, INPUT_DTYPES, INPUT_FORMATS, policy.tc_input_count)
    if not slots.shapes:
        return "no input shapes"
    logical = [_strip_batch(nz_to_nd(s) if f == "FRACTAL_NZ" else s)
               for s, f in zip(slots.shapes, slots.formats)]
    if not logical[0]:
        return "a scalar first input"
    if policy.generic_axis == "output_numel":
        outputs = _present(cells, OUTPUT_SHAPES, OUTPUT_DTYPES, None).shapes
        if len(outputs) != 1:
            return "not one output (output_numel needs one)"
        out = outputs[0][1:] if len(outputs[0]) >= 3 and outputs[0][0] == 1 else outputs[0]
        return Query(kernel_type, (kernel_type, len(logical), slots.dtypes, out[1:]),
                     {"output_numel": float(math.prod(out))})
    signature = (logical[0][1:], tuple(logical[1:]))
    return Query(kernel_type, (kernel_type, len(logical), slots.dtypes, signature),
                 {"axis_0": float(logical[0][0])})


def _elementwise(kernel_type: str, cells: Cells, policy: Policy) -> Query | str:
    outs = _present(cells, OUTPUT_SHAPES, OUTPUT_DTYPES, None)
    if not outs.shapes or not _strip_batch(outs.shapes[0]):
        return "no output shape"
    out = _strip_batch(outs.shapes[0])
    inputs = [_strip_batch(s) for s in _present(cells, INPUT_SHAPES, INPUT_DTYPES, None).shapes]
    pattern = []
    for shape in inputs:
        padded = (None,) * max(0, len(out) - len(shape)) + shape[-len(out):]
        pattern.append((len(shape), tuple(
            "missing" if d is None else "same" if d == o else "broadcast" if d == 1 else "other"
            for d, o in zip(padded, out))))
    numel = sum(math.prod(s) for s in inputs) + math.prod(out)
    return Query(kernel_type, (kernel_type, len(out), len(inputs), outs.dtypes[0], tuple(pattern)),
                 {"io_numel": float(numel)})


def _attention(kernel_type: str, cells: Cells, policy: Policy) -> Query | str:
    seq = _int(_runtime(cells, "avg_seq_len") or cells.get("avg_seq_len", ""))
    if seq is None or seq < 0:
        return "no Runtime avg_seq_len"
    slots = _present(cells, INPUT_SHAPES, INPUT_DTYPES, None)
    if not slots.shapes:
        return "no query shape"
    q = slots.shapes[0]
    head_dim = slots.shapes[1][-1] if len(slots.shapes) > 1 and slots.shapes[1] else q[-1]
    if len(q) == 3:
        q3 = q
    elif len(q) == 4 and q[2] == 1:
        q3 = (q[0], q[1], q[3])
    elif len(q) == 2 and head_dim > 0 and q[1] % head_dim == 0:
        q3 = (q[0], q[1] // head_dim, head_dim)
    else:
        return f"query shape {q} is not (T, N, D)"
    axes = {"seq": float(seq), "heads": float(q3[1]), "head_dim": float(q3[2])}
    batch = _int(_runtime(cells, "batch_size"))
    if batch is None and len(q) == 4 and q[2] == 1:
        batch = q[0]
    if batch is not None:
        axes["batch"] = float(batch)
    regime = (kernel_type, slots.dtypes[0], q3[0], _int(_runtime(cells, "sparse_mode")),
              _int(_runtime(cells, "num_key_value_heads")), _runtime(cells, "input_layout") or None,
              _runtime(cells, "quant_mode") or None)
    return Query(kernel_type, regime, axes)


def attention_workload(q_tokens: int, cumulative: tuple[int, ...], kv: tuple[int, ...]
                       ) -> tuple[str, float] | None:
    """(phase, effective KV length) of a runtime-attention call: query lengths from the
    cumulative offsets; each query token sees its sequence's KV length."""
    lengths, previous = [], 0
    for offset in cumulative:
        if offset < previous or offset > q_tokens:
            return None
        lengths.append(offset - previous)
        previous = offset
    if previous != q_tokens or len(lengths) != len(kv) or q_tokens <= 0:
        return None
    active = [(q, k) for q, k in zip(lengths, kv) if q > 0]
    if not active or any(k <= 0 for _, k in active):
        return None
    phase = ("prefill" if all(q == k for q, k in active) else
             "decode" if all(q == 1 for q, _ in active) else "mixed")
    return phase, sum(q * k for q, k in active) / q_tokens


_RUNTIME_FIELDS = ("sparse_mode", "num_key_value_heads", "input_layout", "topk", "block_size",
                   "num_heads", "cache_layout", "kv_cache_mode")
_SPARSE_FIELDS = ("sparse_block_size", "sparse_indices_pattern", "sparse_indices_valid_count")


def _runtime_attention(kernel_type: str, cells: Cells, policy: Policy) -> Query | str:
    completeness = _runtime(cells, "metadata_completeness")
    if completeness != COMPLETE:
        return f"Runtime metadata_completeness is {completeness or 'empty'}, not complete"
    slots = _present(cells, INPUT_SHAPES, INPUT_DTYPES, None)
    if not slots.shapes or len(slots.shapes[0]) != 3:
        return "query shape is not (T, N, D)"
    q = slots.shapes[0]
    cumulative = _ints(_runtime(cells, "actual_seq_lengths_values"))
    kv = _ints(_runtime(cells, "actual_seq_lengths_kv_values"))
    if cumulative is None or kv is None:
        return "no Runtime actual_seq_lengths values"
    workload = attention_workload(q[0], cumulative, kv)
    if workload is None:
        return "Runtime sequence lengths do not add up to the query"
    fields = _RUNTIME_FIELDS + (_SPARSE_FIELDS if kernel_type in SPARSE_RUNTIME_KERNELS else ())
    values = tuple(_runtime(cells, f) for f in fields)
    if any(not v for v in values):
        missing = [f for f, v in zip(fields, values) if not v]
        return f"no Runtime {', '.join(missing)}"
    regime = (kernel_type, slots.dtypes[0], workload[0], len(q), q[-1], values)
    return Query(kernel_type, regime, {"q_tokens": float(q[0]),
                                       "effective_kv_len": float(workload[1])})


def _moe_fused(kernel_type: str, cells: Cells, policy: Policy) -> Query | str:
    slots = _present(cells, INPUT_SHAPES, INPUT_DTYPES, INPUT_FORMATS)
    if len(slots.shapes) != 7:
        return "not the 7 inputs of the fused MoE kernel"
    x = nz_to_nd(slots.shapes[0]) if slots.formats[0] == "FRACTAL_NZ" else slots.shapes[0]
    w1, w2, route = slots.shapes[1], slots.shapes[2], slots.shapes[3]
    if len(x) < 2 or len(w1) < 3 or len(w2) < 3 or len(route) < 2:
        return "weights or activations of unexpected rank"
    tokens = math.prod(x[:-1])
    if slots.dtypes[3] != "INT32" or math.prod(route[:-1]) != tokens:
        return "no INT32 expert index of the activation's tokens"
    ep = _int(cells.get(EP_SIZE, ""))
    if ep is None or ep <= 0:
        return "no EP Size"
    regime = (kernel_type, slots.dtypes[0], slots.formats[0], slots.dtypes, w1, w2, x[-1],
              route[-1], ep)
    return Query(kernel_type, regime, {"tokens": float(tokens)})


_EXTRACT: dict[str, Callable[[str, Cells, Policy], Query | str]] = {
    COMPUTE: _compute, GENERIC: _generic, ELEMENTWISE: _elementwise, ATTENTION: _attention,
    RUNTIME_ATTENTION: _runtime_attention, MOE_FUSED: _moe_fused,
}


def read_query(kernel_type: str, cells: Cells, policy: Policy) -> Query | str:
    """The row as a point of `kernel_type`'s family, or why it is not one."""
    try:
        return _EXTRACT[family_name(kernel_type, policy)](kernel_type, cells, policy)
    except CellError as exc:
        return exc.reason

