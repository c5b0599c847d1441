"""Data movement kernels: TensorMove, Slice, PadV3, Index, GatherV2, Transpose.

The rows record operand shapes, not the small integer arguments (offsets, paddings,
permutations): those are derived from the output shape, and indices are drawn inside their
target. Except TensorMove and PadV3, these kernels read only what they output, and their
bytes say so (an embedding lookup reads T rows, not the whole table).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable

import torch

from .binding import torch_npu_call
from .case import KernelCase, TensorSlot
from .spec import KernelSpec, SameCall
from .tensors import broadcast_shape, input_tensor, random_tensor, torch_dtype

# Transpose: permutations of up to this many dims are searched for the one the output shows.
MAX_TRANSPOSE_DIMS = 8


def _output(case: KernelCase) -> tuple[int, ...]:
    out = case.output(0)
    if not out.present:
        raise case.error(f"{case.kernel_type}: the output shape is needed (it gives the "
                         f"arguments)", column="Output Shapes")
    return out.dims


def _read_written_bytes(case: KernelCase, *extra: int) -> float:
    """Bytes of a kernel that reads what it writes: twice the output, plus index slots."""
    return 2.0 * case.output(0).nbytes + sum(case.input(i).nbytes for i in extra)


class TensorMove(SameCall):
    """`dst.copy_(src)` of one dtype (a copy between dtypes is a Cast kernel).

    NPU: aten copy_ -> aclnnInplaceCopy -> TensorMove (the reference op_mapping.yaml's
    torch_npu_reference; same call on every device).
    """

    kernel_type = "TensorMove"
    bytes_exact = True  # every slot read or written once: what the kernel must move
    portable = "torch: Tensor.copy_"
    work = "0 flops; 2*numel*bytes"

    def check(self, case: KernelCase) -> None:
        super().check(case)
        out, src = case.output(0), case.input(0)
        if out.present and (out.numel != src.numel or out.dtype not in (src.dtype, "")):
            raise case.error(f"TensorMove: output {out.dims} {out.dtype} is not a same-dtype "
                             f"copy of {src.dims} {src.dtype}", column="Output Shapes")

    def build_inputs(self, case, backend, generator):
        src = self.tensor(case, 0, backend, generator)
        out = case.output(0) if case.output(0).present else case.input(0)
        # The destination in its own recorded format (a FRACTAL_NZ copy stays one).
        dst = input_tensor(TensorSlot(out.shape, case.input(0).dtype, out.format), case,
                           backend, generator)
        return {"src": src, "dst": dst}

    def portable_call(self, tensors, case) -> Callable[[], object]:
        src, dst = tensors["src"], tensors["dst"]
        source = src.view(dst.shape)
        return lambda: dst.copy_(source)


class Slice(KernelSpec):
    """`torch_npu.npu_slice(self, offsets, size) -> Tensor` (op-plugin op_plugin_functions.yaml;
    docs/zh/custom_APIs/torch_npu/(beta)torch_npu-npu_slice.md: int lists). size is the output
    shape; offsets are drawn (seeded) so that the slice lies inside the input."""

    kernel_type = "Slice"
    bytes_exact = True  # every slot read or written once: what the kernel must move
    portable = "torch: basic slicing + clone"
    work = "0 flops; 2*numel(y)*bytes"

    def check(self, case: KernelCase) -> None:
        super().check(case)
        x, out = case.input(0).dims, _output(case)
        if len(out) != len(x) or any(o > d for o, d in zip(out, x)):
            raise case.error(f"Slice: output {out} is not a slice of {x}")

    def build_inputs(self, case, backend, generator):
        x, size = case.input(0).dims, _output(case)
        offsets = [int(torch.randint(0, d - s + 1, (1,), generator=generator,
                                     device=backend.device)) for d, s in zip(x, size)]
        # Host tensors: the call takes them as int lists.
        return {"x": self.tensor(case, 0, backend, generator),
                "offsets": torch.tensor(offsets), "size": torch.tensor(size)}

    @staticmethod
    def _bounds(tensors) -> tuple[list[int], list[int]]:
        return tensors["offsets"].tolist(), tensors["size"].tolist()

    def portable_call(self, tensors, case) -> Callable[[], object]:
        x = tensors["x"]
        offsets, size = self._bounds(tensors)
        window = tuple(slice(o, o + s) for o, s in zip(offsets, size))
        return lambda: x[window].clone()

    def npu_call(self, tensors, case, backend) -> Callable[[], object]:
        offsets, size = self._bounds(tensors)
        return torch_npu_call(backend, "npu_slice", (tensors["x"], offsets, size), returns=1)

    def bytes_moved(self, case: KernelCase) -> float:
        return _read_written_bytes(case)


class PadV3(SameCall):
    """Constant padding at the end of every dim up to the output shape (negative: cropping).

    NPU: torch.nn.functional.pad(x, pad, mode="constant", value=0) -> aclnnConstantPadNd ->
    PadV3 (the reference op_mapping.yaml, verified there with msprof; same call everywhere).
    """

    kernel_type = "PadV3"
    portable = "torch.nn.functional.pad (constant)"
    work = "0 flops; (numel(x) + numel(y))*bytes"

    def check(self, case: KernelCase) -> None:
        super().check(case)
        if len(_output(case)) != len(case.input(0).dims):
            raise case.error(f"PadV3: output {_output(case)} and input {case.input(0).dims} "
                             f"differ in rank")

    def build_inputs(self, case, backend, generator):
        return {"x": self.tensor(case, 0, backend, generator)}

    def portable_call(self, tensors, case) -> Callable[[], object]:
        x, out = tensors["x"], _output(case)
        pad: list[int] = []
        for have, want in reversed(list(zip(x.shape, out))):  # F.pad lists the last dim first
            pad += [0, want - have]
        return lambda: torch.nn.functional.pad(x, pad, mode="constant", value=0.0)


class Index(SameCall):
    """`x[i0, i1, ...]`: advanced indexing of x's leading dims by the index tensors in slots
    3 and up (in range, drawn per dim).

    NPU: aten index -> aclnnIndex -> Index (the reference op_mapping.yaml; same call
    everywhere). Slots 1 and 2 (indexed sizes and strides) are the kernel's own metadata.
    """

    kernel_type = "Index"
    variadic_inputs = True
    portable = "torch: advanced indexing"
    work = "0 flops; 2*numel(y)*bytes + numel(indices)*index_bytes"

    def _index_slots(self, case: KernelCase) -> list[int]:
        return [i for i in range(3, len(case.inputs)) if case.input(i).present]

    def check(self, case: KernelCase) -> None:
        super().check(case)
        x, slots = case.input(0).dims, self._index_slots(case)
        if not slots or len(slots) > len(x):
            raise case.error(f"Index: {len(slots)} index tensor(s) for x {x}")
        shape = ()
        for i in slots:
            shape = broadcast_shape(shape, case.input(i).dims)
            if shape is None:
                raise case.error("Index: the index tensors do not broadcast")
        expected = tuple(shape) + tuple(x[len(slots):])
        if case.output(0).present and case.output(0).dims != expected:
            raise case.error(f"Index: x {x} indexed by {len(slots)} tensor(s) gives "
                             f"{expected}, not {case.output(0).dims}", column="Output Shapes")

    def build_inputs(self, case, backend, generator):
        x = self.tensor(case, 0, backend, generator)
        tensors = {"x": x}
        for dim, i in enumerate(self._index_slots(case)):
            slot = case.input(i)
            tensors[f"index{dim}"] = random_tensor(slot.dims, torch_dtype(slot.dtype, case),
                                                   backend.device, generator, high=x.shape[dim])
        return tensors

    def portable_call(self, tensors, case) -> Callable[[], object]:
        x = tensors["x"]
        index = tuple(tensors[f"index{d}"] for d in range(len(self._index_slots(case))))
        return lambda: x[index]

    def bytes_moved(self, case: KernelCase) -> float:
        return _read_written_bytes(case, *self._index_slots(case))


class GatherV2(SameCall):
    """Embedding lookup: table (V, H), token ids (T...) in [0, V) -> (T..., H).

    NPU: torch.nn.functional.embedding -> aclnnEmbedding -> GatherV2 (the reference
    op_mapping.yaml's torch_npu_reference; same call everywhere). Slot 2 is the axis (0).
    """

    streamed = ("table",)  # the catalog's x, by this spec's name

    kernel_type = "GatherV2"
    bytes_exact = True  # every slot read or written once: what the kernel must move
    portable = "torch.nn.functional.embedding"
    work = "0 flops; 2*numel(y)*bytes + numel(indices)*index_bytes"

    def check(self, case: KernelCase) -> None:
        super().check(case)
        table, ids = case.input(0).dims, case.input(1).dims
        expected = tuple(ids) + tuple(table[1:])
        if len(table) != 2 or (case.output(0).present and case.output(0).dims != expected):
            raise case.error(f"GatherV2: replays embedding lookups (axis 0 of a 2-D table): "
                             f"table {table}, ids {ids} -> {case.output(0).dims}")

    def build_inputs(self, case, backend, generator):
        ids = case.input(1)
        return {"table": self.tensor(case, 0, backend, generator),
                "ids": random_tensor(ids.dims, torch_dtype(ids.dtype, case), backend.device,
                                     generator, high=case.input(0).dims[0])}

    def portable_call(self, tensors, case) -> Callable[[], object]:
        table, ids = tensors["table"], tensors["ids"]
        return lambda: torch.nn.functional.embedding(ids, table)

    def bytes_moved(self, case: KernelCase) -> float:
        return _read_written_bytes(case, 1)


class Transpose(SameCall):
    """`x.permute(perm).contiguous()`, perm being the first non-identity permutation that
    turns the input shape into the output shape.

    NPU: the same call; a non-contiguous permute made contiguous launches Transpose (the
    reference op_mapping.yaml records Transpose/TransposeAiCore from layout changes).
    """

    kernel_type = "Transpose"
    bytes_exact = True  # every slot read or written once: what the kernel must move
    portable = "torch: permute + contiguous"
    work = "0 flops; 2*numel*bytes"

    def perm(self, case: KernelCase) -> tuple[int, ...]:
        x, out = case.input(0).dims, _output(case)
        if len(x) > MAX_TRANSPOSE_DIMS or sorted(x) != sorted(out):
            raise case.error(f"Transpose: output {out} is not a permutation of {x}")
        identity = tuple(range(len(x)))
        for perm in itertools.permutations(identity):
            if perm != identity and tuple(x[p] for p in perm) == tuple(out):
                return perm
        raise case.error(f"Transpose: {x} -> {out} moves no dim")

    def check(self, case: KernelCase) -> None:
        super().check(case)
        self.perm(case)

    def build_inputs(self, case, backend, generator):
        return {"x": self.tensor(case, 0, backend, generator)}

    def portable_call(self, tensors, case) -> Callable[[], object]:
        x, perm = tensors["x"], self.perm(case)
        return lambda: x.permute(perm).contiguous()

