"""KV-cache writes: ReshapeAndCacheNdKernel, KvRmsNormRopeCache, ScatterNdUpdate. Slot
mappings are permutations of valid slots; the written rows are checked slot by slot."""

from __future__ import annotations

import math

import pytest
import torch

from pytest_npuperf.db.errors import CellError
from pytest_npuperf.kernels.case import case_from_row
from pytest_npuperf.kernels.registry import spec_for
from tests import npu_standin
from tests.test_kernels_specs import prepare, row

# Fixtures: the stand-in NPU operators (tests/npu_standin.py).
npu = npu_standin.npu

RESHAPE = row("6,2,4;6,2,4;3,4,2,4;3,4,2,4;6", "DT_FLOAT;DT_FLOAT;DT_FLOAT;DT_FLOAT;INT32",
              "ND;ND;ND;ND;ND", "3,4,2,4;3,4,2,4", "DT_FLOAT;DT_FLOAT")
# C = 16, R = 8; the four scale/offset slots and the reserved one are empty.
_KV_INPUTS = ("5,1,1,24;16;5,1,1,8;5,1,1,8;5;2,4,1,8;2,4,1,16;;;;;",
              "DT_FLOAT;DT_FLOAT;DT_FLOAT;DT_FLOAT;DT_INT64;DT_FLOAT;DT_FLOAT;" + ";".join(
                  ["DT_UNDEFINED"] * 5), "ND;ND;ND;ND;ND;ND;ND;NULL;NULL;NULL;NULL;NULL")
KV_PREFILL = row(*_KV_INPUTS, "2,4,1,8;2,4,1,16;5,1,1,8;5,1,1,16",
                 "DT_FLOAT;DT_FLOAT;DT_FLOAT;DT_FLOAT")
KV_DECODE = row(*_KV_INPUTS, "2,4,1,8;2,4,1,16;;", "DT_FLOAT;DT_FLOAT;DT_UNDEFINED;DT_UNDEFINED")
SCATTER = row("12,4;5,1;5,4", "DT_BF16;DT_INT32;DT_BF16", "ND;ND;ND", "12,4", "DT_BF16")


def test_reshape_and_cache_writes_each_token_into_its_own_slot():
    _, prepared = prepare("ReshapeAndCacheNdKernel", RESHAPE)
    t = prepared.tensors
    slots = t["slot_mapping"]
    assert slots.dtype == torch.int32 and len(set(slots.tolist())) == 6
    assert int(slots.min()) >= 0 and int(slots.max()) < 3 * 4
    before = {name: t[name].clone() for name in ("key_cache", "value_cache")}
    assert prepared.call() is None
    for name, source in (("key_cache", "key"), ("value_cache", "value")):
        cache = t[name]
        for slot in range(12):
            block, offset = divmod(slot, 4)
            if slot in slots.tolist():
                token = slots.tolist().index(slot)
                assert torch.equal(cache[block, offset], t[source][token])
            else:  # untouched
                assert torch.equal(cache[block, offset], before[name][block, offset])
    # Bytes are the written rows (read and write), not the whole caches.
    assert prepared.bytes == 4 * 6 * 2 * 4 * 4 + 6 * 4


def test_reshape_and_cache_rejects_caches_of_other_rows():
    with pytest.raises(CellError, match="do not hold rows"):
        prepare("ReshapeAndCacheNdKernel", row(
            "6,2,4;6,2,4;3,4,1,4;3,4,1,4;6", "DT_BF16;DT_BF16;DT_BF16;DT_BF16;INT32",
            "ND;ND;ND;ND;ND", "3,4,1,4;3,4,1,4", "DT_BF16;DT_BF16"))


def test_reshape_and_cache_npu_call_takes_the_documented_keywords(npu):
    backend, calls = npu
    case = case_from_row("ReshapeAndCacheNdKernel", RESHAPE)
    prepared = spec_for("ReshapeAndCacheNdKernel").prepare(case, backend)
    prepared.call()
    args = calls.of("_npu_reshape_and_cache")
    assert args["slot_indices"] is prepared.tensors["slot_mapping"]
    assert args["key_cache"] is prepared.tensors["key_cache"]


def kv_reference(t, c=16, r=8, eps=1e-6):
    """Per token in float64: RMS-normed c_kv, interleaved-RoPE k_rope (documented formula)."""
    c_kv, k_rope = [], []
    for token, cos, sin in zip(t["kv"].double().reshape(-1, c + r).tolist(),
                               t["cos"].double().reshape(-1, r).tolist(),
                               t["sin"].double().reshape(-1, r).tolist()):
        latent, rope_in = token[:c], token[c:]
        rstd = 1 / math.sqrt(sum(e * e for e in latent) / c + eps)
        c_kv.append([e * rstd * g for e, g in zip(latent, t["gamma"].double().tolist())])
        q = rope_in[0::2] + rope_in[1::2]
        rotated = [-q[i + r // 2] if i < r // 2 else q[i - r // 2] for i in range(r)]
        k_rope.append([q[i] * cos[i] + rotated[i] * sin[i] for i in range(r)])
    return torch.tensor(c_kv, dtype=torch.float64), torch.tensor(k_rope, dtype=torch.float64)


@pytest.mark.parametrize("cells, outputs", [(KV_PREFILL, 4), (KV_DECODE, 2)])
def test_kv_rmsnorm_rope_cache_writes_normed_and_rotated_rows_at_their_slots(cells, outputs):
    case, prepared = prepare("KvRmsNormRopeCache", cells)
    t = prepared.tensors
    index = t["index"].tolist()
    assert t["index"].dtype == torch.int64 and len(set(index)) == 5 and max(index) < 8
    returned = prepared.call()
    assert len(returned) == outputs
    want_c_kv, want_k_rope = kv_reference(t)
    k_rows, ckv_rows = t["k_cache"].reshape(-1, 8), t["ckv_cache"].reshape(-1, 16)
    torch.testing.assert_close(ckv_rows[index].double(), want_c_kv, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(k_rows[index].double(), want_k_rope, rtol=1e-5, atol=1e-5)
    if outputs == 4:
        torch.testing.assert_close(returned[3].reshape(-1, 16).double(), want_c_kv, rtol=1e-5,
                                   atol=1e-5)
        assert tuple(returned[2].shape) == (5, 1, 1, 8)
    assert len(spec_for("KvRmsNormRopeCache").results(returned, t, case)) == outputs


def test_kv_rmsnorm_rope_cache_refuses_quantised_rows():
    cells = dict(KV_PREFILL)
    cells["Input Shapes"] = cells["Input Shapes"].replace(";;;;;", ";8;;;;")
    cells["Input Data Types"] = cells["Input Data Types"].replace(
        "DT_UNDEFINED;", "DT_FLOAT;", 1)
    with pytest.raises(CellError, match="quantised"):
        prepare("KvRmsNormRopeCache", cells)


@pytest.mark.parametrize("cells, output_kv", [(KV_PREFILL, True), (KV_DECODE, False)])
def test_kv_rmsnorm_rope_cache_npu_call_is_vllm_ascends(npu, cells, output_kv):
    backend, calls = npu
    case = case_from_row("KvRmsNormRopeCache", cells)
    prepared = spec_for("KvRmsNormRopeCache").prepare(case, backend)
    prepared.call()
    args = calls.of("npu_kv_rmsnorm_rope_cache")
    assert args["cache_mode"] == "PA" and args["is_output_kv"] is output_kv
    assert args["epsilon"] == pytest.approx(1e-6) and args["k_rope_scale"] is None
    assert args["index"].dtype == torch.int64 and args["k_cache"] is prepared.tensors["k_cache"]


def test_scatter_nd_update_writes_updates_at_distinct_rows():
    _, prepared = prepare("ScatterNdUpdate", SCATTER)
    t = prepared.tensors
    before = t["var"].clone()
    rows = t["indices"][:, 0].tolist()
    assert t["indices"].dtype == torch.int32 and len(set(rows)) == 5 and max(rows) < 12
    out = prepared.call()
    assert out is t["var"]
    for i in range(12):
        want = t["updates"][rows.index(i)] if i in rows else before[i]
        assert torch.equal(out[i], want)


def test_scatter_nd_update_checks_the_update_shape():
    with pytest.raises(CellError, match="updates"):
        prepare("ScatterNdUpdate", row("12,4;5,1;5,3", "DT_BF16;DT_INT32;DT_BF16", "ND;ND;ND",
                                       "12,4", "DT_BF16"))


def test_scatter_nd_update_npu_call_is_in_place(npu):
    backend, calls = npu
    case = case_from_row("ScatterNdUpdate", SCATTER)
    prepared = spec_for("ScatterNdUpdate").prepare(case, backend)
    assert prepared.call() is prepared.tensors["var"]
    args = calls.of("npu_scatter_nd_update_")
    assert args["self"] is prepared.tensors["var"] and args["indices"].shape == (5, 1)
