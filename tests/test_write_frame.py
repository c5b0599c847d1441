"""write_frame writes text tables with the csv module directly: the bytes must equal
pandas' to_csv of the same frame (quoting, missing cells, line terminators)."""

import io

import numpy as np
import pandas as pd
import pytest

from pytest_npuperf.db.transaction import write_frame

CELLS = ['"1,128;64,128"', "1,128;64,128", 'say "hi"', "", None, np.nan, "two\nlines",
         "\t12.5", "N/A", "  padded ", "x\r\ny", "a lone\rreturn"]


@pytest.mark.parametrize("terminator", ["\n", "\r\n"])
@pytest.mark.parametrize("dtype", [object, "string"])
def test_text_frame_bytes_equal_to_csv(terminator, dtype):
    rows = 120_001  # more than one block of rows
    frame = pd.DataFrame({
        "Input Shapes": pd.array([CELLS[i % len(CELLS)] for i in range(rows)], dtype=dtype),
        "Average Duration(us)": pd.array([f"{i * 0.1:.10g}" if i % 3 else "" for i in range(rows)],
                                         dtype=dtype),
        "mixed": pd.Series([i if i % 2 else 1.5 for i in range(rows)], dtype=object),
        "numpy floats": pd.Series([np.float64(i / 4) for i in range(rows)], dtype=object),
    })
    frame.attrs["lineterminator"] = terminator
    expected, written = io.StringIO(), io.StringIO()
    frame.to_csv(expected, index=False, lineterminator=terminator)
    write_frame(frame, written)
    assert written.getvalue() == expected.getvalue()


@pytest.mark.parametrize("frame", [
    pd.DataFrame({"a": [""], "b": [""]}, dtype=object),  # a row of empty cells
    pd.DataFrame({"a": [""]}, dtype=object),  # one empty field: quoted, as pandas does
    pd.DataFrame({"a": pd.Series([], dtype=object)}),
    pd.DataFrame({"n": [1.25, np.nan], "t": ["x", "y"]}),  # a numeric column: to_csv itself
])
def test_edge_frames(frame):
    expected, written = io.StringIO(), io.StringIO()
    frame.to_csv(expected, index=False, lineterminator="\n")
    write_frame(frame, written)
    assert written.getvalue() == expected.getvalue()
