"""Data movement kernels: each output checked element by element against the row's meaning
(copy, slice window, padding, gathered rows, permutation), arguments derived from the output
shape, indices inside their target."""

from __future__ import annotations

import pytest
import torch

from pytest_npuperf.db.errors import CellError
from pytest_npuperf.kernels.case import case_from_row
from pytest_npuperf.kernels.registry import spec_for
from tests import npu_standin
from tests.test_devices import HostTensorNpu, fake_torch_npu
from tests.test_kernels_specs import prepare, row

# Fixtures: the stand-in NPU operators (tests/npu_standin.py).
npu = npu_standin.npu


def test_tensor_move_copies_into_a_separate_destination():
    _, prepared = prepare("TensorMove", row("4,6", "DT_BF16", "ND", "4,6", "DT_BF16"))
    src, dst = prepared.tensors["src"], prepared.tensors["dst"]
    assert not torch.equal(src, dst)  # the destination held other (valid) data
    out = prepared.call()
    assert out is dst and torch.equal(dst, src) and dst.data_ptr() != src.data_ptr()
    assert prepared.bytes == 2 * 4 * 6 * 2


def test_tensor_move_of_fractal_nz_tensors_builds_their_nd_matrices(monkeypatch):
    # (2, 3, 16, 16) blocked is the ND matrix (48, 32).
    cells = row("2,3,16,16", "DT_FLOAT", "FRACTAL_NZ", "2,3,16,16", "DT_FLOAT", "FRACTAL_NZ")
    _, prepared = prepare("TensorMove", cells)
    assert tuple(prepared.tensors["src"].shape) == (48, 32)
    assert torch.equal(prepared.call(), prepared.tensors["src"])
    calls: list = []
    fake_torch_npu(monkeypatch, calls)
    spec_for("TensorMove").prepare(case_from_row("TensorMove", cells), HostTensorNpu(0))
    assert [c for c in calls if c[0] == "npu_format_cast"] == [("npu_format_cast", (48, 32), 29)] * 2


def test_tensor_move_is_not_a_cast():
    with pytest.raises(CellError, match="same-dtype"):
        prepare("TensorMove", row("4,6", "DT_BF16", "ND", "4,6", "DT_FLOAT"))


def test_slice_takes_a_window_of_the_output_size_inside_the_input():
    cells = row("6,10;2;2", "DT_FLOAT;DT_INT64;DT_INT64", "ND;ND;ND", "6,4", "DT_FLOAT")
    _, prepared = prepare("Slice", cells)
    x = prepared.tensors["x"]
    (r0, c0), size = prepared.tensors["offsets"].tolist(), prepared.tensors["size"].tolist()
    assert size == [6, 4] and r0 == 0 and 0 <= c0 <= 6
    y = prepared.call()
    for i in range(6):
        for j in range(4):
            assert y[i, j] == x[r0 + i, c0 + j]
    assert y.data_ptr() != x.data_ptr()


def test_slice_npu_call_passes_int_lists(npu):
    backend, calls = npu
    cells = row("6,10;2;2", "DT_BF16;DT_INT64;DT_INT64", "ND;ND;ND", "6,4", "DT_BF16")
    spec_for("Slice").prepare(case_from_row("Slice", cells), backend).call()
    args = calls.of("npu_slice")
    assert args["size"] == [6, 4] and isinstance(args["offsets"], list)
    assert all(isinstance(v, int) for v in args["offsets"])


def test_slice_larger_than_its_input_is_an_error():
    with pytest.raises(CellError, match="not a slice"):
        prepare("Slice", row("6,10;2;2", "DT_BF16;DT_INT64;DT_INT64", "ND;ND;ND", "6,12",
                             "DT_BF16"))


def test_pad_appends_zeros_up_to_the_output_shape():
    _, prepared = prepare("PadV3", row("5,3;4", "DT_FLOAT;DT_INT64", "ND;ND", "8,3", "DT_FLOAT"))
    x, y = prepared.tensors["x"], prepared.call()
    assert tuple(y.shape) == (8, 3)
    assert torch.equal(y[:5], x) and not y[5:].any()


def test_index_gathers_rows_by_in_range_indices():
    cells = row("16,4;1;2;7", "DT_BF16;DT_INT64;DT_INT64;DT_INT64", "ND;ND;ND;ND", "7,4",
                "DT_BF16")
    _, prepared = prepare("Index", cells)
    x, index = prepared.tensors["x"], prepared.tensors["index0"]
    assert int(index.min()) >= 0 and int(index.max()) < 16
    y = prepared.call()
    for i, source in enumerate(index.tolist()):
        assert torch.equal(y[i], x[source])
    assert prepared.bytes == 2 * 7 * 4 * 2 + 7 * 8


def test_index_with_two_index_tensors_and_a_wrong_output():
    cells = row("8,5,3;1;2;4;4", "DT_FLOAT;DT_INT64;DT_INT64;DT_INT64;DT_INT64",
                "ND;ND;ND;ND;ND", "4,3", "DT_FLOAT")
    _, prepared = prepare("Index", cells)
    t = prepared.tensors
    y = prepared.call()
    for i, (a, b) in enumerate(zip(t["index0"].tolist(), t["index1"].tolist())):
        assert int(b) < 5 and torch.equal(y[i], t["x"][a, b])
    cells["Output Shapes"] = "4,5,3"
    with pytest.raises(CellError, match="gives"):
        prepare("Index", cells)


def test_gather_looks_up_embedding_rows():
    cells = row("50,8;6;1", "DT_BF16;DT_INT32;DT_INT64", "ND;ND;ND", "6,8", "DT_BF16")
    _, prepared = prepare("GatherV2", cells)
    table, ids = prepared.tensors["table"], prepared.tensors["ids"]
    assert ids.dtype == torch.int32 and int(ids.min()) >= 0 and int(ids.max()) < 50
    y = prepared.call()
    for i, token in enumerate(ids.tolist()):
        assert torch.equal(y[i], table[token])
    # An embedding lookup reads the rows it returns, not the whole table.
    assert prepared.bytes == 2 * 6 * 8 * 2 + 6 * 4


@pytest.mark.parametrize("x, out, perm", [("4,6", "6,4", (1, 0)), ("2,3,4", "2,4,3", (0, 2, 1)),
                                          ("3,3", "3,3", (1, 0))])
def test_transpose_finds_the_permutation_from_the_output(x, out, perm):
    cells = row(f"{x};{len(x.split(','))}", "DT_FLOAT;DT_INT64", "ND;ND", out, "DT_FLOAT")
    case, prepared = prepare("Transpose", cells)
    assert spec_for("Transpose").perm(case) == perm
    y = prepared.call()
    assert y.is_contiguous() and torch.equal(y, prepared.tensors["x"].permute(perm))


def test_transpose_to_an_unrelated_shape_is_an_error():
    with pytest.raises(CellError, match="not a permutation"):
        prepare("Transpose", row("4,6;2", "DT_FLOAT;DT_INT64", "ND;ND", "4,5", "DT_FLOAT"))
