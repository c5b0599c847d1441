"""KV-cache writes: ReshapeAndCacheNdKernel (paged K/V scatter), KvRmsNormRopeCache (MLA latent
norm + rope + cache write) and ScatterNdUpdate (row scatter into a cache).

Every write targets distinct slots (a permutation of the cache's slots), as a scheduler's
slot mapping does; the caches themselves start as random data, never uninitialised memory.
These kernels touch only the slots they write, so their bytes are those rows, not the cache.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from ..db.shapes import dtype_bytes
from .binding import torch_npu_call
from .case import KernelCase
from .functional import deinterleave, distinct_slots, rms_normalize, rope
from .rope import rotary_table
from .spec import KernelSpec
from .tensors import torch_dtype

MLA_NORM_EPS = 1e-6  # DeepSeek-V3's kv_a_layernorm eps, what vllm-ascend passes


def _slots(case: KernelCase, index: int, count: int, total: int, backend,
           generator: torch.Generator) -> torch.Tensor:
    """Slot `index` filled with `count` distinct cache slots out of `total`, in its dtype."""
    if count > total:
        raise case.error(f"{case.kernel_type}: {count} writes do not fit a cache of {total} "
                         f"slots")
    dtype = torch_dtype(case.input(index).dtype, case)
    return distinct_slots(count, total, generator, backend.device).to(dtype).reshape(
        case.input(index).dims)


class ReshapeAndCacheNd(KernelSpec):
    """key_cache.view(-1, KV, D)[slot_mapping] = key, likewise value.

    NPU: `torch_npu._npu_reshape_and_cache(key, value, key_cache, value_cache, slot_indices)
    -> ()` (the ATB ReshapeCacheOperation; op-plugin op_plugin/ops/atb/ReshapeAndCachAtb.cpp,
    called with these keywords by vllm-ascend's vllm_ascend/device/device_op.py). key/value
    (T, KV, D), caches (blocks, block_size, KV, D), slot_indices (T,) int32.
    """

    kernel_type = "ReshapeAndCacheNdKernel"
    bytes_exact = True  # every slot read or written once: what the kernel must move
    portable = "torch: index_copy_ of key and value rows into the flattened caches"
    work = "0 flops; 4*T*KV*D*bytes + T*4 (the written slots, not the caches)"

    def check(self, case: KernelCase) -> None:
        super().check(case)
        key, value, key_cache, value_cache, slots = (case.input(i).dims for i in range(5))
        if len(key) != 3 or value != key or len(key_cache) != 4 or value_cache != key_cache:
            raise case.error(f"ReshapeAndCacheNdKernel: expected key/value (T, KV, D) and "
                             f"caches (blocks, block_size, KV, D), got {key}, {value}, "
                             f"{key_cache}, {value_cache}")
        if key_cache[2:] != key[1:] or slots != key[:1]:
            raise case.error(f"ReshapeAndCacheNdKernel: caches {key_cache} do not hold rows "
                             f"of key {key}, or slot_mapping {slots} is not one per token")
        if any(case.input(i).format == "FRACTAL_NZ" for i in (2, 3)):
            raise case.error("ReshapeAndCacheNdKernel: FRACTAL_NZ caches are not replayed",
                             column="Input Formats")

    def build_inputs(self, case, backend, generator):
        names = ("key", "value", "key_cache", "value_cache")
        tensors = {name: self.tensor(case, i, backend, generator) for i, name in enumerate(names)}
        blocks, block_size = case.input(2).dims[:2]
        tensors["slot_mapping"] = _slots(case, 4, case.input(0).dims[0], blocks * block_size,
                                         backend, generator)
        return tensors

    def portable_call(self, tensors, case) -> Callable[[], object]:
        key, value, slots = tensors["key"], tensors["value"], tensors["slot_mapping"].long()
        key_rows = tensors["key_cache"].view(-1, *key.shape[1:])
        value_rows = tensors["value_cache"].view(-1, *value.shape[1:])

        def reshape_and_cache():
            key_rows.index_copy_(0, slots, key)
            value_rows.index_copy_(0, slots, value)
        return reshape_and_cache

    def npu_call(self, tensors, case, backend) -> Callable[[], object]:
        t = tensors
        # An ATB operator (`-> ()`: it writes the caches), torch.ops.atb behind torch_npu.
        return torch_npu_call(backend, "_npu_reshape_and_cache", kwargs=dict(
            key=t["key"], value=t["value"], key_cache=t["key_cache"],
            value_cache=t["value_cache"], slot_indices=t["slot_mapping"]),
            returns=0, namespace="atb")

    def results(self, returned, tensors, case):
        return tensors["key_cache"], tensors["value_cache"]

    def bytes_moved(self, case: KernelCase) -> float:
        key = case.input(0)
        return 4.0 * key.nbytes + case.input(4).nbytes


class KvRmsNormRopeCache(KernelSpec):
    """MLA's latent KV write: kv (B, 1, S, C + R) splits into c_kv (C) and k_rope (R);
    c_kv = RMSNorm(c_kv) * gamma, k_rope = interleaved RoPE(k_rope, cos, sin); both are
    written to their paged caches at `index` (one global slot per token).

    NPU: `torch_npu.npu_kv_rmsnorm_rope_cache(kv, gamma, cos, sin, index, k_cache, ckv_cache,
    *, k_rope_scale=None, c_kv_scale=None, k_rope_offset=None, c_kv_offset=None,
    epsilon=1e-5, cache_mode='Norm', is_output_kv=False) -> (k_cache, ckv_cache, k_rope, c_kv)`
    (op-plugin op_plugin_functions.yaml and docs/zh/custom_APIs/torch_npu/
    torch_npu-npu_kv_rmsnorm_rope_cache.md). Replayed as vllm-ascend's MLA calls it
    (vllm_ascend/attention/mla_v1.py): cache_mode "PA", caches (blocks, block_size, 1, R|C),
    is_output_kv when the row records the k_rope and c_kv outputs. Non-quantised only (the
    scale slots empty); the NPU accepts C = 512, R = 64 only.
    """

    streamed = ("gamma", "k_cache", "ckv_cache")  # the catalog's, by this spec's names

    kernel_type = "KvRmsNormRopeCache"
    portable = "torch: float32 RMS norm, interleaved RoPE, index_copy_ into the caches"
    work = "7*T*(C+R) flops (T = B*S); (3*T*(C+R) + 2*T*R + C)*bytes + 8*T (+ 2*T*(C+R)*bytes " \
           "with the outputs)"

    def _dims(self, case: KernelCase) -> tuple[int, int, int]:
        """(tokens, C, R) of the row."""
        kv, gamma = case.input(0).dims, case.input(1).dims
        rope_dim = case.input(2).dims[-1:]
        if len(kv) != 4 or len(gamma) != 1 or not rope_dim:
            raise case.error(f"KvRmsNormRopeCache: expected kv (B, 1, S, C+R), gamma (C,) and "
                             f"cos (B, 1, S, R), got {kv}, {gamma}, {case.input(2).dims}")
        return kv[0] * kv[1] * kv[2], gamma[0], rope_dim[0]

    def check(self, case: KernelCase) -> None:
        super().check(case)
        tokens, c, r = self._dims(case)
        kv, cos, sin, index = (case.input(i).dims for i in (0, 2, 3, 4))
        k_cache, ckv_cache = case.input(5).dims, case.input(6).dims
        if kv[-1] != c + r or cos != sin or cos[:-1] != kv[:-1] or r % 2:
            raise case.error(f"KvRmsNormRopeCache: kv {kv} is not C {c} + R {r} wide, or cos "
                             f"{cos} / sin {sin} do not match it")
        if len(index) != 1 or index[0] != tokens:
            raise case.error(f"KvRmsNormRopeCache: index {index} is not one slot per token (the "
                             f"paged 'PA' layout; the 'Norm' layout is not replayed)")
        if (len(k_cache) != 4 or len(ckv_cache) != 4 or k_cache[-1] != r or ckv_cache[-1] != c
                or k_cache[:3] != ckv_cache[:3] or k_cache[2] != 1):
            raise case.error(f"KvRmsNormRopeCache: caches {k_cache}, {ckv_cache} are not "
                             f"(blocks, block_size, 1, R) and (blocks, block_size, 1, C)")
        if any(case.input(i).present for i in range(7, 11)):
            raise case.error("KvRmsNormRopeCache: quantised caches (scale / offset slots) are "
                             "not replayed")

    def _outputs_kv(self, case: KernelCase) -> bool:
        return case.output(2).present and case.output(3).present

    def build_inputs(self, case, backend, generator):
        tokens, _, _ = self._dims(case)
        kv = self.tensor(case, 0, backend, generator)
        cos, sin = rotary_table(case.input(2).dims, torch_dtype(case.input(2).dtype, case),
                                backend.device, generator)
        blocks, block_size = case.input(5).dims[:2]
        return {"kv": kv, "gamma": self.tensor(case, 1, backend, generator), "cos": cos,
                "sin": sin, "index": _slots(case, 4, tokens, blocks * block_size, backend,
                                            generator),
                "k_cache": self.tensor(case, 5, backend, generator),
                "ckv_cache": self.tensor(case, 6, backend, generator)}

    def portable_call(self, tensors, case) -> Callable[[], object]:
        _, c, r = self._dims(case)
        kv, gamma, cos, sin = (tensors[n] for n in ("kv", "gamma", "cos", "sin"))
        index = tensors["index"].long()
        k_cache, ckv_cache = tensors["k_cache"], tensors["ckv_cache"]
        k_rows, ckv_rows = k_cache.view(-1, r), ckv_cache.view(-1, c)
        output_kv = self._outputs_kv(case)

        def kv_rmsnorm_rope_cache():
            normed, _ = rms_normalize(kv[..., :c], MLA_NORM_EPS)
            c_kv = (normed * gamma.to(normed.dtype)).to(kv.dtype)
            k_rope = rope(deinterleave(kv[..., c:]), cos, sin).to(kv.dtype)
            k_rows.index_copy_(0, index, k_rope.reshape(-1, r).to(k_cache.dtype))
            ckv_rows.index_copy_(0, index, c_kv.reshape(-1, c).to(ckv_cache.dtype))
            if output_kv:
                return k_cache, ckv_cache, k_rope, c_kv
            return k_cache, ckv_cache
        return kv_rmsnorm_rope_cache

    def npu_call(self, tensors, case, backend) -> Callable[[], object]:
        t = tensors
        return torch_npu_call(backend, "npu_kv_rmsnorm_rope_cache",
                              (t["kv"], t["gamma"], t["cos"], t["sin"], t["index"],
                               t["k_cache"], t["ckv_cache"]),
                              {"epsilon": MLA_NORM_EPS, "cache_mode": "PA",
                               "is_output_kv": self._outputs_kv(case)}, returns=4)

    def results(self, returned, tensors, case):
        # Without is_output_kv the operator's last two outputs carry nothing to compare.
        outputs = super().results(returned, tensors, case)
        return outputs if self._outputs_kv(case) else outputs[:2]

    def flops(self, case: KernelCase) -> float:
        tokens, c, r = self._dims(case)
        return 7.0 * tokens * (c + r)

    def bytes_moved(self, case: KernelCase) -> float:
        tokens, c, r = self._dims(case)
        element = dtype_bytes(case.input(0).dtype)
        moved = sum(case.input(i).nbytes for i in range(5))  # kv, gamma, cos, sin, index
        moved += tokens * (r * dtype_bytes(case.input(5).dtype)
                           + c * dtype_bytes(case.input(6).dtype))
        if self._outputs_kv(case):
            moved += tokens * (c + r) * element
        return moved


class ScatterNdUpdate(KernelSpec):
    """var[indices[i]] = updates[i]: indices (N, k) address the first k dims of var.

    NPU: `torch_npu.npu_scatter_nd_update_(input, indices, updates) -> Tensor` (in place; op-plugin
    op_plugin_functions.yaml, docs/zh/custom_APIs/torch_npu/torch_npu-npu_scatter_nd_update_.md:
    updates = indices.shape[:-1] + input.shape[k:]), as vllm-ascend's sparse attention writes its
    cache (vllm_ascend/attention/sfa_v1.py: cache.view(-1, D), slot_mapping.view(-1, 1)).
    """

    kernel_type = "ScatterNdUpdate"
    portable = "torch: index_put_ of the update rows"
    work = "0 flops; 2*numel(updates)*bytes + numel(indices)*index_bytes"

    def check(self, case: KernelCase) -> None:
        super().check(case)
        var, indices, updates = (case.input(i).dims for i in range(3))
        k = indices[-1] if indices else 0
        if len(indices) < 2 or not 1 <= k <= len(var) or \
                updates != tuple(indices[:-1]) + tuple(var[k:]):
            raise case.error(f"ScatterNdUpdate: updates {updates} is not indices {indices} "
                             f"without its last dim + var {var} after the indexed dims")

    def build_inputs(self, case, backend, generator):
        var, indices = case.input(0).dims, case.input(1).dims
        k, count = indices[-1], case.input(1).numel // indices[-1]
        total = 1
        for dim in var[:k]:
            total *= dim
        flat = distinct_slots(count, total, generator, backend.device) if count <= total else None
        if flat is None:
            raise case.error(f"ScatterNdUpdate: {count} distinct rows do not fit var {var}")
        coords = torch.stack(torch.unravel_index(flat, tuple(var[:k])), dim=-1)
        return {"var": self.tensor(case, 0, backend, generator),
                "indices": coords.to(torch_dtype(case.input(1).dtype, case)).reshape(indices),
                "updates": self.tensor(case, 2, backend, generator)}

    def portable_call(self, tensors, case) -> Callable[[], object]:
        var, updates = tensors["var"], tensors["updates"]
        index = tuple(tensors["indices"].long().unbind(-1))
        return lambda: var.index_put_(index, updates)

    def npu_call(self, tensors, case, backend) -> Callable[[], object]:
        return torch_npu_call(backend, "npu_scatter_nd_update_",
                              (tensors["var"], tensors["indices"], tensors["updates"]),
                              returns=1)

    def bytes_moved(self, case: KernelCase) -> float:
        return 2.0 * case.input(2).nbytes + case.input(1).nbytes
