"""Sampling kernels: ArgMaxV2, Sort, MaskedFill, checked against Python's own max/sorted."""

from __future__ import annotations

import pytest
import torch

from pytest_npuperf.db.errors import CellError
from pytest_npuperf.kernels.registry import spec_for
from tests.test_kernels_specs import prepare, row


@pytest.mark.parametrize("out, keep", [("3", False), ("3,1", True)])
def test_argmax_picks_the_largest_logit_of_each_row(out, keep):
    case, prepared = prepare("ArgMaxV2", row("3,50", "DT_FLOAT", "ND", out, "INT64"))
    x = prepared.tensors["x"]
    index = prepared.call()
    assert index.dtype == torch.int64 and index.dim() == (2 if keep else 1)
    for i, picked in enumerate(index.reshape(-1).tolist()):
        assert x[i, picked] == max(x[i].tolist())
    maxima, = spec_for("ArgMaxV2").results(index, prepared.tensors, case)
    assert maxima.reshape(-1).tolist() == [max(r) for r in x.tolist()]


def test_argmax_over_another_dim_follows_the_output_shape():
    _, prepared = prepare("ArgMaxV2", row("4,6,5", "DT_FLOAT", "ND", "4,5", "INT64"))
    x, index = prepared.tensors["x"], prepared.call()
    for b in range(4):
        for j in range(5):
            assert x[b, index[b, j], j] == max(x[b, :, j].tolist())
    with pytest.raises(CellError, match="reduced over one dim"):
        prepare("ArgMaxV2", row("4,6,5", "DT_FLOAT", "ND", "4,7", "INT64"))


def test_sort_orders_each_row_and_its_indices_point_at_the_values():
    case, prepared = prepare("Sort", row("2,40", "DT_BF16", "ND", "2,40;2,40", "DT_BF16;INT64"))
    x = prepared.tensors["x"]
    values, indices = prepared.call()
    for i in range(2):
        assert values[i].tolist() == sorted(x[i].tolist())
        assert sorted(indices[i].tolist()) == list(range(40))
    compared = spec_for("Sort").results((values, indices), prepared.tensors, case)
    assert torch.equal(compared[0], compared[1])


def test_masked_fill_masks_exactly_the_true_positions_in_place():
    cells = row("3,20;3,20", "DT_BF16;BOOL", "ND;ND", "3,20", "DT_BF16")
    _, prepared = prepare("MaskedFill", cells)
    x, mask = prepared.tensors["x"], prepared.tensors["mask"]
    before = x.clone()
    assert mask.dtype == torch.bool and 0 < int(mask.sum()) < mask.numel()
    assert prepared.call() is x
    for i in range(3):
        for j in range(20):
            want = float("-inf") if mask[i, j] else float(before[i, j])
            assert float(x[i, j]) == want


def test_masked_fill_needs_a_mask_that_broadcasts():
    with pytest.raises(CellError, match="broadcast"):
        prepare("MaskedFill", row("3,20;3,7", "DT_BF16;BOOL", "ND;ND", "3,20", "DT_BF16"))
