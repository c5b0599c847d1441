"""The collectives: what each one measures, where it is stored, how its bandwidth is counted.

`message_bytes` is what docs/format.md §7 says for each op (per rank): all_reduce the tensor,
all_gather the per-rank input, reduce_scatter the per-rank output, all_to_all the per-rank send
buffer (equal splits), broadcast the buffer.

Bandwidths (GB/s = 1e9 bytes/s). `bandwidth_gbps` is the contract's algorithm bandwidth,
`message_bytes / time`. `busbw_gbps` is nccl-tests' bus bandwidth (doc/PERFORMANCE.md and the
`*GetBw` functions of src/*.cu in NVIDIA/nccl-tests): nccl-tests' algbw `S / t` times 2(n-1)/n
for all_reduce, (n-1)/n for all_gather, reduce_scatter and all_to_all, 1 for broadcast, where
nccl-tests' `S` is the whole buffer: n x message_bytes for all_gather and reduce_scatter (their
size column is the gathered / scattered array), message_bytes for the others. As factors on
`message_bytes / t`: 2(n-1)/n, n-1, n-1, (n-1)/n, 1.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from ..db.shapes import normalize_dtype


@dataclass(frozen=True)
class CommOp:
    name: str  # torch.distributed name, case id prefix, marker
    table: str  # file stem in <DEVICE>/hccl/<version>/
    reduces: bool  # a sum over ranks (the correctness pattern must stay exact)
    in_chunks: int  # input elements / message elements: 0 means n (one chunk per rank)
    out_chunks: int  # output elements / message elements (0: n); -1: in place

    def busbw_factor(self, n: int) -> float:
        if n < 1:
            raise ValueError(f"a group of {n} ranks")
        if self.name == "all_reduce":
            return 2 * (n - 1) / n
        if self.name in ("all_gather", "reduce_scatter"):
            return float(n - 1)
        if self.name == "all_to_all":
            return (n - 1) / n
        return 1.0

    @property
    def file_name(self) -> str:
        return f"{self.table}.csv"


OPS: dict[str, CommOp] = {op.name: op for op in (
    CommOp("all_reduce", "hcom_allReduce_", True, 1, -1),
    CommOp("all_gather", "hcom_allGather_", False, 1, 0),
    CommOp("reduce_scatter", "hcom_reduceScatter_", True, 0, 1),
    CommOp("all_to_all", "hcom_alltoallv_", False, 1, 1),
    CommOp("broadcast", "hcom_broadcast_", False, 1, -1),
)}
OP_NAMES: tuple[str, ...] = tuple(OPS)
# Tables real databases hold, by file name (hcom_alltoall_ too: docs/format.md §1).
TABLE_OPS: dict[str, str] = {op.file_name: op.name for op in OPS.values()}
TABLE_OPS["hcom_alltoall_.csv"] = "all_to_all"
_OP_ALIASES = {"allreduce": "all_reduce", "allgather": "all_gather",
               "reducescatter": "reduce_scatter", "alltoall": "all_to_all",
               "alltoallv": "all_to_all", "all_to_all_single": "all_to_all", "bcast": "broadcast"}


def op_named(name: str) -> CommOp:
    key = str(name).strip().lower().replace("-", "_")
    key = _OP_ALIASES.get(key.replace("_", ""), key)
    if key not in OPS:
        raise ValueError(f"unknown collective {name!r}; known: {', '.join(OP_NAMES)}")
    return OPS[key]


# The dtypes of docs/format.md §7, and the fp8 kinds (known tokens, docs/format.md §3) where a
# backend has them. Value: (bytes per element, torch dtype attribute).
DTYPES: dict[str, tuple[int, str]] = {
    "DT_BF16": (2, "bfloat16"), "DT_FLOAT16": (2, "float16"), "DT_FLOAT": (4, "float32"),
    "DT_INT8": (1, "int8"), "DT_FLOAT8_E4M3": (1, "float8_e4m3fn"),
    "DT_FLOAT8_E5M2": (1, "float8_e5m2"),
}


def dtype_named(token: str) -> str:
    """`bf16`, `BF16`, `DT_BF16`, `torch.bfloat16` -> `DT_BF16`."""
    name = normalize_dtype(str(token))
    if name not in DTYPES:
        known = ", ".join(d.removeprefix("DT_") for d in DTYPES)
        raise ValueError(f"unsupported collective dtype {token!r}; known: {known}")
    return name


def dtype_label(dtype: str) -> str:
    return dtype.removeprefix("DT_")


_SIZE = re.compile(r"^\s*(\d+)\s*([KMGT]?)(?:I?B)?\s*$", re.IGNORECASE)
_UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}


def parse_size(text: str) -> int:
    """`1024`, `1K`, `1KiB`, `16MiB`, `2G` -> bytes. Units are binary (K = 1024), as in
    nccl-tests' -b/-e."""
    match = _SIZE.match(str(text))
    if not match:
        raise ValueError(f"{text!r} is not a size (e.g. 1024, 64K, 16MiB, 1G)")
    value = int(match.group(1)) * _UNITS[match.group(2).upper()]
    if value < 1:
        raise ValueError(f"{text!r}: a size must be at least 1 byte")
    return value


def size_label(nbytes: int) -> str:
    """The largest binary unit that divides the size exactly: 16MiB, 1536B, 3KiB."""
    for unit, factor in (("TiB", 1 << 40), ("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if nbytes >= factor and nbytes % factor == 0:
            return f"{nbytes // factor}{unit}"
    return f"{nbytes}B"
