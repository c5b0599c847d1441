"""The simulator that reads this project's databases, loaded from an msmodeling export.

msmodeling's `ProfilingDataSource` (tensor_cast/performance_model/profiling_database/) is
imported from the checkout that `NPUPERF_MSMODELING` points at (the project never vendors it):

    git clone https://github.com/Ascend/msmodeling  # or export a snapshot
    NPUPERF_MSMODELING=/path/to/msmodeling pytest tests/test_consumer_msmodeling.py

Only its `profiling_database` modules are loaded: the packages above them import the whole
simulator (transformers and the model zoo), so `tensor_cast` and `tensor_cast.performance_model`
are entered as bare packages pointing at their directories, `tensor_cast.config` is its own
file (it needs torch only) and `tensor_cast.device` is a stand-in with the one name the data
source imports (`DeviceProfile`, used for type hints and `comm_grid`). Its other imports are
torch, pandas, numpy and PyYAML, which this project's environment has.

`probe_row` asks the data source for one row the way the simulator's own tests do: an
operator whose mapping names the row's kernel type (`profiling.<KernelType>`), called with
meta tensors of the shapes and dtypes the data source reads from that row.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import sys
import types
from dataclasses import dataclass, field
from pathlib import Path

ENV = "NPUPERF_MSMODELING"
PACKAGE = "tensor_cast/performance_model/profiling_database"


def export_root() -> Path | None:
    root = os.environ.get(ENV)
    if not root:
        return None
    path = Path(root)
    return path if (path / PACKAGE / "profiling_data_source.py").is_file() else None


def _package(name: str, path: Path) -> None:
    module = types.ModuleType(name)
    module.__path__ = [str(path)]  # submodules import from the real directory
    sys.modules[name] = module


def load(root: Path) -> types.SimpleNamespace:
    """The data source modules of the export at `root`."""
    base = root / "tensor_cast"
    if "tensor_cast.performance_model.profiling_database.profiling_data_source" not in sys.modules:
        _package("tensor_cast", base)
        _package("tensor_cast.performance_model", base / "performance_model")
        _package("tensor_cast.performance_model.profiling_database", root / PACKAGE)
        spec = importlib.util.spec_from_file_location("tensor_cast.config", base / "config.py")
        config = importlib.util.module_from_spec(spec)
        sys.modules["tensor_cast.config"] = config
        spec.loader.exec_module(config)
        device = types.ModuleType("tensor_cast.device")

        class DeviceProfile:  # the stand-in: only a type to the data source
            comm_grid = None

        device.DeviceProfile = DeviceProfile
        sys.modules["tensor_cast.device"] = device
    pds = importlib.import_module(
        "tensor_cast.performance_model.profiling_database.profiling_data_source")
    ids = importlib.import_module(
        "tensor_cast.performance_model.profiling_database.interpolating_data_source")
    source = importlib.import_module(
        "tensor_cast.performance_model.profiling_database.data_source")
    return types.SimpleNamespace(pds=pds, ProfilingDataSource=pds.ProfilingDataSource,
                                 InterpolatingDataSource=ids.InterpolatingDataSource,
                                 QuerySource=source.QuerySource)


class Operator:
    """A simulator operator as the data source names it (`str(func)` minus `torch.ops.`)."""

    def __init__(self, name: str) -> None:
        self.name = name

    def __str__(self) -> str:
        return self.name


@dataclass
class Probe:
    kernel_type: str
    row: int
    expected: float
    got: float | None = None
    interpolating: float | None = None
    reason: str = ""
    query: list = field(default_factory=list)

    @property
    def found(self) -> bool:
        return self.got is not None and self.got == self.expected \
            and self.interpolating == self.expected


def _rope_call(inputs: list) -> list:
    """The simulator's RoPE call behind a row: it reorders its (q, k) as the kernel's (k, q)
    and moves the head axis of 4-D ones (`_normalize_rope_inputs`), so the call is the row's
    first two slots swapped back, heads before sequence."""
    def heads_first(shape: tuple) -> tuple:
        return (shape[0], shape[2], shape[1], shape[3]) if len(shape) == 4 else shape

    (k, k_dtype), (q, q_dtype) = inputs[0], inputs[1]
    rest = [((s[0], s[1], s[3]) if len(s) == 4 and s[2] == 1 else s, d) for s, d in inputs[2:]]
    return [(heads_first(q), q_dtype), (heads_first(k), k_dtype), *rest]


def probe_row(consumer, source, kernel_type: str, row, expected: float, position: int) -> Probe:
    """Ask `source` (a ProfilingDataSource) for `row` (a row of its own frame of the file)."""
    import torch

    pds = consumer.pds
    probe = Probe(kernel_type, position, expected)
    name = f"profiling.{kernel_type}"
    mapping = source._op_mapping.get("operator_mappings", {}).get(name)
    if mapping is None:
        probe.reason = f"op_mapping.yaml has no {name}"
        return probe
    to_torch = {v: k for k, v in pds.DTYPE_MAP.items() if k is not torch.float16}
    shapes = pds._parse_shape_str(str(row.get("Input Shapes", "")))
    dtypes = pds._parse_str_list(str(row.get("Input Data Types", "")))
    count = mapping.get("tc_input_count")
    if count is not None:
        shapes = shapes[:count]
    formats = pds._parse_str_list(str(row.get("Input Formats", "")))
    inputs = []
    for i, shape in enumerate(shapes):
        dtype = to_torch.get(dtypes[i]) if i < len(dtypes) else None
        if dtype is None:
            probe.reason = f"no torch dtype the simulator maps to {dtypes[i:i + 1]}"
            return probe
        if i < len(formats) and formats[i] == "FRACTAL_NZ":  # the simulator's operand is ND
            shape = pds.fractal_nz_to_nd(shape)
        inputs.append((tuple(shape), dtype))
    if kernel_type in pds._ROPE_KERNELS and len(inputs) >= 2:
        inputs = _rope_call(inputs)
    tensors = [torch.empty(shape, dtype=dtype, device="meta") for shape, dtype in inputs]
    probe.query = [(tuple(t.shape), str(t.dtype)) for t in tensors]
    op = types.SimpleNamespace(func=Operator(name), args=tuple(tensors), kwargs={}, out=None)
    result = source.lookup(op)
    if result is None:
        probe.reason = f"miss: {source.last_miss_reason}"
        return probe
    probe.got = result.latency_us
    wrapped = consumer.InterpolatingDataSource(source).lookup(op)
    if wrapped is not None and wrapped.source == consumer.QuerySource.MEASURED:
        probe.interpolating = wrapped.latency_us
    return probe


def probe_database(consumer, database: Path) -> list[Probe]:
    """A probe of every row that has a duration (as this project reads it), in every kernel
    table of `database`."""
    from pytest_npuperf.db.columns import first_valid_duration
    from pytest_npuperf.db.database import kernel_csvs
    from pytest_npuperf.db.table import read_table

    source = consumer.ProfilingDataSource(database)
    probes = []
    for path in kernel_csvs(database):
        frame = source._load_csv(path.stem)  # the simulator's own read of the file
        for position, cells in enumerate(read_table(path).to_dict("records")):
            expected = first_valid_duration(cells)
            if expected is not None:
                probes.append(probe_row(consumer, source, path.stem, frame.iloc[position],
                                        expected, position))
    return probes


def attention_params(consumer, row) -> tuple[dict, str]:
    """The attention query (`_query_by_attn_params`) a FusedInferAttentionScore row answers,
    from its `Runtime ...` cells, requiring the phase and head layout to match; and its
    dtype."""
    pds = consumer.pds
    shapes = str(row["Input Shapes"]).strip('"')
    q = pds._parse_fia_q_shape(shapes)
    block_size = int(row["Runtime block_size"]) or None
    params = {
        "q_shape_3d": pds._normalize_fia_q_shape(q, q[-1]),
        "avg_seq_len": int(float(row["Runtime avg_seq_len"])),
        "sparse_mode": int(row["Runtime sparse_mode"]),
        "num_kv_heads": int(row["Runtime num_key_value_heads"]),
        "input_layout": str(row["Runtime input_layout"]),
        "phase": str(row["Runtime phase"]),
        "num_heads": int(row["Runtime num_heads"]),
        "block_size": block_size,
        "required_context_fields": ("phase", "sparse_mode", "num_kv_heads", "input_layout"),
    }
    return params, pds._parse_str_list(str(row["Input Data Types"]))[0]


def sparse_params(consumer, row, *, sparse: bool, kv_lengths: list[int] | None = None
                  ) -> tuple[dict, str]:
    """The runtime-attention query the simulator's DSA decomposers build
    (`_sparse_runtime_attention_params`) for the call a SparseFlashAttention (`sparse`) or
    LightningIndexer row describes, from its query shape and `Runtime ...` cells (KV lengths
    `kv_lengths` instead of the row's, for a query between rows); and its dtype."""
    import torch

    pds = consumer.pds
    q = pds._parse_fia_q_shape(str(row["Input Shapes"]).strip('"'))
    kv = kv_lengths or [int(v) for v in str(row["Runtime actual_seq_lengths_kv_values"])
                        .replace(";", ",").split(",")]
    params = pds._sparse_runtime_attention_params(
        work_tokens=q[0], work_heads=q[1], head_dim=q[2], seq_lens=torch.tensor(kv),
        avg_seq_len=None, topk=int(row["Runtime topk"]), block_size=int(row["Runtime block_size"]),
        include_sparse_block_size=sparse, kv_lengths_values=kv)
    return params, pds._parse_str_list(str(row["Input Data Types"]))[0]


def write_pre_issue9_database(directory: Path) -> Path:
    """A database as this project wrote it before it wrote for the simulator: no
    op_mapping.yaml, a scalar output as an empty cell, `DT_FLOAT`/`DT_INT64` spellings and a
    FusedInferAttentionScore file without the Runtime columns the simulator reads."""
    from pytest_npuperf.db.columns import FIA_RUNTIME_COLUMNS, contract_columns_for

    rows = {
        "Add": [(";", "FLOAT;FLOAT", "ND;ND", "", "FLOAT", "1.5"),
                ("8,16;8,16", "DT_BF16;DT_BF16", "ND;ND", "8,16", "DT_BF16", "2.5")],
        "MatMulV2": [("8,128;64,128", "DT_FLOAT;DT_FLOAT", "ND;ND", "8,64", "DT_FLOAT", "12.5")],
        "GroupedMatmul": [("4,128;2,128,64;;;;;;2;", "DT_BF16;DT_BF16;DT_UNDEFINED;DT_UNDEFINED;"
                           "DT_UNDEFINED;DT_UNDEFINED;DT_UNDEFINED;DT_INT64;DT_UNDEFINED",
                           "ND;ND;NULL;NULL;NULL;NULL;NULL;ND;NULL", "4,64", "DT_BF16", "3.0")],
        "FusedInferAttentionScore": [("4,32,128;16,128,1024;16,128,1024" + ";" * 28,
                                      "DT_BF16;DT_BF16;DT_BF16" + ";DT_UNDEFINED" * 28,
                                      "ND;ND;ND" + ";NULL" * 28, "4,32,128", "DT_BF16", "40.0")],
    }
    directory.mkdir(parents=True, exist_ok=True)
    for kernel_type, cells in rows.items():
        columns = [c for c in contract_columns_for(kernel_type) if c not in FIA_RUNTIME_COLUMNS]
        if kernel_type == "FusedInferAttentionScore":
            columns += FIA_RUNTIME_COLUMNS[:17]  # the Runtime columns written before
        lines = [",".join(columns)]
        for shapes, dtypes, formats, out_shapes, out_dtypes, duration in cells:
            row = dict.fromkeys(columns, "")
            row.update({"OP State": "dynamic", "Accelerator Core": "AI_CORE",
                        "Input Shapes": shapes, "Input Data Types": dtypes,
                        "Input Formats": formats, "Output Shapes": out_shapes,
                        "Output Data Types": out_dtypes, "Output Formats": "ND",
                        "Average Duration(us)": duration})
            lines.append(",".join(f'"{row[c]}"' if "," in row[c] else row[c] for c in columns))
        (directory / f"{kernel_type}.csv").write_text("\n".join(lines) + "\n")
    return directory
