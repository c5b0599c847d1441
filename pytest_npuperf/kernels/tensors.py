"""Building valid input tensors on the device from a row's slots.

Data is random but valid: normal floats (no NaN/Inf, no uninitialised memory), integers in a
range the kernel accepts, indices inside their target. Generation is seeded per case so a
replay is repeatable.
"""

from __future__ import annotations

import zlib
from pathlib import PurePath

import torch

from ..db.shapes import normalize_dtype, nz_to_nd
from .case import KernelCase, TensorSlot
from .random_pool import poolable, pooled

TORCH_DTYPES: dict[str, torch.dtype] = {
    "DT_FLOAT": torch.float32, "DT_FLOAT16": torch.float16, "DT_BF16": torch.bfloat16,
    "DT_DOUBLE": torch.float64, "DT_INT8": torch.int8, "DT_UINT8": torch.uint8,
    "DT_INT16": torch.int16, "DT_INT32": torch.int32, "DT_INT64": torch.int64,
    "DT_BOOL": torch.bool, "DT_COMPLEX64": torch.complex64,
}
for _name, _attr in (("DT_FLOAT8_E4M3", "float8_e4m3fn"), ("DT_FLOAT8_E5M2", "float8_e5m2"),
                     ("DT_UINT16", "uint16"), ("DT_UINT32", "uint32"), ("DT_UINT64", "uint64")):
    if hasattr(torch, _attr):
        TORCH_DTYPES[_name] = getattr(torch, _attr)


def torch_dtype(dtype: str, case: KernelCase | None = None,
                column: str = "Input Data Types") -> torch.dtype:
    name = normalize_dtype(dtype)
    try:
        return TORCH_DTYPES[name]
    except KeyError:
        message = f"dtype {dtype!r} cannot be replayed (no torch equivalent)"
        raise (case.error(message, column) if case else ValueError(message)) from None


def case_seed(case: KernelCase) -> int:
    """Same row, same data, on any machine: the file's name, not its path, is in the key."""
    key = f"{case.kernel_type}|{PurePath(case.file).name}|{case.inputs}"
    return zlib.crc32(key.encode())


def generator_for(case: KernelCase, device: torch.device) -> torch.Generator:
    gen = torch.Generator(device=device)
    gen.manual_seed(case_seed(case))
    return gen


def random_tensor(shape: tuple[int, ...], dtype: torch.dtype, device: torch.device,
                  generator: torch.Generator, *, low: int = 0, high: int = 8,
                  scale: float = 1.0) -> torch.Tensor:
    """Valid data of `dtype`: N(0, scale^2) floats, integers in [low, high), random bools
    (on a CPU copied from a pool of random values: random_pool.py)."""
    if poolable(dtype, torch.device(device)):
        if scale == 1.0 or not dtype.is_floating_point:
            return pooled(shape, dtype, generator, low=low, high=high)
        return pooled(shape, torch.float32, generator).mul_(scale).to(dtype)
    if dtype.is_floating_point or dtype.is_complex:
        base = torch.randn(shape, dtype=torch.float32, device=device, generator=generator)
        if scale != 1.0:
            base.mul_(scale)
        return base.to(dtype)
    if dtype == torch.bool:
        return torch.randint(0, 2, shape, device=device, generator=generator).bool()
    return torch.randint(low, high, shape, dtype=dtype, device=device, generator=generator)


def broadcast_shape(a: tuple[int, ...], b: tuple[int, ...]) -> tuple[int, ...] | None:
    """The broadcast of two shapes (numpy rules), None when they do not broadcast.

    Plain Python: torch.broadcast_shapes can pull in sympy on first use, seconds at import.
    """
    out = []
    for x, y in zip(reversed((1,) * (len(b) - len(a)) + tuple(a)),
                    reversed((1,) * (len(a) - len(b)) + tuple(b))):
        if x != y and 1 not in (x, y):
            return None
        out.append(max(x, y) if 0 not in (x, y) else 0)
    return tuple(reversed(out))


def nd_shape(slot: TensorSlot) -> tuple[int, ...]:
    """The logical (ND) shape of a slot; FRACTAL_NZ slots are stored blocked."""
    if slot.format == "FRACTAL_NZ":
        return tuple(nz_to_nd(slot.shape) or ())
    return slot.dims


def input_tensor(slot: TensorSlot, case: KernelCase, backend, generator: torch.Generator,
                 **kwargs) -> torch.Tensor:
    """The tensor for one slot, on the backend's device, in the slot's storage format."""
    return shaped_input(slot, nd_shape(slot), case, backend, generator, **kwargs)


def shaped_input(slot: TensorSlot, dims: tuple[int, ...], case: KernelCase, backend,
                 generator: torch.Generator, **kwargs) -> torch.Tensor:
    """Data of `dims` in the slot's dtype, then cast to its storage format: a GEMM weight
    whose FRACTAL_NZ slot is read transposed is built in the orientation the kernel reads,
    never passed as a transposed view of an NZ tensor (what a model passes is the weight made
    contiguous first, then cast: vllm-ascend's w8a8 process_weights_after_loading)."""
    tensor = random_tensor(dims, torch_dtype(slot.dtype, case), backend.device, generator,
                           **kwargs)
    return backend.to_format(tensor, slot.format)


def strided_input(slot: TensorSlot, strides: tuple[int, ...], case: KernelCase, backend,
                  generator: torch.Generator, **kwargs) -> torch.Tensor:
    """A view of `slot`'s dims with the model's strides (a transposed, broadcast or
    expanded view) over random storage just large enough to hold it."""
    dims = slot.dims
    span = 1 + sum((d - 1) * s for d, s in zip(dims, strides) if d > 0)
    if any(d == 0 for d in dims):
        span = 0
    storage = random_tensor((span,), torch_dtype(slot.dtype, case), backend.device, generator,
                            **kwargs)
    return storage.as_strided(dims, strides)
