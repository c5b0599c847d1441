"""Column names of the compute CSVs (docs/format.md §2) and the columns this project adds.

The contract columns are never renamed or dropped. Columns of this project go after them.
Legacy headers are migrated on rewrite: `MicroBench Duration(us)` becomes
`Average Duration(us)`, and the old fixture schema (profiling values under `Average ...`,
`Median ...`, `Std ...`) is recognised so that its profiling numbers are not read as replays.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence

OP_STATE = "OP State"
ACCELERATOR_CORE = "Accelerator Core"
INPUT_SHAPES = "Input Shapes"
INPUT_DTYPES = "Input Data Types"
INPUT_FORMATS = "Input Formats"
OUTPUT_SHAPES = "Output Shapes"
OUTPUT_DTYPES = "Output Data Types"
OUTPUT_FORMATS = "Output Formats"

IDENTITY_COLUMNS: tuple[str, ...] = (
    OP_STATE, ACCELERATOR_CORE, INPUT_SHAPES, INPUT_DTYPES, INPUT_FORMATS,
    OUTPUT_SHAPES, OUTPUT_DTYPES, OUTPUT_FORMATS,
)
# The cells a signature is computed from (docs/format.md §4): OP State and Output Formats are not.
SIGNATURE_COLUMNS: tuple[str, ...] = (
    INPUT_SHAPES, INPUT_DTYPES, INPUT_FORMATS, OUTPUT_SHAPES, OUTPUT_DTYPES,
)
SHAPE_COLUMNS = (INPUT_SHAPES, OUTPUT_SHAPES)
FORMAT_COLUMNS = (INPUT_FORMATS, OUTPUT_FORMATS)

COUNTERS: tuple[str, ...] = (
    "aicore_time(us)", "aic_total_cycles", "aic_mac_time(us)", "aic_mac_ratio",
    "aic_scalar_time(us)", "aic_scalar_ratio", "aic_mte1_time(us)", "aic_mte1_ratio",
    "aic_mte2_time(us)", "aic_mte2_ratio", "aic_fixpipe_time(us)", "aic_fixpipe_ratio",
    "aic_icache_miss_rate", "aiv_time(us)", "aiv_total_cycles", "aiv_vec_time(us)",
    "aiv_vec_ratio", "aiv_scalar_time(us)", "aiv_scalar_ratio", "aiv_mte2_time(us)",
    "aiv_mte2_ratio", "aiv_mte3_time(us)", "aiv_mte3_ratio", "aiv_icache_miss_rate",
    "cube_utilization(%)",
)

AVERAGE_DURATION = "Average Duration(us)"
PROFILING_AVERAGE_DURATION = "Profiling Average Duration(us)"
PROFILING_MEDIAN_DURATION = "Profiling Median Duration(us)"
PROFILING_STD_DURATION = "Profiling Std Duration(us)"
RAW_DURATION = "Duration(us)"
EP_SIZE = "EP Size"


def microbench_counter(counter: str) -> str:
    return f"MicroBench {counter}"


def profiling_counter(counter: str) -> str:
    return f"Profiling Average {counter}"


CONTRACT_COLUMNS: tuple[str, ...] = (
    *IDENTITY_COLUMNS,
    AVERAGE_DURATION, PROFILING_AVERAGE_DURATION, PROFILING_MEDIAN_DURATION,
    PROFILING_STD_DURATION,
    *(c for m in COUNTERS for c in (microbench_counter(m), profiling_counter(m))),
)
assert len(CONTRACT_COLUMNS) == 62

FIA_KERNEL = "FusedInferAttentionScore"
DISPATCH_FFN_COMBINE = "DispatchFFNCombine"

FIA_RUNTIME_FIELDS: tuple[str, ...] = (
    "source_profile", "actual_seq_lengths_shape", "actual_seq_lengths_values",
    "actual_seq_lengths_kv_shape", "actual_seq_lengths_kv_values", "avg_seq_len",
    "block_table_shape", "block_table_valid_blocks", "num_heads", "num_key_value_heads",
    "sparse_mode", "input_layout", "block_size", "attn_state", "kv_cache_mode",
    "metadata_completeness", "operator_input_shapes_raw",
    # Read by the simulator (msmodeling's ProfilingDataSource and InterpolatingDataSource): a
    # query that carries phase or topk is matched only against rows that have the column.
    "phase", "topk", "cache_layout", "sparse_block_size", "sparse_indices_pattern",
    "sparse_indices_valid_count", "quant_mode", "batch_size",
)
# `Runtime phase`: the simulator's words for a whole batch's phase.
PHASE_PREFILL, PHASE_DECODE = "prefill", "decode"
# `Runtime cache_layout` of a paged KV cache, named after the cache tensor's dims the way the
# simulator names vLLM-Ascend's (`PA_BSND`: blocks, block size, heads, head dim); empty when
# the cache is not paged.
CACHE_LAYOUT_BSH, CACHE_LAYOUT_BNSD = "PA_BSH", "PA_BNSD"
FIA_RUNTIME_COLUMNS: tuple[str, ...] = tuple(f"Runtime {f}" for f in FIA_RUNTIME_FIELDS)
# Kernel types whose rows carry the Runtime columns: the simulator reads them for the
# attention kernels (DeepSeek-V3.2's sparse attention as well as FusedInferAttentionScore).
RUNTIME_KERNELS: tuple[str, ...] = (FIA_KERNEL, "SparseFlashAttention", "LightningIndexer")


def runtime_column(field: str) -> str:
    return f"Runtime {field}"


# Profiling columns of this project: the aggregate's other statistics and where it came from.
PROFILING_COUNT = "Profiling Count"
# The kernels the median was taken over, when fewer than the count: two profiles pooled
# (ingest/pooled.py) keep the larger one's median (medians do not combine). Empty: all.
PROFILING_MEDIAN_COUNT = "Profiling Median Count"
PROFILING_MIN_DURATION = "Profiling Min Duration(us)"
PROFILING_MAX_DURATION = "Profiling Max Duration(us)"
PROFILING_SOURCE = "Profiling Source"
PROFILING_UPDATED = "Profiling Updated"
PROFILING_EXTRA_COLUMNS: tuple[str, ...] = (
    PROFILING_COUNT, PROFILING_MIN_DURATION, PROFILING_MAX_DURATION, PROFILING_SOURCE,
    PROFILING_UPDATED, PROFILING_MEDIAN_COUNT,
)

# Where and how a row's profiling values were taken (a trace parsed by `npuperf parse`): the
# device, the profile's intra-op threads, the host's state, the software stack, and whether the
# in-model samples can be trusted (`ok`, or `untrusted: <why>`: an oversubscribed or
# preempting host; such values are kept out of the replay comparison). Written only by a parse
# of a trace that records them; absent otherwise.
PROFILING_DEVICE = "Profiling Device"
PROFILING_THREADS = "Profiling Threads"
PROFILING_HOST = "Profiling Host"
PROFILING_STACK = "Profiling Stack"
PROFILING_TRUST = "Profiling Trust"
PROFILE_CONDITION_COLUMNS: tuple[str, ...] = (
    PROFILING_DEVICE, PROFILING_THREADS, PROFILING_HOST, PROFILING_STACK, PROFILING_TRUST,
)
TRUST_OK = "ok"
UNTRUSTED = "untrusted"
# The strides of each input slot as the model passed it, where not contiguous (a transposed,
# broadcast or expanded view): `;`-separated slots, empty for a contiguous one, the whole cell
# empty when every slot is. A replay builds such inputs with these strides.
INPUT_STRIDES = "Input Strides"


def trusted_profile(cell: object) -> bool:
    """Whether a row's profiling values may be compared: no trust mark (older databases,
    kernel tables) or `ok`."""
    text = str(cell or "").strip()
    return not text.startswith(UNTRUSTED)


# Replay (microbenchmark) columns of this project. `Average Duration(us)` holds the statistic
# named in `MicroBench Statistic` (the median unless chosen otherwise).
MICROBENCH_STATISTIC = "MicroBench Statistic"
MICROBENCH_MEDIAN_DURATION = "MicroBench Median Duration(us)"
MICROBENCH_MEAN_DURATION = "MicroBench Mean Duration(us)"
MICROBENCH_STD_DURATION = "MicroBench Std Duration(us)"
MICROBENCH_MIN_DURATION = "MicroBench Min Duration(us)"
MICROBENCH_SAMPLES = "MicroBench Samples"
MICROBENCH_PRECISION = "MicroBench Precision"  # relative 95 % CI half-width of the statistic
MICROBENCH_STOP_REASON = "MicroBench Stop Reason"
MICROBENCH_OUTLIERS = "MicroBench Outliers"  # samples beyond the Tukey fences
MICROBENCH_WARMUP = "MicroBench Warmup"
MICROBENCH_METHOD = "MicroBench Method"
MICROBENCH_STATUS = "MicroBench Status"
MICROBENCH_DEVICE = "MicroBench Device"
MICROBENCH_STACK = "MicroBench Stack"
MICROBENCH_RUN_ID = "MicroBench Run Id"
# Which implementation of the kernel a replay ran (NPU API, scaled-dot-product backend, grouped
# GEMM or a loop of GEMMs, ...): next to the method that timed it.
MICROBENCH_IMPLEMENTATION = "MicroBench Implementation"
# The cache state a replay measured in: which inputs were cold (kernels/cache_state.py).
MICROBENCH_CACHE = "MicroBench Cache"
MICROBENCH_TIMESTAMP = "MicroBench Timestamp"
# The replay on the device's roofline (measure/roofline.py).
MICROBENCH_BOUND = "MicroBench Bound(us)"
MICROBENCH_COMPUTE_BOUND = "MicroBench Compute Bound(us)"
MICROBENCH_MEMORY_BOUND = "MicroBench Memory Bound(us)"
MICROBENCH_MEMORY_LEVEL = "MicroBench Memory Level"
MICROBENCH_HBM_BOUND = "MicroBench HBM Bound(us)"
MICROBENCH_BOUND_BY = "MicroBench Bound By"
MICROBENCH_TFLOPS = "MicroBench Achieved TFLOP/s"
MICROBENCH_GBPS = "MicroBench Achieved GB/s"
MICROBENCH_MFU = "MicroBench MFU"
MICROBENCH_MBU = "MicroBench MBU"
# How each term of the bound was made: FLOP count and peak source, bytes, bandwidth, floor.
MICROBENCH_BOUND_DERIVATION = "MicroBench Bound Derivation"
ROOFLINE_COLUMNS: tuple[str, ...] = (
    MICROBENCH_BOUND, MICROBENCH_COMPUTE_BOUND, MICROBENCH_MEMORY_BOUND, MICROBENCH_MEMORY_LEVEL,
    MICROBENCH_HBM_BOUND, MICROBENCH_BOUND_BY, MICROBENCH_TFLOPS, MICROBENCH_GBPS,
    MICROBENCH_MFU, MICROBENCH_MBU, MICROBENCH_BOUND_DERIVATION,
)
MICROBENCH_EXTRA_COLUMNS: tuple[str, ...] = (
    MICROBENCH_STATISTIC, MICROBENCH_MEDIAN_DURATION, MICROBENCH_MEAN_DURATION,
    MICROBENCH_STD_DURATION, MICROBENCH_MIN_DURATION, MICROBENCH_SAMPLES,
    MICROBENCH_PRECISION, MICROBENCH_STOP_REASON, MICROBENCH_OUTLIERS, MICROBENCH_WARMUP,
    MICROBENCH_METHOD, MICROBENCH_IMPLEMENTATION, MICROBENCH_CACHE, MICROBENCH_STATUS,
    MICROBENCH_DEVICE, MICROBENCH_STACK, MICROBENCH_RUN_ID, MICROBENCH_TIMESTAMP,
    *ROOFLINE_COLUMNS,
)

# Legacy names.
LEGACY_MICROBENCH_DURATION = "MicroBench Duration(us)"
OBSOLETE_COLUMNS: tuple[str, ...] = (
    "MicroBench Task Duration(us)", "MicroBench Kernel Duration(us)",
)
_LEGACY_PROFILING_MARKERS = ("Median Duration(us)", "Std Duration(us)",
                             *(f"Average {m}" for m in COUNTERS))

DURATION_PRIORITY: tuple[str, ...] = (AVERAGE_DURATION, PROFILING_AVERAGE_DURATION, RAW_DURATION)


def parse_float(text: str) -> float | None:
    """A number as the C parsers that read these tables (pandas, the simulator) read it; None
    otherwise. Python's float() also takes `1_000` and non-ASCII digits, which they do not."""
    text = text.strip()
    if "_" in text or not text.isascii():
        return None
    try:
        return float(text)
    except ValueError:
        return None


def parse_duration(text: object) -> float | None:
    """A duration if the cell is a float > 0 (finite), else None (empty, 0, N/A, junk)."""
    if text is None:
        return None
    value = float(text) if isinstance(text, (int, float)) else parse_float(str(text))
    if value is None or not math.isfinite(value) or value <= 0:
        return None
    return value


def is_valid_duration(text: object) -> bool:
    return parse_duration(text) is not None


def first_valid_duration(row: dict[str, object]) -> float | None:
    """What readers take as the row's latency: the first valid of DURATION_PRIORITY."""
    for column in DURATION_PRIORITY:
        value = parse_duration(row.get(column))
        if value is not None:
            return value
    return None


def is_legacy_profiling_schema(columns: Iterable[str]) -> bool:
    """The old fixture schema: profiling values under `Average/Median/Std Duration(us)`."""
    cols = set(columns)
    return PROFILING_AVERAGE_DURATION not in cols and any(m in cols for m in _LEGACY_PROFILING_MARKERS)


def legacy_renames(columns: Sequence[str]) -> dict[str, str]:
    """Old column name -> contract name, for a header that needs migrating (empty when current)."""
    cols = set(columns)
    renames: dict[str, str] = {}
    if is_legacy_profiling_schema(cols):
        renames.update({
            AVERAGE_DURATION: PROFILING_AVERAGE_DURATION,
            "Median Duration(us)": PROFILING_MEDIAN_DURATION,
            "Std Duration(us)": PROFILING_STD_DURATION,
        })
        renames.update({f"Average {m}": profiling_counter(m) for m in COUNTERS})
    renames[LEGACY_MICROBENCH_DURATION] = AVERAGE_DURATION
    # Never rename onto a column that stays: that would lose one of the two.
    return {old: new for old, new in renames.items()
            if old in cols and (new not in cols or new in renames)}


def contract_columns_for(kernel_type: str) -> tuple[str, ...]:
    """The full column set of a new file for this kernel type, in order."""
    identity = list(IDENTITY_COLUMNS)
    if kernel_type == DISPATCH_FFN_COMBINE:
        identity.append(EP_SIZE)
    rest = CONTRACT_COLUMNS[len(IDENTITY_COLUMNS):]
    extra = FIA_RUNTIME_COLUMNS if kernel_type in RUNTIME_KERNELS else ()
    return (*identity, *rest, *extra)



def merge_column_order(existing: Sequence[str], wanted: Iterable[str],
                       canonical: Sequence[str] = ()) -> list[str]:
    """`existing` with the missing `wanted` columns added, nothing moved or dropped.

    A missing column that `canonical` orders goes right after the nearest column before it in
    `canonical` that the file already has (so contract columns land in contract order);
    any other missing column is appended at the end.
    """
    out = list(existing)
    present = set(out)
    rank = {c: i for i, c in enumerate(canonical)}
    for col in wanted:
        if col in present:
            continue
        pos = len(out)
        if col in rank:
            before = [c for c in canonical[:rank[col]] if c in present]
            if before:
                pos = out.index(before[-1]) + 1
            else:
                after = [c for c in canonical[rank[col] + 1:] if c in present]
                pos = out.index(after[0]) if after else len(out)
        out.insert(pos, col)
        present.add(col)
    return out
