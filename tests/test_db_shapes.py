"""Shape, dtype and format cells (docs/format.md §3)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pytest_npuperf.db.errors import CellError
from pytest_npuperf.db.shapes import (
    EMPTY_SHAPE_CELL,
    dtype_bytes,
    dtype_cell,
    format_cell,
    format_shapes,
    is_known_dtype,
    normalize_dtype,
    normalize_format,
    numel,
    nz_to_nd,
    parse_dtypes,
    parse_formats,
    parse_shapes,
    profiler_dtype,
    split_list,
    strip_cell,
)

GEMM = ((136, 7168), (7168, 3584))


@pytest.mark.parametrize("cell", [
    "136,7168;7168,3584",                 # plain
    '"136,7168;7168,3584"',               # literal quotes kept inside the cell
    '"""136,7168;7168,3584"""',           # the raw on-disk spelling, quotes tripled
    "(136, 7168);(7168, 3584)",           # parentheses with spaces
    " ( 136 , 7168 ) ; ( 7168 , 3584 ) ",
    "[136, 7168];[7168, 3584]",
    "'136,7168;7168,3584'",
])
def test_every_spelling_of_a_gemm_cell_parses_the_same(cell: str) -> None:
    assert parse_shapes(cell) == GEMM


def test_literal_triple_quoted_single_slot_from_a_real_export() -> None:
    # on disk: """32,3,224,224"""  -> after CSV decoding: "32,3,224,224"
    assert parse_shapes('"32,3,224,224"') == ((32, 3, 224, 224),)
    assert parse_shapes('"""32,3,224,224"""') == ((32, 3, 224, 224),)


def test_python_one_tuple_slot() -> None:
    assert parse_shapes("(128,);(4, 5)") == ((128,), (4, 5))


@pytest.mark.parametrize("token", ["", "()", "N/A", "NA", "NULL", "None", "UNDEFINED",
                                   "null", "n/a", "[]"])
def test_empty_slot_tokens_keep_their_slot(token: str) -> None:
    assert parse_shapes(f"1,512;{token};512") == ((1, 512), None, (512,))


def test_trailing_empty_slot_is_a_slot() -> None:
    # docs/format.md §3: `1,512;1,512;512;` has 4 slots.
    shapes = parse_shapes("1,512;1,512;512;")
    assert shapes == ((1, 512), (1, 512), (512,), None)
    assert format_shapes(shapes) == "1,512;1,512;512;"


@pytest.mark.parametrize("cell", ["N/A", '"N/A"', "NA", "NULL", " n/a "])
def test_whole_cell_na_means_no_shape(cell: str) -> None:
    assert parse_shapes(cell) == ()
    assert format_shapes(()) == "N/A"


def test_empty_cell_is_one_empty_slot_not_no_shape() -> None:
    # A real Add row writes Output Shapes `""` (one absent slot) and Input Shapes `;` (two).
    assert parse_shapes('""') == (None,)
    assert parse_shapes('";"') == (None, None)


def test_fia_cell_keeps_31_slots() -> None:
    # the msmodeling fixture's first row, literal quotes included
    cell = ('"128,4,128;12307,128,128;12307,128,128;;2048,2048;128;128;;;;;;;;128,512;'
            ';;;;;;;;;;;;;;;"')
    shapes = parse_shapes(cell)
    assert len(shapes) == 31
    assert shapes[14] == (128, 512)
    assert format_shapes(shapes).count(";") == 30


@pytest.mark.parametrize("cell", ["1,x;2", "1.5,2", "-1,2", "1,,2", "abc", "1;2,b"])
def test_malformed_dimension_is_a_cell_error(cell: str) -> None:
    with pytest.raises(CellError) as info:
        parse_shapes(cell)
    assert "dimension" in str(info.value)


_EMPTY_SPELLINGS = ["", "()", "N/A", "NA", "NULL", "None", "UNDEFINED"]
_slots = st.one_of(st.none(), st.lists(st.integers(0, 10**6), min_size=1, max_size=5).map(tuple))


@st.composite
def _spelled_cells(draw):
    slots = draw(st.lists(_slots, min_size=1, max_size=8))
    texts = []
    for slot in slots:
        if slot is None:
            choices = _EMPTY_SPELLINGS if len(slots) > 1 else ["", "()"]
            texts.append(draw(st.sampled_from(choices)))
        else:
            style = draw(st.sampled_from(["plain", "paren", "spaced"]))
            body = (", " if style == "spaced" else ",").join(map(str, slot))
            texts.append(body if style == "plain" else f"({body})")
    cell = ";".join(texts)
    wrap = draw(st.sampled_from(["", '"', '"""']))
    return tuple(slots), f"{wrap}{cell}{wrap}"


@given(_spelled_cells())
def test_any_spelling_parses_to_its_slots_and_round_trips(case) -> None:
    slots, cell = case
    parsed = parse_shapes(cell)
    assert parsed == slots
    text = format_shapes(parsed)
    assert len(text.split(";")) == len(slots)          # slot count kept
    assert parse_shapes(text) == parsed                # canonical text round trips


@given(st.lists(_slots, max_size=8).map(tuple))
def test_format_then_parse_is_identity(shapes) -> None:
    assert parse_shapes(format_shapes(shapes)) == shapes


@pytest.mark.parametrize("token, expected", [
    ("DT_BF16", "DT_BF16"), ("BF16", "DT_BF16"), ("bfloat16", "DT_BF16"),
    ("FLOAT16", "DT_FLOAT16"), ("DT_FLOAT16", "DT_FLOAT16"), ("fp16", "DT_FLOAT16"),
    ("torch.float16", "DT_FLOAT16"), ("FLOAT", "DT_FLOAT"), ("float32", "DT_FLOAT"),
    ("DT_FLOAT", "DT_FLOAT"), ("INT8", "DT_INT8"), ("INT32", "DT_INT32"), ("INT64", "DT_INT64"),
    ("DT_UINT8", "DT_UINT8"), ("BOOL", "DT_BOOL"), ("DT_DOUBLE", "DT_DOUBLE"),
    ("DT_FLOAT8_E4M3", "DT_FLOAT8_E4M3"), ("float8_e4m3fn", "DT_FLOAT8_E4M3"),
    ("DT_FLOAT8_E5M2", "DT_FLOAT8_E5M2"), ("", "DT_UNDEFINED"), ("N/A", "DT_UNDEFINED"),
    ("DT_UNDEFINED", "DT_UNDEFINED"), (" DT_BF16 ", "DT_BF16"),
])
def test_dtype_normalisation(token: str, expected: str) -> None:
    assert normalize_dtype(token) == expected


@pytest.mark.parametrize("dtype, size", [
    ("DT_BF16", 2), ("FLOAT16", 2), ("FLOAT", 4), ("DT_FLOAT", 4), ("INT8", 1), ("DT_UINT8", 1),
    ("INT32", 4), ("INT64", 8), ("BOOL", 1), ("DT_DOUBLE", 8), ("DT_FLOAT8_E4M3", 1),
    ("DT_FLOAT8_E5M2", 1), ("DT_UNDEFINED", 0),
])
def test_dtype_bytes(dtype: str, size: float) -> None:
    assert dtype_bytes(dtype) == size
    assert is_known_dtype(dtype)


def test_unknown_dtype_has_no_size() -> None:
    assert normalize_dtype("DT_WEIRD") == "DT_WEIRD"   # kept so that signatures still compare
    assert not is_known_dtype("DT_WEIRD")
    with pytest.raises(CellError, match="unknown dtype"):
        dtype_bytes("DT_WEIRD")


@pytest.mark.parametrize("token, expected", [
    ("ND", "ND"), ("FORMAT_ND", "ND"), ("fractal_nz", "FRACTAL_NZ"), ("FRACTAL_NZ", "FRACTAL_NZ"),
    ("NCHW", "NCHW"), ("NC1HWC0", "NC1HWC0"), ("NULL", "NULL"), ("", "NULL"), ("N/A", "NULL"),
    ("FORMAT_NULL", "NULL"),
])
def test_format_normalisation(token: str, expected: str) -> None:
    assert normalize_format(token) == expected


def test_list_cells() -> None:
    assert parse_dtypes('"FLOAT; DT_BF16;INT64"') == ("DT_FLOAT", "DT_BF16", "DT_INT64")
    assert parse_formats("FORMAT_ND;FRACTAL_NZ;NULL") == ("ND", "FRACTAL_NZ", "NULL")
    assert split_list("N/A") == ()
    assert split_list("a;;b") == ("a", "", "b")


def test_strip_cell() -> None:
    assert strip_cell(None) == ""
    assert strip_cell(float("nan")) == ""
    assert strip_cell('  """1,2"""  ') == "1,2"
    assert strip_cell('"1,2') == "1,2"   # stray opening quote of a broken exporter


def test_fractal_nz_to_nd() -> None:
    # A (N, K) = (3584, 7168) weight in NZ: (K/16, N/16, 16, 16), ND = (b*c, a*d).
    assert nz_to_nd((448, 224, 16, 16)) == (224 * 16, 448 * 16)
    assert nz_to_nd((2, 448, 224, 16, 16)) == (2, 3584, 7168)   # batch dims kept
    assert nz_to_nd((128, 7168)) == (128, 7168)                  # already 2-D
    assert nz_to_nd(None) is None


def test_sizes() -> None:
    assert numel((136, 7168)) == 136 * 7168
    assert numel(None) == 0


@pytest.mark.parametrize("slots", [(None,), ((),)])
def test_a_lone_scalar_or_empty_slot_is_written_as_the_profiler_writes_it(slots) -> None:
    # An empty CSV cell reads as NaN in pandas, and the simulator's shape parser fails on it.
    assert format_shapes(slots) == EMPTY_SHAPE_CELL == '""'
    assert parse_shapes(format_shapes(slots)) == (None,)
    assert format_shapes((None, None)) == ";"


@pytest.mark.parametrize(("token", "written"), [
    ("DT_FLOAT", "FLOAT"), ("float32", "FLOAT"), ("FLOAT", "FLOAT"), ("DT_FLOAT16", "FLOAT16"),
    ("DT_INT8", "INT8"), ("DT_INT32", "INT32"), ("INT64", "INT64"), ("DT_UINT8", "UINT8"),
    ("DT_BOOL", "BOOL"), ("BF16", "DT_BF16"), ("torch.bfloat16", "DT_BF16"),
    ("DT_BF16", "DT_BF16"), ("", "DT_UNDEFINED"), ("N/A", "DT_UNDEFINED"),
    ("float8_e4m3fn", "DT_FLOAT8_E4M3"),
])
def test_dtypes_are_written_in_the_profilers_spelling(token: str, written: str) -> None:
    assert profiler_dtype(token) == written
    assert normalize_dtype(written) == normalize_dtype(token)  # read as the same dtype


def test_dtype_and_format_lists() -> None:
    assert dtype_cell(["DT_BF16", "DT_INT64", "DT_UNDEFINED"]) == "DT_BF16;INT64;DT_UNDEFINED"
    assert format_cell(["FORMAT_ND", "fractal_nz", "", "NC1HWC0:1"]) == "ND;FRACTAL_NZ;NULL;NC1HWC0:1"
