"""The op_mapping.yaml npuperf writes into a database that has none, from the kernel catalog.

Two kinds of mappings (the simulator, msmodeling's `ProfilingDataSource`, reads both):

- `profiling.<KernelType>` for every kernel type of the catalog and every kernel table of the
  directory: the placeholder entries of the reference databases, which keep every table
  reachable (npuperf's own check, `validate --consumer`, and a caller who names the kernel).
  A catalog kernel with optional inputs gets `tc_input_count`, its inputs before the first
  optional one: the simulator drops absent slots from a row's shape list but keeps their
  `DT_UNDEFINED` in its dtype list, so later slots could not be compared.
- the simulator's own operators (`aten.mm.default`, `tensor_cast.attention.default`, ...)
  that lower to a catalog kernel on the NPU: which operator lowers to which kernel, its
  alternates and query mode are facts read from the reference database's op_mapping.yaml
  (vLLM-Ascend 0.18 / CANN 8.5), kept to the catalog's kernel types and, for kernels outside
  the catalog (ConcatD, LayerNormV3), to the tables the directory has. Collective operators
  are mapped to the `hcom_*` tables found beside the database.
- the operators the reference costs at zero (`zero_cost: true`: views, steps the NPU fuses
  into another kernel), and its interpolation policy (`interpolation_policy`: 1-D only for
  GEMMs, the square root of the sequence for FusedInferAttentionScore, the output's element
  count for GatherV2 / Index / ConcatD) for the kernel types the database has.

Writers call `ensure_op_mapping(tx, version_dir, source=None, hccl_dir=None)` in the
transaction that writes their tables (see `db.op_mapping` for what it keeps and when).
"""

from __future__ import annotations

import copy
from pathlib import Path

from ..db.op_mapping import MappingContext, render_generated, stage_op_mapping
from ..db.transaction import Transaction
from . import catalog

_MLA = {"composite": True, "decomposer": True}

# Simulator operators that decompose into several catalog kernels (multi-head latent attention,
# its indexer): no one entry's. Every other simulator operator is named by the catalog entry
# of its kernel (`KernelEntry.operators`, kernels/kernel_types.py).
DECOMPOSED_OPERATORS: dict[str, dict] = {
    "tensor_cast.multihead_latent_attention.default": dict(_MLA),
    "tensor_cast.multihead_latent_attention_quant.default": dict(_MLA),
    "tensor_cast.dsa_indexer.default": {**_MLA, "primary_kernel_type": "LightningIndexer"},
    "tensor_cast.mla_sparse_attention.default": dict(_MLA),
}


def simulator_operators() -> dict[str, dict]:
    """Simulator operator -> its mapping: the catalog entries' (registered ones included),
    then the decomposed ones. Which operator lowers to which kernel, its alternates and query
    mode are facts of the reference database's op_mapping.yaml."""
    return {**catalog.simulator_operators(), **DECOMPOSED_OPERATORS}


# Simulator operators of kernel types outside the catalog, mapped when the directory has the
# table (a profile parsed into it): facts of the reference mapping, which maps aten.cat to
# ConcatD because its database ships ConcatD.csv.
TABLE_OPERATORS: dict[str, dict] = {
    "aten.cat.default": {"kernel_type": "ConcatD"},
    "tensor_cast.cat.default": {"kernel_type": "ConcatD"},
    # input, weight, bias: normalized_shape and eps are not tensors of the kernel table.
    "aten.native_layer_norm.default": {"kernel_type": "LayerNormV3",
                                       "alternate_kernel_types": ["LayerNormV3WithImplMode"],
                                       "tc_input_count": 3},
}
_VIEW = "shape-only (a view): no kernel runs on the NPU"
_MOE_ROUTING = "MoE routing step the NPU fuses into MoeGatingTopK / DispatchFFNCombine"
_EMBEDDING_MASK = "row-parallel embedding mask the NPU fuses into the lookup"
# Operators the reference mapping (vLLM-Ascend 0.18, CANN 8.5) costs at zero: nothing of
# their own runs on the NPU, so the simulator adds 0 instead of an analytic guess.
ZERO_COST_OPERATORS: dict[str, str] = {
    **dict.fromkeys(("aten.view.default", "aten.permute.default", "aten.t.default",
                     "aten.transpose.int", "aten._unsafe_view.default",
                     "aten.unsqueeze.default", "aten.split.Tensor",
                     "aten.split_with_sizes.default", "aten.select.int", "aten.slice.Tensor",
                     "aten.expand.default", "aten.detach.default", "aten.alias.default"), _VIEW),
    **dict.fromkeys(("aten.div.Tensor", "aten.sigmoid.default", "aten.topk.default",
                     "aten.where.self", "aten.gather.default", "aten.scatter.value",
                     "aten.sum.dim_IntList", "aten.clone.default", "aten.bitwise_not.default"),
                    _MOE_ROUTING),
    **dict.fromkeys(("aten.ge.Scalar", "aten.lt.Scalar", "aten.bitwise_and.Tensor",
                     "aten.sub.Tensor"), _EMBEDDING_MASK),
    "aten.copy_.default": "a copy of the Python layer; the NPU's TensorMove kernels come from "
                          "the runtime, and graph mode removes them",
    "aten.copy.default": "a copy of the Python layer; the NPU's TensorMove kernels come from "
                         "the runtime, and graph mode removes them",
    "prims.convert_element_type.default": "a dtype conversion done at dispatch",
    "aten.full.default": "a filled tensor's creation: negligible",
    "aten.arange.start": "index generation: negligible",
    "tensor_cast.shift_and_update_input_ids.default": "MTP state update: lowered into sampling "
                                                      "and control flow, no kernel of its own",
}
_ZERO_COST_CAT = ("no ConcatD table in this database: a contiguous concat is a view on the NPU "
                  "(parse a profile with ConcatD rows to cost it)")
# The reference mapping's interpolation policy, for the kernel types this database has.
INTERPOLATION_POLICY: dict[str, dict] = {
    **{key: {"max_interpolation_dim": 1}
       for key in ("MatMulV2", "MatMulV3", "MatMulCommon", "QuantBatchMatmulV3")},
    "FusedInferAttentionScore": {"axis_transform": "sqrt_seq"},
    "SparseFlashAttention": {"axis_transform": "linear"},
    **{key: {"generic_compute": {"axis": "output_numel"}}
       for key in ("GatherV2", "Index", "ConcatD")},
}

# Which simulator operator is costed from which collective table (docs/format.md §1, §7).
COLLECTIVE_OPERATORS: dict[str, tuple[str, ...]] = {
    "tensor_cast.all_reduce.default": ("hcom_allReduce_",),
    "tensor_cast.all_gather.default": ("hcom_allGather_",),
    "tensor_cast.reduce_scatter.default": ("hcom_reduceScatter_",),
    "tensor_cast.all_to_all.default": ("hcom_alltoallv_", "hcom_alltoall_"),
}
_DECOMPOSED = ("FusedInferAttentionScore",)  # what the MLA decomposers need at least


def _leading_required(entry: catalog.KernelEntry) -> int | None:
    """The inputs before the first optional one, when the kernel has optional inputs: the
    simulator drops absent slots from the shape list but not from the dtype list, so it can
    compare only the slots before the first one that may be absent."""
    return next((i for i, s in enumerate(entry.inputs) if s.optional), None)


def _profiling_entry(kernel_type: str) -> dict:
    entry = catalog.entry_for(kernel_type)
    out: dict = {"kernel_type": kernel_type}
    if entry is None:
        out["notes"] = "a kernel table of this database (not in npuperf's kernel catalog)"
        return out
    count = _leading_required(entry)
    if count is not None:
        out["tc_input_count"] = count
    out["notes"] = f"npuperf replays it as {entry.npu_api}"
    return out


def _simulator_operators(types: set[str], tables: set[str]) -> dict[str, dict]:
    out = {}
    for op, mapping in simulator_operators().items():
        primary = mapping.get("kernel_type") or mapping.get("primary_kernel_type")
        needs = [primary] if primary else list(_DECOMPOSED)
        if all(t in types for t in needs):
            out[op] = dict(mapping)
    for op, mapping in TABLE_OPERATORS.items():
        if mapping["kernel_type"] in tables:
            entry = dict(mapping)
            others = [t for t in entry.pop("alternate_kernel_types", []) if t in tables]
            if others:
                entry["alternate_kernel_types"] = others
            out[op] = {k: entry[k] for k in ("kernel_type", "alternate_kernel_types",
                                             "tc_input_count") if k in entry}
        elif mapping["kernel_type"] == "ConcatD":
            out[op] = {"zero_cost": True, "notes": _ZERO_COST_CAT}
    for op, note in ZERO_COST_OPERATORS.items():
        out.setdefault(op, {"zero_cost": True, "notes": note})
    return out


def _collective_operators(context: MappingContext) -> dict[str, dict]:
    out = {}
    have = set(context.collective_types)
    for op, tables in COLLECTIVE_OPERATORS.items():
        present = [t for t in tables if t in have]
        if present:
            mapping: dict = {"kernel_type": present[0], "category": "communication"}
            if present[1:]:
                mapping["alternate_kernel_types"] = present[1:]
            out[op] = mapping
    return out


def default_op_mapping(context: MappingContext) -> dict:
    """The document of a generated op_mapping.yaml for this directory."""
    doc: dict = {}
    if context.versions is not None:
        doc["version"] = context.versions.vllm
        if context.device:
            doc["device"] = context.device
        doc["cann_version"] = context.versions.cann
        doc["pytorch_version"] = context.versions.torch
    if context.communication_ref:
        doc["communication_data_ref"] = context.communication_ref
        doc["communication_fallback"] = "analytic"
    catalog_types = catalog.kernel_types()
    types = set(catalog_types)
    tables = set(context.kernel_types)
    policy = {t: copy.deepcopy(p) for t, p in INTERPOLATION_POLICY.items() if t in types | tables}
    if policy:
        doc["interpolation_policy"] = {"kernel_overrides": policy}
    mappings = _simulator_operators(types, tables)
    mappings.update(_collective_operators(context))
    extra = [t for t in context.kernel_types if t not in types]
    for kernel_type in sorted(types) + extra:
        mappings[f"profiling.{kernel_type}"] = _profiling_entry(kernel_type)
    doc["operator_mappings"] = mappings
    return doc


_COMMENT = (
    "op_mapping.yaml: which kernel tables of this database the simulator (msmodeling's",
    "ProfilingDataSource) reads for each of its operators.",
    "Generated by npuperf from its kernel catalog and the tables of this directory; npuperf",
    "generates it again when tables are added, as long as the line above matches the content.",
    "Edit it freely: an edited file (or one without that line) is never rewritten.",
)


def render_default(context: MappingContext) -> str:
    return render_generated(default_op_mapping(context), _COMMENT)


def ensure_op_mapping(tx: Transaction, version_dir: str | Path, source: str | Path | None = None,
                      hccl_dir: str | Path | None = None) -> str:
    """Stage `version_dir/op_mapping.yaml` in `tx`, after the tables the transaction writes:
    kept when it exists (regenerated when npuperf wrote it and nobody edited it), else
    `source`'s (a database this one is a copy of), else generated. `hccl_dir`: where the
    collective tables are (default `<DEVICE>/hccl/v<CANN>` beside the version directory).
    Returns kept, copied, generated or regenerated."""
    return stage_op_mapping(tx, version_dir, render_default, source=source, hccl_dir=hccl_dir)
