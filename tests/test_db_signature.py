"""Row identity (CONTRACT.md §4)."""

from __future__ import annotations

import subprocess
import sys

import pandas as pd
import pytest

from pytest_npuperf.db.errors import CellError
from pytest_npuperf.db.signature import MATMUL_FAMILY, short_hash, signature
from pytest_npuperf.db.upsert import row_signatures


def sig(kernel: str, ins: str, idt: str, ifm: str, outs: str, odt: str, ep: str = ""):
    return signature(kernel, ins, idt, ifm, outs, odt, ep)


# -- generic --------------------------------------------------------------------------------

def test_generic_spellings_agree() -> None:
    a = sig("Add", "512,2,4096;512,2,4096", "DT_BF16;DT_BF16", "ND;ND", "512,2,4096", "DT_BF16")
    b = sig("Add", '"(512, 2, 4096);(512, 2, 4096)"', "BF16; BF16", "FORMAT_ND;FORMAT_ND",
            '"512,2,4096"', "bf16")
    assert a == b


def test_trailing_empty_slots_are_trimmed() -> None:
    a = sig("RmsNorm", "1,512;512", "DT_BF16;DT_BF16", "ND;ND", "1,512;1", "DT_BF16;FLOAT")
    b = sig("RmsNorm", "1,512;512;;", "DT_BF16;DT_BF16;DT_UNDEFINED;DT_UNDEFINED",
            "ND;ND;NULL;NULL", "1,512;1;", "DT_BF16;FLOAT;DT_UNDEFINED")
    assert a == b


def test_dtype_and_format_of_an_empty_slot_are_blanked() -> None:
    a = sig("Foo", "1,2;;3", "DT_BF16;DT_UNDEFINED;DT_BF16", "ND;NULL;ND", "3", "DT_BF16")
    b = sig("Foo", "1,2;;3", "DT_BF16;INT8;DT_BF16", "ND;ND;ND", "3", "DT_BF16")
    c = sig("Foo", "1,2;N/A;3", "DT_BF16;;DT_BF16", "ND;;ND", "3", "DT_BF16")
    assert a == b == c


def test_but_an_empty_slot_in_the_middle_is_not_trimmed() -> None:
    a = sig("Foo", "1,2;;3", "DT_BF16;DT_UNDEFINED;DT_BF16", "ND;NULL;ND", "3", "DT_BF16")
    b = sig("Foo", "1,2;3", "DT_BF16;DT_BF16", "ND;ND", "3", "DT_BF16")
    assert a != b


def test_dtype_format_and_output_dtype_are_part_of_the_identity() -> None:
    base = ("Add", "8,16;8,16", "DT_BF16;DT_BF16", "ND;ND", "8,16", "DT_BF16")
    assert sig(*base) != sig("Add", "8,16;8,16", "DT_FLOAT16;DT_FLOAT16", "ND;ND", "8,16",
                             "DT_FLOAT16")
    assert sig(*base) != sig("Add", "8,16;8,16", "DT_BF16;DT_BF16", "FRACTAL_NZ;ND", "8,16",
                             "DT_BF16")
    assert sig(*base) != sig("Add", "8,16;8,16", "DT_BF16;DT_BF16", "ND;ND", "8,16", "FLOAT")
    assert sig(*base) != sig("Add", "8,16;8,16", "DT_BF16;DT_BF16", "ND;ND", "16,8", "DT_BF16")


def test_op_state_and_output_formats_are_not_part_of_the_identity() -> None:
    frame = pd.DataFrame([
        {"OP State": "dynamic", "Input Shapes": "8,16", "Input Data Types": "DT_BF16",
         "Input Formats": "ND", "Output Shapes": "8,16", "Output Data Types": "DT_BF16",
         "Output Formats": "ND"},
        {"OP State": "static", "Input Shapes": "8,16", "Input Data Types": "DT_BF16",
         "Input Formats": "ND", "Output Shapes": "8,16", "Output Data Types": "DT_BF16",
         "Output Formats": "FRACTAL_NZ"},
    ])
    sigs, errors = row_signatures(frame, "Cast")
    assert errors == []
    assert sigs[0] == sigs[1]


def test_no_shape_rows_and_bad_cells() -> None:
    assert sig("Foo", "N/A", "N/A", "N/A", "N/A", "N/A") == sig("Foo", "", "", "", "", "")
    with pytest.raises(CellError):
        sig("Foo", "1,x", "DT_BF16", "ND", "1", "DT_BF16")


def test_row_signatures_reports_bad_rows_one_based() -> None:
    frame = pd.DataFrame({"Input Shapes": ["1,2", "1,x"], "Input Data Types": ["DT_BF16"] * 2,
                          "Input Formats": ["ND"] * 2, "Output Shapes": ["1,2"] * 2,
                          "Output Data Types": ["DT_BF16"] * 2})
    sigs, errors = row_signatures(frame, "Add")
    assert sigs[0] is not None and sigs[1] is None
    assert [row for row, _ in errors] == [2]


# -- MatMul family ----------------------------------------------------------------------------

NK = ("128,7168;3584,7168", "DT_BF16;DT_BF16", "ND;ND", "128,3584", "DT_BF16")
KN = ("128,7168;7168,3584", "DT_BF16;DT_BF16", "ND;ND", "128,3584", "DT_BF16")


@pytest.mark.parametrize("kernel", MATMUL_FAMILY)
def test_gemm_is_canonical_across_the_family_and_both_weight_orientations(kernel: str) -> None:
    reference = sig("MatMulV2", *NK)
    assert sig(kernel, *NK) == reference
    assert sig(kernel, *KN) == reference
    assert reference[0] == "gemm"
    assert reference[1] == (128, 7168, 3584)        # (M, K, N)


def test_gemm_spellings_of_dtypes_and_quotes_agree() -> None:
    assert sig("MatMulV3", '"(128, 7168);(3584, 7168)"', "BF16;BF16", "FORMAT_ND;ND",
               '"128,3584"', "bf16") == sig("MatMulV2", *NK)


def test_gemm_dtype_still_matters() -> None:
    assert sig("MatMulV2", *NK) != sig("MatMulV2", NK[0], "DT_FLOAT16;DT_FLOAT16", "ND;ND",
                                       NK[3], "DT_FLOAT16")


def test_output_shape_decides_between_orientations() -> None:
    # (128,256) x (256,128) is (M=128,K=256,N=128) or, with `a` transposed, (256,128,256).
    small = sig("MatMulV2", "128,256;256,128", "DT_BF16;DT_BF16", "ND;ND", "128,128", "DT_BF16")
    large = sig("MatMulV2", "128,256;256,128", "DT_BF16;DT_BF16", "ND;ND", "256,256", "DT_BF16")
    assert small[1] == (128, 256, 128)
    assert large[1] == (256, 128, 256)
    assert small != large


def test_transposed_first_operand_is_recognised_by_the_output_shape() -> None:
    stored_t = sig("MatMulV2", "7168,128;3584,7168", "DT_BF16;DT_BF16", "ND;ND", "128,3584",
                   "DT_BF16")
    assert stored_t[1] == (128, 7168, 3584)


def test_square_weight_is_one_signature() -> None:
    a = sig("MatMulV3", "64,4096;4096,4096", "DT_BF16;DT_BF16", "ND;ND", "64,4096", "DT_BF16")
    assert a[1] == (64, 4096, 4096)


def test_fractal_nz_weight_is_compared_as_its_nd_matrix() -> None:
    # (N, K) = (3584, 7168) blocked: (K/16, N/16, 16, 16)
    nz = sig("MatMulV2", "128,7168;448,224,16,16", "DT_BF16;DT_BF16", "ND;FRACTAL_NZ",
             "128,3584", "DT_BF16")
    assert nz[0] == "gemm"
    assert nz[1] == (128, 7168, 3584)
    assert nz != sig("MatMulV2", *NK)               # the stored format is still part of it


def test_bias_slot_is_part_of_the_gemm_identity() -> None:
    with_bias = sig("MatMulV2", "128,7168;3584,7168;3584", "DT_BF16;DT_BF16;DT_BF16",
                    "ND;ND;ND", "128,3584", "DT_BF16")
    assert with_bias != sig("MatMulV2", *NK)
    assert with_bias[1] == (128, 7168, 3584)


@pytest.mark.parametrize("cells", [
    # the real export's MatMulV2 row: K does not agree in any orientation
    ("81920,4096;8192,512", "DT_BF16;DT_BF16", "ND;ND", "4096,512", "DT_BF16"),
    # batched operand
    ("4,128,7168;3584,7168", "DT_BF16;DT_BF16", "ND;ND", "4,128,3584", "DT_BF16"),
    # one operand only
    ("128,7168", "DT_BF16", "ND", "128,7168", "DT_BF16"),
])
def test_non_gemm_shapes_fall_back_to_the_generic_signature(cells) -> None:
    assert sig("MatMulV2", *cells) == sig("SomethingElse", *cells)
    assert sig("MatMulV2", *cells)[0] == "generic"


# -- Index, Slice / Transpose, DispatchFFNCombine ---------------------------------------------

def test_index_is_slot_zero_plus_index_length() -> None:
    a = sig("Index", "1024,7168;1;1;128", "DT_BF16;INT64;INT64;INT64", "ND;ND;ND;ND",
            "128,7168", "DT_BF16")
    b = sig("Index", "1024,7168;1;1;128,1", "DT_BF16;INT64;INT64;INT32", "ND;ND;ND;ND",
            "128,1,7168", "DT_BF16")
    longer = sig("Index", "1024,7168;1;1;256", "DT_BF16;INT64;INT64;INT64", "ND;ND;ND;ND",
                 "256,7168", "DT_BF16")
    other_table = sig("Index", "2048,7168;1;1;128", "DT_BF16;INT64;INT64;INT64", "ND;ND;ND;ND",
                      "128,7168", "DT_BF16")
    assert a == b
    assert a != longer
    assert a != other_table


@pytest.mark.parametrize("kernel", ["Slice", "SliceAiCore", "Transpose", "TransposeAiCore"])
def test_slice_like_is_slot_zero_only_in_nd(kernel: str) -> None:
    a = sig(kernel, "4,128", "DT_BF16", "FRACTAL_NZ", "2,128", "DT_BF16")
    b = sig(kernel, "4,128;2;2", "BF16;INT64;INT64", "ND;ND;ND", "4,64", "DT_BF16")
    assert a == b
    assert a != sig(kernel, "4,128", "DT_FLOAT", "ND", "2,128", "DT_FLOAT")
    assert a != sig(kernel, "4,256", "DT_BF16", "ND", "2,128", "DT_BF16")
    assert "ND" in a


def test_dispatch_ffn_combine_ep_size_is_part_of_the_identity() -> None:
    cells = ("16,7168;256,7168,2048", "DT_BF16;DT_INT8", "ND;ND", "16,7168", "DT_BF16")
    assert sig("DispatchFFNCombine", *cells, "8") == sig("DispatchFFNCombine", *cells, "8.0")
    assert sig("DispatchFFNCombine", *cells, "8") == sig("DispatchFFNCombine", *cells, ' "8" ')
    assert sig("DispatchFFNCombine", *cells, "8") != sig("DispatchFFNCombine", *cells, "16")
    assert sig("DispatchFFNCombine", *cells, "8") != sig("DispatchFFNCombine", *cells, "")
    # other types ignore it
    assert sig("Add", *cells, "8") == sig("Add", *cells, "16")


def test_short_hash_is_stable_across_processes() -> None:
    s = sig("MatMulV2", *NK)
    here = short_hash(s)
    assert len(here) == 8 and int(here, 16) >= 0
    assert short_hash(sig("MatMulV3", *KN)) == here
    assert short_hash(sig("MatMulV2", *NK[:3], "128,3584", "FLOAT")) != here
    code = ("from pytest_npuperf.db.signature import signature, short_hash;"
            f"print(short_hash(signature('MatMulV2', *{NK!r})))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, env={"PYTHONHASHSEED": "12345"}).stdout.strip()
    assert out == here
