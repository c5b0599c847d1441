"""The kernel catalog's entries: every kernel type of CONTRACT.md §10 and of the shape grid.

Slot layouts are in the order the kernel tables list the slots; dtype and format are what a
new (grid) row gets for a slot that its pattern does not type itself. Adding a kernel type
means one entry here and, when it can be replayed, one replay module named by `replay`.
"""

from __future__ import annotations

from ..db.columns import DISPATCH_FFN_COMBINE, FIA_KERNEL
from ..db.signature import MATMUL_FAMILY
from .entry import CUBE, MIX, VECTOR, KernelEntry, SlotLayout

S = SlotLayout
BF16, FLOAT, INT8, INT32, INT64, BOOL = (
    "DT_BF16", "DT_FLOAT", "DT_INT8", "DT_INT32", "DT_INT64", "DT_BOOL")


def opt(name: str, dtype: str = BF16) -> SlotLayout:
    return SlotLayout(name, dtype, optional=True)


def _x_to_y(*, y_dtype: str = BF16) -> dict:
    return {"inputs": (S("x"),), "outputs": (S("y", y_dtype),)}


_REPLAYS = "pytest_npuperf.kernels"

# -- GEMMs ----------------------------------------------------------------------------------
MATMUL = KernelEntry(
    MATMUL_FAMILY, "gemm", CUBE, (S("a"), S("b"), opt("bias")), (S("y"),),
    "torch.mm(a, b.t())", replay=f"{_REPLAYS}.matmul:MatMul", streamed=("b", "bias"))
BATCH_MATMUL = KernelEntry(
    ("BatchMatMulV2",), "gemm", CUBE, (S("a"), S("b"), opt("bias")), (S("y"),),
    "torch.matmul(a, b)", replay=f"{_REPLAYS}.matmul:BatchMatMulV2", streamed=("b", "bias"))
# Slot orders of the kernels below are their op definitions' input orders (what the kernel
# tables list), read from the CANN operator sources: hicann/ops-nn
# matmul/quant_batch_matmul_v3 and matmul/transpose_batch_mat_mul, hicann/ops-transformer
# gmm/grouped_matmul and gmm/grouped_matmul_swiglu_quant (op_host/*_def.cpp).
QUANT_MATMUL = KernelEntry(
    ("QuantBatchMatmulV3",), "gemm", CUBE,
    (S("x1", INT8), S("x2", INT8, "FRACTAL_NZ"), S("scale", FLOAT), opt("offset", FLOAT),
     opt("bias", INT32), opt("pertoken_scale", FLOAT)), (S("y"),),
    "torch_npu.npu_quant_matmul(x1, x2, scale)", replay=f"{_REPLAYS}.quant:QuantBatchMatmulV3",
    streamed=("x2", "scale", "offset", "bias"))
TRANSPOSE_BATCH_MATMUL = KernelEntry(
    ("TransposeBatchMatMul",), "gemm", CUBE, (S("x1"), S("x2"), opt("bias"), opt("scale", INT64)),
    (S("y"),), "torch_npu.npu_transpose_batchmatmul(x1, x2)",
    replay=f"{_REPLAYS}.matmul:TransposeBatchMatMul", streamed=("x2", "scale"))
# The group list is slot 7 (torch_npu.npu_grouped_matmul's tensor order, per_token_scale last).
GROUPED_MATMUL = KernelEntry(
    ("GroupedMatmul",), "moe", CUBE,
    (S("x"), S("weight"), opt("bias"), opt("scale", FLOAT), opt("offset", FLOAT),
     opt("antiquant_scale"), opt("antiquant_offset"), S("group_list", INT64),
     opt("per_token_scale", FLOAT)),
    (S("y"),), "torch_npu.npu_grouped_matmul", replay=f"{_REPLAYS}.moe:GroupedMatmul",
    streamed=("weight", "bias", "scale", "offset", "antiquant_scale", "antiquant_offset"))
GROUPED_MATMUL_SWIGLU_QUANT = KernelEntry(
    ("GroupedMatmulSwigluQuant",), "moe", MIX,
    (S("x", INT8), S("weight", INT8, "FRACTAL_NZ"), S("weight_scale", FLOAT), S("x_scale", FLOAT),
     opt("weight_assistance_matrix", FLOAT), S("group_list", INT64)),
    (S("y", INT8), S("y_scale", FLOAT)), "torch_npu.npu_grouped_matmul_swiglu_quant",
    replay=f"{_REPLAYS}.moe:GroupedMatmulSwigluQuant",
    streamed=("weight", "weight_scale", "weight_assistance_matrix"))
# vllm-ascend csrc/mc2/dispatch_ffn_combine/op_host/dispatch_ffn_combine_def.cpp: the scales are
# float32 bit patterns in INT64 (vllm-ascend's scale_from_float_to_int64), the token counts INT32.
DISPATCH_FFN = KernelEntry(
    (DISPATCH_FFN_COMBINE,), "moe", MIX,
    (S("x"), S("weight1", INT8), S("weight2", INT8), S("expert_idx", INT32),
     S("scale1", INT64), S("scale2", INT64), S("probs", FLOAT), opt("x_active_mask", BOOL)),
    (S("out"), S("expert_token_nums", INT32)),
    "torch.ops._C_ascend.dispatch_ffn_combine (multi-rank, EP group)", custom_op=True,
    replay=f"{_REPLAYS}.moe:DispatchFFNCombine",
    streamed=("weight1", "weight2", "scale1", "scale2"))

# -- attention ------------------------------------------------------------------------------
# The kernel's 31 input slots (hicann/ops-transformer attention/fused_infer_attention_score/
# op_host/fused_infer_attention_score_def.cpp); the last four no recorded call fills.
_FIA_INPUTS = (
    S("query"), S("key"), S("value"), opt("pse_shift"), opt("atten_mask", INT8),
    opt("actual_seq_lengths", INT64), opt("actual_seq_lengths_kv", INT64),
    opt("dequant_scale1", FLOAT), opt("quant_scale1", FLOAT), opt("dequant_scale2", FLOAT),
    opt("quant_scale2", FLOAT), opt("quant_offset2", FLOAT), opt("antiquant_scale"),
    opt("antiquant_offset"), opt("block_table", INT32), opt("query_padding_size", INT64),
    opt("kv_padding_size", INT64), opt("key_antiquant_scale"), opt("key_antiquant_offset"),
    opt("value_antiquant_scale"), opt("value_antiquant_offset"), opt("key_shared_prefix"),
    opt("value_shared_prefix"), opt("actual_shared_prefix_len", INT64), opt("query_rope"),
    opt("key_rope"), opt("key_rope_antiquant_scale", FLOAT), opt("dequant_scale_query", FLOAT),
    opt("learnable_sink", FLOAT), opt("q_start_idx", INT64), opt("kv_start_idx", INT64),
)
FIA = KernelEntry(
    (FIA_KERNEL,), "attention", MIX, _FIA_INPUTS,
    (S("attention_out"), S("softmax_lse", FLOAT)), "torch_npu.npu_fused_infer_attention_score",
    replay=f"{_REPLAYS}.attention:FusedInferAttentionScore",
    streamed=("key", "value", "key_rope", "key_antiquant_scale", "key_antiquant_offset",
              "value_antiquant_scale", "value_antiquant_offset", "key_shared_prefix",
              "value_shared_prefix"))
# An ATB kernel (op-plugin op_plugin/ops/atb/RingMlaAtb.cpp): it needs NNAL, not vllm-ascend's
# custom OPP (CONTRACT.md §10). Slot order of the ATB operation's inputs (query1, query2, key1,
# key2, value, mask, seqLen: hicann/ascend-transformer-boost src/ops_infer/ring_mla/
# ring_mla_operation.cpp), the reference replay's too.
RING_MLA = KernelEntry(
    ("RINGMLAPrefillBF16Kernel",), "attention", MIX,
    (S("q_nope"), S("q_rope"), S("k_nope"), S("k_rope"), S("value"), S("mask"),
     S("seq_len", INT32)),
    (S("out"), S("lse", FLOAT)), "torch_npu.atb.npu_ring_mla",
    replay=f"{_REPLAYS}.attention:RingMlaPrefill")
# DeepSeek-V3.2 sparse attention (DSA). Slot orders confirmed from the op definitions in
# vllm-ascend csrc/attention/lightning_indexer/op_host/lightning_indexer_def.cpp and
# csrc/attention/sparse_flash_attention/op_host/sparse_flash_attention_def.cpp (CANN ships the
# same ops, which torch_npu exposes with the same signature).
# vllm-ascend's own indexer up to v0.20 (`torch.ops._C_ascend.npu_lightning_indexer`, the
# replay's fallback) runs aclnnLightningIndexerVllm, a kernel named LightningIndexerVllm
# (v0.18.0 csrc/lightning_indexer_vllm/lightning_indexer_vllm_torch_adpt.h:57-58,
# op_host/lightning_indexer_vllm_def.cpp:71): profiled, it is this row's kernel.
LIGHTNING_INDEXER = KernelEntry(
    ("LightningIndexer",), "attention", MIX,
    (S("query"), S("key"), S("weights"), opt("actual_seq_lengths_query", INT32),
     opt("actual_seq_lengths_key", INT32), opt("block_table", INT32)),
    (S("sparse_indices", INT32), opt("sparse_values")), "torch_npu.npu_lightning_indexer",
    device_kernels=("LightningIndexer", "LightningIndexerVllm"),
    replay=f"{_REPLAYS}.sparse_attention:LightningIndexer", streamed=("key",))
SPARSE_FLASH_ATTENTION = KernelEntry(
    ("SparseFlashAttention",), "attention", MIX,
    (S("query"), S("key"), S("value"), S("sparse_indices", INT32), opt("block_table", INT32),
     opt("actual_seq_lengths_query", INT32), opt("actual_seq_lengths_kv", INT32),
     opt("query_rope"), opt("key_rope")),
    (S("attention_out"), opt("softmax_max", FLOAT), opt("softmax_sum", FLOAT)),
    "torch_npu.npu_sparse_flash_attention",
    replay=f"{_REPLAYS}.sparse_attention:SparseFlashAttention",
    streamed=("key", "value", "key_rope"))

# -- rope, KV cache -------------------------------------------------------------------------
# A Triton kernel vllm-ascend registers from Python: no custom OPP (CONTRACT.md §10).
SPLIT_QKV = KernelEntry(
    ("split_qkv_rmsnorm_rope_kernel",), "rope", VECTOR, (S("qkv"), S("norm_weight")),
    (S("q"), S("k"), S("v")), "torch.ops.vllm.qkv_rmsnorm_rope",
    replay=f"{_REPLAYS}.rope:SplitQkvRmsNormRope", streamed=("norm_weight",))
INTERLEAVE_ROPE = KernelEntry(
    ("InterleaveRope",), "rope", VECTOR, (S("x"), S("cos"), S("sin")), (S("y"),),
    "torch_npu.npu_interleave_rope(x, cos, sin)", replay=f"{_REPLAYS}.rope:InterleaveRope")
RESHAPE_AND_CACHE = KernelEntry(
    ("ReshapeAndCacheNdKernel",), "cache", VECTOR,
    (S("key"), S("value"), S("key_cache"), S("value_cache"), S("slot_mapping", INT32)),
    (S("key_cache"), S("value_cache")), "torch_npu._npu_reshape_and_cache",
    replay=f"{_REPLAYS}.kv_cache:ReshapeAndCacheNd", streamed=("key_cache", "value_cache"))
KV_RMSNORM_ROPE_CACHE = KernelEntry(
    ("KvRmsNormRopeCache",), "cache", VECTOR,
    (S("kv"), S("gamma"), S("cos"), S("sin"), S("index", INT64), S("k_rope_cache"),
     S("ckv_cache"), opt("k_rope_scale", FLOAT), opt("c_kv_scale", FLOAT),
     opt("k_rope_offset", FLOAT), opt("c_kv_offset", FLOAT), opt("reserved_11")),
    (S("k_rope_cache"), S("ckv_cache"), S("k_rope"), S("c_kv")),
    "torch_npu.npu_kv_rmsnorm_rope_cache", replay=f"{_REPLAYS}.kv_cache:KvRmsNormRopeCache",
    streamed=("gamma", "k_rope_cache", "ckv_cache"))

# -- normalisation, activation, quantisation ------------------------------------------------
RMS_NORM = KernelEntry(
    ("RmsNorm",), "norm", VECTOR, (S("x"), S("gamma")), (S("y"), S("rstd", FLOAT)),
    "torch_npu.npu_rms_norm(x, gamma, epsilon)", replay=f"{_REPLAYS}.vector:RmsNorm",
    streamed=("gamma",))
ADD_RMS_NORM_BIAS = KernelEntry(
    ("AddRmsNormBias",), "norm", VECTOR, (S("x1"), S("x2"), S("gamma"), opt("bias")),
    (S("y"), S("rstd", FLOAT), S("x")), "torch.ops._C_ascend.npu_add_rms_norm_bias",
    custom_op=True, replay=f"{_REPLAYS}.norm:AddRmsNormBias", streamed=("gamma", "bias"))
SWIGLU = KernelEntry(
    ("SwiGlu",), "activation", VECTOR, **_x_to_y(), npu_api="torch_npu.npu_swiglu(x, dim=-1)",
    replay=f"{_REPLAYS}.vector:SwiGlu")
# hicann/ops-nn quant/ascend_quant_v2 and quant/dynamic_quant (op_host/*_def.cpp).
ASCEND_QUANT = KernelEntry(
    ("AscendQuantV2",), "quant", VECTOR, (S("x"), S("scale"), opt("offset")), (S("y", INT8),),
    "torch_npu.npu_quantize", replay=f"{_REPLAYS}.quant:AscendQuantV2",
    streamed=("scale", "offset"))
DYNAMIC_QUANT = KernelEntry(
    ("DynamicQuant",), "quant", VECTOR,
    (S("x"), opt("smooth_scales"), opt("group_index", INT32)), (S("y", INT8), S("scale", FLOAT)),
    "torch_npu.npu_dynamic_quant(x)", replay=f"{_REPLAYS}.quant:DynamicQuant",
    streamed=("smooth_scales",))

# -- softmax, sampling ----------------------------------------------------------------------
SOFTMAX = KernelEntry(
    ("SoftmaxV2",), "softmax", VECTOR, **_x_to_y(), npu_api="torch.softmax(x, dim=-1)",
    replay=f"{_REPLAYS}.vector:SoftmaxV2")
SORT = KernelEntry(
    ("Sort",), "sampling", VECTOR, (S("x"),), (S("values"), S("indices", INT64)),
    "torch.sort(x, dim=-1)", replay=f"{_REPLAYS}.decode_sampling:Sort")
ARGMAX = KernelEntry(
    ("ArgMaxV2",), "sampling", VECTOR, **_x_to_y(y_dtype=INT64),
    npu_api="torch.argmax(x, dim=-1)", replay=f"{_REPLAYS}.decode_sampling:ArgMaxV2")
MASKED_FILL = KernelEntry(
    ("MaskedFill",), "elementwise", VECTOR, (S("x"), S("mask", BOOL)), (S("y"),),
    "x.masked_fill_(mask, value)", replay=f"{_REPLAYS}.decode_sampling:MaskedFill")

# -- elementwise, data movement -------------------------------------------------------------
ADD = KernelEntry(
    ("Add",), "elementwise", VECTOR, (S("a"), S("b")), (S("y"),), "torch.add(a, b)",
    replay=f"{_REPLAYS}.vector:Add")
TENSOR_MOVE = KernelEntry(
    ("TensorMove",), "movement", VECTOR, **_x_to_y(), npu_api="dst.copy_(src)",
    replay=f"{_REPLAYS}.movement:TensorMove")
SLICE = KernelEntry(
    ("Slice",), "movement", VECTOR, (S("x"), S("offsets", INT64), S("size", INT64)), (S("y"),),
    "torch_npu.npu_slice(x, offsets, size)", replay=f"{_REPLAYS}.movement:Slice")
TRANSPOSE = KernelEntry(
    ("Transpose",), "movement", VECTOR, (S("x"), S("perm", INT64)), (S("y"),),
    "x.permute(perm).contiguous()", replay=f"{_REPLAYS}.movement:Transpose")
PAD = KernelEntry(
    ("PadV3",), "movement", VECTOR, (S("x"), S("paddings", INT64)), (S("y"),),
    "torch.nn.functional.pad(x, pad, mode='constant')", replay=f"{_REPLAYS}.movement:PadV3")
INDEX = KernelEntry(
    ("Index",), "movement", VECTOR,
    (S("x"), S("indexed_sizes", INT64), S("indexed_strides", INT64), S("indices", INT64)),
    (S("y"),), "x[indices]", replay=f"{_REPLAYS}.movement:Index")
GATHER = KernelEntry(
    ("GatherV2",), "movement", VECTOR, (S("x"), S("indices", INT32), S("axis", INT64)),
    (S("y"),), "torch.nn.functional.embedding(indices, x)", replay=f"{_REPLAYS}.movement:GatherV2",
    streamed=("x",))
# torch_npu.npu_scatter_nd_update_(var, indices, updates): rows of a cache by slot (N, 1).
SCATTER_ND_UPDATE = KernelEntry(
    ("ScatterNdUpdate",), "cache", VECTOR, (S("var"), S("indices", INT32), S("updates")),
    (S("var"),), "torch_npu.npu_scatter_nd_update_(var, indices, updates)",
    replay=f"{_REPLAYS}.kv_cache:ScatterNdUpdate", streamed=("var",))
# hicann/ops-transformer moe/moe_token_permute and moe/moe_token_unpermute (op_host/*_def.cpp).
MOE_TOKEN_PERMUTE = KernelEntry(
    ("MoeTokenPermute",), "moe", VECTOR, (S("tokens"), S("indices", INT32)),
    (S("permuted_tokens"), S("sorted_indices", INT32)), "torch_npu.npu_moe_token_permute",
    replay=f"{_REPLAYS}.moe:MoeTokenPermute")
MOE_TOKEN_UNPERMUTE = KernelEntry(
    ("MoeTokenUnpermute",), "moe", VECTOR,
    (S("permuted_tokens"), S("sorted_indices", INT32), opt("probs")), (S("y"),),
    "torch_npu.npu_moe_token_unpermute", replay=f"{_REPLAYS}.moe:MoeTokenUnpermute")

ENTRIES: tuple[KernelEntry, ...] = (
    MATMUL, BATCH_MATMUL, QUANT_MATMUL, TRANSPOSE_BATCH_MATMUL, GROUPED_MATMUL,
    GROUPED_MATMUL_SWIGLU_QUANT, DISPATCH_FFN, FIA, RING_MLA, LIGHTNING_INDEXER,
    SPARSE_FLASH_ATTENTION, SPLIT_QKV, INTERLEAVE_ROPE,
    RESHAPE_AND_CACHE, KV_RMSNORM_ROPE_CACHE, RMS_NORM, ADD_RMS_NORM_BIAS, SWIGLU, ASCEND_QUANT,
    DYNAMIC_QUANT, SOFTMAX, SORT, ARGMAX, MASKED_FILL, ADD, TENSOR_MOVE, SLICE, TRANSPOSE, PAD,
    INDEX, GATHER, SCATTER_ND_UPDATE, MOE_TOKEN_PERMUTE, MOE_TOKEN_UNPERMUTE,
)

# Attention slot positions that ingest and the grid address directly, from the layout above.
FIA_INPUT_SLOTS = len(FIA.inputs)
FIA_QUERY, FIA_KEY, FIA_VALUE, FIA_MASK = (
    FIA.input_index(n) for n in ("query", "key", "value", "atten_mask"))
FIA_SEQ_LENS, FIA_KV_SEQ_LENS, FIA_BLOCK_TABLE, FIA_QUERY_ROPE, FIA_KEY_ROPE = (
    FIA.input_index(n) for n in ("actual_seq_lengths", "actual_seq_lengths_kv", "block_table",
                                 "query_rope", "key_rope"))
