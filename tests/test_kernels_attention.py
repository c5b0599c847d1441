"""Attention replays (FusedInferAttentionScore, RINGMLAPrefillBF16Kernel, LightningIndexer,
SparseFlashAttention): outputs against float64 loops over sequences, heads and the block
table; the NPU calls against the upstream schemas of each supported stack (tests/npu_standin.py)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from pytest_npuperf.db.errors import CellError
from pytest_npuperf.kernels import catalog, sparse_attention
from pytest_npuperf.kernels import spec as spec_module
from pytest_npuperf.kernels.binding import BindError
from tests.kernel_rows import f64, prepare, row, slots
from tests.npu_standin import EMBEDDED, NEWEST, npu_backend, only_call

F32, BF16, I8, I32, I64 = "DT_FLOAT", "DT_BF16", "DT_INT8", "DT_INT32", "DT_INT64"
MASK = ((2048, 2048), I8)
FIA = catalog.FIA_INPUT_SLOTS


# -- float64 references -----------------------------------------------------------------------
def paged_tokens(cache: np.ndarray, table: np.ndarray, b: int, length: int, layout: str
                 ) -> np.ndarray:
    """(length, N, D) tokens of sequence b, one table lookup per token."""
    block_size = cache.shape[1] if layout == "BnBsH" else cache.shape[2]
    rows = []
    for j in range(length):
        block, offset = table[b, j // block_size], j % block_size
        if layout == "BnBsH":
            rows.append(cache[block, offset].reshape(-1, cache.shape[-1])
                        if cache.ndim == 4 else cache[block, offset])
        else:
            rows.append(cache[block, :, offset, :])
    return np.stack(rows)


def attend(q, k, v, scale, causal, q_rope=None, k_rope=None):
    """q (S, N, D), k/v (L, N_kv, D): out (S, N, Dv) and lse (S, N)."""
    s_len, heads = q.shape[:2]
    length, kv_heads = k.shape[:2]
    out = np.zeros((s_len, heads, v.shape[-1]))
    lse = np.zeros((s_len, heads))
    for h in range(heads):
        kh = h // (heads // kv_heads)
        for i in range(s_len):
            scores = np.array([q[i, h] @ k[j, kh] + (0 if q_rope is None else
                                                      q_rope[i, h] @ k_rope[j, kh])
                               for j in range(length)]) * scale
            if causal == "right_down":
                scores[np.arange(length) > i + length - s_len] = -np.inf
            elif causal == "left_up":
                scores[np.arange(length) > i] = -np.inf
            top = scores.max()
            weights = np.exp(scores - top)
            out[i, h] = weights @ v[:, kh] / weights.sum()
            lse[i, h] = top + np.log(weights.sum())
    return out, lse


def split(x: np.ndarray, lens) -> list[np.ndarray]:
    return np.split(x, np.cumsum(lens)[:-1])


# -- FusedInferAttentionScore -----------------------------------------------------------------
def fia_row(filled, outputs, **runtime):
    return row(slots(FIA, filled), outputs, **runtime)


PREFILL = fia_row(
    {0: ((11, 4, 16), F32), 1: ((11, 2, 16), F32), 2: ((11, 2, 16), F32), 4: MASK,
     5: ((2,), I64), 6: ((2,), I64)},
    [((11, 4, 16), F32), ((11, 4, 1), F32)],
    input_layout="TND", num_heads="4", num_key_value_heads="2", sparse_mode="3",
    actual_seq_lengths_values="4,11", actual_seq_lengths_kv_values="4,11")
PAGED_DECODE = fia_row(
    {0: ((3, 4, 16), F32), 1: ((8, 4, 32), F32), 2: ((8, 4, 32), F32), 4: MASK,
     5: ((3,), I64), 6: ((3,), I64), 14: ((3, 3), I32)},
    [((3, 4, 16), F32), ((3, 4, 1), F32)],
    input_layout="TND", num_heads="4", num_key_value_heads="2", sparse_mode="3",
    block_size="4", actual_seq_lengths_values="1,2,3", actual_seq_lengths_kv_values="5,12,7")
MLA_DECODE = fia_row(
    {0: ((2, 4, 1, 32), F32), 1: ((6, 1, 4, 32), F32), 2: ((6, 1, 4, 32), F32),
     5: ((2,), I64), 6: ((2,), I64), 14: ((2, 3), I32), 24: ((2, 4, 1, 8), F32),
     25: ((6, 1, 4, 8), F32)},
    [((2, 4, 1, 32), F32), ((2, 4, 1, 1), F32)],
    input_layout="BNSD_NBSD", num_heads="4", num_key_value_heads="1", sparse_mode="0",
    block_size="4", actual_seq_lengths_kv_values="9,12")


def test_fia_prefill_gqa_with_unequal_sequences_is_causal_attention_per_sequence():
    _, prepared = prepare("FusedInferAttentionScore", PREFILL)
    out, lse = prepared.call()
    assert out.shape == (11, 4, 16) and out.dtype == torch.float32 and lse.shape == (11, 4, 1)
    t = prepared.tensors
    want_out, want_lse = [], []
    for q, k, v in zip(*(split(f64(t[n]), (4, 7)) for n in ("query", "key", "value"))):
        o, s = attend(q, k, v, 1 / 4, "right_down")
        want_out.append(o)
        want_lse.append(s)
    np.testing.assert_allclose(f64(out), np.concatenate(want_out), atol=1e-5)
    np.testing.assert_allclose(f64(lse)[..., 0], np.concatenate(want_lse), atol=1e-5)
    # The LSE comes from the attention kernel itself (as a serving engine's does), not from
    # a second float32 pass over the scores.
    assert prepared.implementation == ("eager: aten._scaled_dot_product_flash_attention_for_cpu"
                                       " + its softmax LSE")
    pairs = (4 * 5 // 2) + (7 * 8 // 2)
    assert prepared.flops == 2 * 4 * pairs * (16 + 16)


def test_fia_paged_decode_gathers_each_sequence_through_its_block_table():
    case, prepared = prepare("FusedInferAttentionScore", PAGED_DECODE)
    out, lse = prepared.call()
    t = prepared.tensors
    table = t["block_table"].numpy()
    assert table.dtype == np.int32 and table.min() >= 0 and table.max() < 8
    needed = [table[b, :n] for b, n in enumerate((2, 3, 2))]
    assert len(set(np.concatenate(needed).tolist())) == 7  # no block shared by two sequences
    q = f64(t["query"])
    for b, kv_len in enumerate((5, 12, 7)):
        k = paged_tokens(f64(t["key"]).reshape(8, 4, 2, 16), table, b, kv_len, "BnBsH")
        v = paged_tokens(f64(t["value"]).reshape(8, 4, 2, 16), table, b, kv_len, "BnBsH")
        o, s = attend(q[b:b + 1], k, v, 1 / 4, "none")
        np.testing.assert_allclose(f64(out)[b], o[0], atol=1e-5)
        np.testing.assert_allclose(f64(lse)[b, :, 0], s[0], atol=1e-5)
    assert "paged" in prepared.implementation
    # Only the tokens of the sequences are read from the pool, not all 8 blocks.
    slot_bytes = 8 * 4 * 32 * 4
    assert prepared.bytes == pytest.approx(case.io_bytes - 2 * slot_bytes * (1 - 24 / 32))


def test_fia_mla_decode_concatenates_the_rope_slots_and_keeps_bnsd():
    _, prepared = prepare("FusedInferAttentionScore", MLA_DECODE)
    out, lse = prepared.call()
    assert out.shape == (2, 4, 1, 32) and lse.shape == (2, 4, 1, 1)
    t = prepared.tensors
    table = t["block_table"].numpy()
    for b, kv_len in enumerate((9, 12)):
        k, v, kr = (paged_tokens(f64(t[n]), table, b, kv_len, "BnNBsD")
                    for n in ("key", "value", "key_rope"))
        q, qr = f64(t["query"])[b].transpose(1, 0, 2), f64(t["query_rope"])[b].transpose(1, 0, 2)
        o, s = attend(q, k, v, 1 / math.sqrt(40), "none", qr, kr)
        np.testing.assert_allclose(f64(out)[b, :, 0], o[0], atol=1e-5)
        np.testing.assert_allclose(f64(lse)[b, :, 0, 0], s[0], atol=1e-5)


def test_fia_bsnd_left_up_causal_without_lse_and_bf16():
    cells = fia_row({0: ((2, 5, 4, 8), BF16), 1: ((2, 5, 2, 8), BF16), 2: ((2, 5, 2, 8), BF16),
                     4: MASK}, [((2, 5, 4, 8), BF16), None],
                    input_layout="BSND", sparse_mode="2")
    _, prepared = prepare("FusedInferAttentionScore", cells)
    out, lse = prepared.call()
    assert out.dtype == torch.bfloat16 and lse.shape == (1,) and not lse.any()
    t = prepared.tensors
    for b in range(2):
        o, _ = attend(*(f64(t[n])[b] for n in ("query", "key", "value")), 1 / math.sqrt(8),
                      "left_up")
        np.testing.assert_allclose(f64(out)[b], o, atol=3e-2)


def test_fia_row_without_runtime_metadata_is_inferred_from_its_shapes():
    # A profiled row: slots only, sequences split evenly, sparse_mode 3 from the mask.
    cells = fia_row({0: ((6, 2, 16), F32), 1: ((6, 2, 16), F32), 2: ((6, 2, 16), F32),
                     4: MASK, 5: ((2,), I64), 6: ((2,), I64)}, [((6, 2, 16), F32), None])
    _, prepared = prepare("FusedInferAttentionScore", cells)
    out, _ = prepared.call()
    t = prepared.tensors
    for b, (q, k, v) in enumerate(zip(*(split(f64(t[n]), (3, 3))
                                        for n in ("query", "key", "value")))):
        o, _ = attend(q, k, v, 1 / 4, "right_down")
        np.testing.assert_allclose(f64(out)[3 * b:3 * b + 3], o, atol=1e-5)


@pytest.mark.parametrize("filled, outputs, message", [
    ({0: ((4, 2, 16), F32), 1: ((4, 2, 16), F32), 2: ((4, 2, 16), F32), 3: ((4, 4), F32)},
     [((4, 2, 16), F32)], "pse_shift"),
    ({0: ((4, 2, 16), F32), 1: ((4, 2, 16), F32), 2: ((4, 2, 16), F32)},
     [((4, 2, 8), F32)], "output"),
    ({0: ((4, 2, 16), F32), 1: ((4, 2, 16), F32), 2: ((4, 2, 16), F32), 24: ((4, 2, 8), F32)},
     [((4, 2, 16), F32)], "query_rope and key_rope"),
])
def test_fia_rows_that_cannot_be_replayed_say_why(filled, outputs, message):
    with pytest.raises(CellError, match=message) as err:
        prepare("FusedInferAttentionScore", fia_row(filled, outputs))
    assert "db/FusedInferAttentionScore.csv" in str(err.value)


def test_fia_npu_call_takes_the_documented_arguments():
    calls: list = []
    backend = npu_backend(calls)
    prepare("FusedInferAttentionScore", PREFILL, backend)[1].call()
    args = only_call(calls, "npu_fused_infer_attention_score")
    assert args["query"].shape == (11, 4, 16) and args["key"].shape == (11, 2, 16)
    assert args["actual_seq_lengths"] == [4, 11] and args["actual_seq_lengths_kv"] == [4, 11]
    assert (args["num_heads"], args["num_key_value_heads"], args["input_layout"],
            args["sparse_mode"], args["softmax_lse_flag"]) == (4, 2, "TND", 3, True)
    mask = args["atten_mask"]
    assert mask.shape == (2048, 2048) and mask.dtype == torch.int8
    assert mask[0, 1] == 1 and mask[1, 0] == 0 and mask.sum() == 2048 * 2047 // 2
    assert args["scale"] == pytest.approx(0.25) and args["block_table"] is None

    calls.clear()
    prepare("FusedInferAttentionScore", PAGED_DECODE, backend)[1].call()
    args = only_call(calls, "npu_fused_infer_attention_score")
    assert args["actual_seq_lengths"] == [1, 2, 3]  # cumulative for TND
    assert args["actual_seq_lengths_kv"] == [5, 12, 7]  # per sequence for a paged cache
    assert args["block_table"].dtype == torch.int32 and args["block_size"] == 4

    calls.clear()
    prepare("FusedInferAttentionScore", MLA_DECODE, backend)[1].call()
    args = only_call(calls, "npu_fused_infer_attention_score")
    assert args["query_rope"].shape == (2, 4, 1, 8) and args["key_rope"].shape == (6, 1, 4, 8)
    assert (args["input_layout"], args["num_key_value_heads"], args["atten_mask"]) == (
        "BNSD_NBSD", 1, None)
    assert args["scale"] == pytest.approx(1 / math.sqrt(40))


# -- RINGMLAPrefillBF16Kernel -----------------------------------------------------------------
RING = row([((8, 2, 16), F32), ((8, 2, 8), F32), ((8, 2, 16), F32), ((8, 2, 8), F32),
            ((8, 2, 16), F32), ((512, 512), F32), ((2,), I32)],
           [((8, 2, 16), F32), ((2, 8), F32)])


def test_ring_mla_is_causal_mla_over_equal_sequences_with_lse_heads_first():
    _, prepared = prepare("RINGMLAPrefillBF16Kernel", RING)
    out, lse = prepared.call()
    assert out.shape == (8, 2, 16) and lse.shape == (2, 8)
    t = prepared.tensors
    names = ("q_nope", "k_nope", "value", "q_rope", "k_rope")
    for b, (q, k, v, qr, kr) in enumerate(zip(*(split(f64(t[n]), (4, 4)) for n in names))):
        o, s = attend(q, k, v, 1 / math.sqrt(24), "right_down", qr, kr)
        np.testing.assert_allclose(f64(out)[4 * b:4 * b + 4], o, atol=1e-5)
        np.testing.assert_allclose(f64(lse)[:, 4 * b:4 * b + 4], s.T, atol=1e-5)


@pytest.mark.parametrize("stack", [EMBEDDED, NEWEST])
def test_ring_mla_npu_call_is_vllm_ascends_out_call(stack):
    calls: list = []
    _, prepared = prepare("RINGMLAPrefillBF16Kernel", RING, npu_backend(calls, stack))
    prepared.call()
    args = only_call(calls, "npu_ring_mla")
    assert args["output"].shape == (8, 2, 16) and args["softmax_lse"].shape == (2, 8)
    assert args["softmax_lse"].dtype == torch.float32 and "out= overload" in \
        prepared.implementation
    assert args["seqlen"].device.type == "cpu" and args["seqlen"].tolist() == [4, 4]
    assert args["seqlen"].dtype == torch.int32
    assert (args["head_num"], args["kv_head_num"]) == (2, 2)
    assert (args["mask_type"], args["calc_type"], args["input_layout"], args["kernel_type"]) == (
        "mask_type_triu", "calc_type_first_ring", "type_bsnd", "kernel_type_high_precision")
    assert args["mask"].shape == (512, 512) and args["mask"][0, 1] == 1 and args["mask"][1, 0] == 0


def test_ring_mla_is_an_atb_operator_that_needs_no_custom_opp(monkeypatch):
    monkeypatch.setattr(spec_module, "custom_op_environment",
                        lambda: ["ASCEND_CUSTOM_OPP_PATH: set it to /x"])
    backend = npu_backend([])
    del backend.custom_operator  # the installed operators' path, where the check applies
    prepare("RINGMLAPrefillBF16Kernel", RING, backend)[1].call()


def test_a_later_ring_step_is_not_replayed_as_a_first_ring_one():
    shapes = [((8, 2, 16), F32), ((8, 2, 8), F32), ((8, 2, 16), F32), ((8, 2, 8), F32),
              ((8, 2, 16), F32), ((512, 512), F32), ((1,), I32)] + [None] * 6 + [
        ((8, 2, 16), F32), ((2, 8), F32)]
    with pytest.raises(CellError, match=r"slot\(s\) \[13, 14\].*first-ring"):
        prepare("RINGMLAPrefillBF16Kernel", row(shapes, [((8, 2, 16), F32), ((2, 8), F32)]))


# -- LightningIndexer -------------------------------------------------------------------------
INDEXER = row([((6, 4, 16), F32), ((5, 4, 1, 16), F32), ((6, 4), F32), ((2,), I32),
               ((2,), I32), ((2, 3), I32)], [((6, 1, 8), I32), None],
              actual_seq_lengths_kv_values="7,10")


def indexer_reference(q, keys, w, lens_q, lens_kv, count):
    """Per token: positions ordered by sum_h w * relu(q_h . k), causal, -1 padded."""
    out, t = [], 0
    for b, (sq, skv) in enumerate(zip(lens_q, lens_kv)):
        for i in range(sq):
            seen = skv - sq + i + 1
            scores = [(w[t] * np.maximum(q[t] @ keys[b][j], 0)).sum() for j in range(seen)]
            order = list(np.argsort(scores)[::-1][:count])
            out.append(order + [-1] * (count - len(order)))
            t += 1
    return np.array(out)


def test_lightning_indexer_picks_the_causal_top_k_through_the_block_table():
    _, prepared = prepare("LightningIndexer", INDEXER)
    got = prepared.call()
    assert got.shape == (6, 1, 8) and got.dtype == torch.int32
    t = prepared.tensors
    table = t["block_table"].numpy()
    keys = [paged_tokens(f64(t["key"]), table, b, n, "BnBsH")[:, 0] for b, n in
            enumerate((7, 10))]
    want = indexer_reference(f64(t["query"]), keys, f64(t["weights"]), (3, 3), (7, 10), 8)
    for token in range(6):  # same positions; the order among equal scores is free
        assert sorted(got[token, 0].tolist()) == sorted(want[token].tolist())
    assert (got[0, 0] == -1).sum() == 3  # the first token of sequence 0 sees 5 positions


def test_lightning_indexer_bsnd_returns_the_scores_too():
    cells = row([((2, 2, 4, 16), F32), ((2, 6, 1, 16), F32), ((2, 2, 4), F32), None, None,
                 None], [((2, 2, 1, 4), I32), ((2, 2, 1, 4), F32)])
    _, prepared = prepare("LightningIndexer", cells)
    index, values = prepared.call()
    t = prepared.tensors
    q, k, w = (f64(t[n]) for n in ("query", "key", "weights"))
    for b in range(2):
        for i in range(2):
            scores = np.array([(w[b, i] * np.maximum(q[b, i] @ k[b, j, 0], 0)).sum()
                               for j in range(6)])
            scores[np.arange(6) > 6 - 2 + i] = -np.inf
            np.testing.assert_allclose(np.sort(f64(values)[b, i, 0])[::-1],
                                       np.sort(scores)[::-1][:4], atol=1e-5)
            assert set(index[b, i, 0].tolist()) == set(np.argsort(scores)[::-1][:4].tolist())


# -- SparseFlashAttention ---------------------------------------------------------------------
SPARSE = row([((6, 4, 32), F32), ((5, 4, 1, 32), F32), ((5, 4, 1, 32), F32), ((6, 1, 4), I32),
              ((2, 3), I32), ((2,), I32), ((2,), I32), ((6, 4, 8), F32), ((5, 4, 1, 8), F32)],
             [((6, 4, 32), F32), ((1, 6, 4), F32), ((1, 6, 4), F32)],
             actual_seq_lengths_kv_values="7,10")


def test_sparse_flash_attention_attends_only_to_the_selected_positions():
    _, prepared = prepare("SparseFlashAttention", SPARSE)
    out, peak, total = prepared.call()
    assert out.shape == (6, 4, 32) and peak.shape == total.shape == (1, 6, 4)
    t = prepared.tensors
    table, chosen = t["block_table"].numpy(), t["sparse_indices"].numpy()[:, 0]
    scale = 1 / math.sqrt(40)
    for token in range(6):
        b, i = divmod(token, 3)
        seen = (7, 10)[b] - 3 + i + 1
        valid = chosen[token][chosen[token] >= 0]
        assert len(set(valid)) == len(valid) == min(4, seen) and valid.max() < seen
        assert (chosen[token][len(valid):] == -1).all()  # valid first, -1 after
        k, v, kr = (paged_tokens(f64(t[n]), table, b, (7, 10)[b], "BnBsH")[valid, 0]
                    for n in ("key", "value", "key_rope"))
        for h in range(4):
            scores = (k @ f64(t["query"])[token, h] + kr @ f64(t["query_rope"])[token, h]) * scale
            weights = np.exp(scores - scores.max())
            np.testing.assert_allclose(f64(out)[token, h], weights @ v / weights.sum(),
                                       atol=1e-5)
            assert f64(peak)[0, token, h] == pytest.approx(scores.max(), abs=1e-5)
            assert f64(total)[0, token, h] == pytest.approx(weights.sum(), abs=1e-5)


def test_sparse_attention_npu_calls_take_the_documented_arguments():
    calls: list = []
    backend = npu_backend(calls)
    prepare("LightningIndexer", INDEXER, backend)[1].call()
    args = only_call(calls, "npu_lightning_indexer")
    assert (args["layout_query"], args["layout_key"], args["sparse_count"],
            args["sparse_mode"], args["return_value"]) == ("TND", "PA_BSND", 8, 3, False)
    assert args["actual_seq_lengths_query"].tolist() == [3, 6]  # cumulative for TND
    assert args["actual_seq_lengths_key"].tolist() == [7, 10]
    assert args["actual_seq_lengths_key"].dtype == torch.int32
    assert args["block_table"].shape == (2, 3)

    prepare("SparseFlashAttention", SPARSE, backend)[1].call()
    args = only_call(calls, "npu_sparse_flash_attention")
    assert args["scale_value"] == pytest.approx(1 / math.sqrt(40))
    assert (args["sparse_block_size"], args["attention_mode"], args["layout_kv"],
            args["return_softmax_lse"]) == (1, 2, "PA_BSND", True)
    assert args["sparse_indices"].shape == (6, 1, 4) and args["query_rope"].shape == (6, 4, 8)


def test_sparse_attention_without_the_torch_npu_function_says_what_vllm_ascend_needs(
        monkeypatch):
    backend = npu_backend([], hide=("npu_lightning_indexer",))
    del backend.custom_operator  # the installed operators' path, where the check applies
    monkeypatch.setattr(sparse_attention, "custom_op_environment",
                        lambda: ["ASCEND_CUSTOM_OPP_PATH: set it to /v"])
    with pytest.raises(RuntimeError, match="npu_lightning_indexer.*ASCEND_CUSTOM_OPP_PATH"):
        prepare("LightningIndexer", INDEXER, backend)


FALLBACK = ("npu_lightning_indexer", "npu_sparse_flash_attention")
SPARSE_NO_STATS = row([((6, 4, 32), F32), ((5, 4, 1, 32), F32), ((5, 4, 1, 32), F32),
                       ((6, 1, 4), I32), ((2, 3), I32), ((2,), I32), ((2,), I32),
                       ((6, 4, 8), F32), ((5, 4, 1, 8), F32)], [((6, 4, 32), F32), None, None],
                      actual_seq_lengths_kv_values="7,10")


@pytest.mark.parametrize("stack", [EMBEDDED, NEWEST])
def test_the_vllm_ascend_fallbacks_bind_to_each_stacks_schema(stack):
    """Without torch_npu's functions the replay calls vllm-ascend's; up to v0.20.2rc1 they
    have no return_value / attention_mode / return_softmax_lse and return one tensor."""
    calls: list = []
    backend = npu_backend(calls, stack, hide=FALLBACK)
    _, indexer = prepare("LightningIndexer", INDEXER, backend)
    _, flash = prepare("SparseFlashAttention", SPARSE_NO_STATS, backend)
    returned = indexer.call(), flash.call()
    li, sfa = only_call(calls, "_C_ascend::npu_lightning_indexer"), \
        only_call(calls, "_C_ascend::npu_sparse_flash_attention")
    assert li["sparse_count"] == 8 and sfa["sparse_block_size"] == 1
    if stack == EMBEDDED:
        assert "return_value" not in li and "attention_mode" not in sfa
        assert all(isinstance(r, torch.Tensor) for r in returned)
        assert indexer.implementation.endswith("[vllm-ascend <= v0.20.2rc1 schema]")
    else:
        assert li["return_value"] is False and sfa["attention_mode"] == 2
        assert [len(r) for r in returned] == [2, 3]
    assert indexer.implementation.startswith("npu: torch.ops._C_ascend.npu_lightning_indexer")


def test_sparse_values_from_the_old_indexer_schema_do_not_bind():
    cells = row([((6, 4, 16), F32), ((5, 4, 1, 16), F32), ((6, 4), F32), ((2,), I32),
                 ((2,), I32), ((2, 3), I32)], [((6, 1, 8), I32), ((6, 1, 8), F32)],
                actual_seq_lengths_kv_values="7,10")
    with pytest.raises(BindError, match="no parameter 'return_value'"):
        prepare("LightningIndexer", cells, npu_backend([], EMBEDDED, hide=FALLBACK))


def test_real_profiled_attention_rows_are_read_without_runtime_metadata(realdata):
    """msmodeling's FIA rows (31 slots, no Runtime columns): paged GQA decode over a
    (blocks, 128, H) cache, GQA prefill with several sequences, MLA decode over a
    (blocks, 1, 128, 512) cache with rope slots."""
    import csv

    from pytest_npuperf.kernels.attention import NONE, RIGHT_DOWN, fia_plan
    from pytest_npuperf.kernels.case import case_from_row

    path = realdata / "msmodeling" / "msmodeling_fixture_fia_raw_test_FusedInferAttentionScore.csv"
    with open(path, newline="", encoding="utf-8") as handle:
        rows = list(csv.DictReader(handle))
    kinds = set()
    for cells in rows:
        case = case_from_row("FusedInferAttentionScore", cells)
        plan = fia_plan(case)
        q = case.input(0).dims
        if plan.rope_dim:
            kinds.add("mla decode")
            assert (plan.layout_name, plan.cache_layout, plan.kv_heads, plan.block_size,
                    plan.rope_dim, plan.heads) == ("BNSD_NBSD", "BnNBsD", 1, 128, 64, q[1])
            assert plan.q_lens == (1,) * q[0] and plan.causal == NONE
        elif plan.paged:
            kinds.add("paged decode")
            assert (plan.layout_name, plan.cache_layout, plan.kv_heads, plan.block_size) == (
                "TND", "BnBsH", 1, 128)
            assert plan.q_lens == (1,) * q[0] and plan.causal == NONE
            blocks, width = case.input(1).dims[0], case.input(14).dims[1]
            assert max(plan.kv_lens) <= min(width * 128, blocks * 128 // plan.batch)
        else:
            kinds.add("prefill")
            assert plan.batch == case.input(5).dims[0] and sum(plan.q_lens) == q[0]
            assert plan.kv_lens == plan.q_lens and plan.causal == RIGHT_DOWN
        assert not plan.lse  # these rows record an empty LSE slot
    assert kinds == {"mla decode", "paged decode", "prefill"}
