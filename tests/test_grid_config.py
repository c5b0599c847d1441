"""Grid configuration: YAML errors with positions, the schema, ranges, constraints, templates."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from pytest_npuperf.db.signature import MATMUL_FAMILY
from pytest_npuperf.grid import generate_rows, load_config
from pytest_npuperf.grid.config import PACKAGED_CONFIGS, resolve_config_path
from pytest_npuperf.grid.errors import (
    ConfigError,
    ExpressionError,
    UnknownKernelError,
    UnsafeExpressionError,
)

# The kernel types of docs/format.md §10.
CONTRACT_KERNELS = (
    *MATMUL_FAMILY, "BatchMatMulV2", "QuantBatchMatmulV3", "AscendQuantV2", "DynamicQuant",
    "FusedInferAttentionScore", "RmsNorm", "AddRmsNormBias", "InterleaveRope",
    "split_qkv_rmsnorm_rope_kernel", "ReshapeAndCacheNdKernel", "KvRmsNormRopeCache", "SwiGlu",
    "SoftmaxV2", "TensorMove", "Slice", "PadV3", "Index", "GatherV2", "MaskedFill", "Transpose",
    "Sort", "ArgMaxV2", "Add", "GroupedMatmul", "MoeTokenPermute", "MoeTokenUnpermute",
    "DispatchFFNCombine", "RINGMLAPrefillBF16Kernel",
)


def write(tmp_path: Path, text: str, name: str = "grid.yaml") -> Path:
    path = tmp_path / name
    path.write_text(textwrap.dedent(text))
    return path


def add_config(tmp_path: Path, iterators: str, constraints: str = "[]",
               inputs: str = '["(T, H)", "(T, H)"]', outputs: str = '["(T, H)"]') -> Path:
    return write(tmp_path, f"""\
        patterns:
          add:
            iterators: {iterators}
            constraints: {constraints}
            inputs: {inputs}
            outputs: {outputs}
        assignments:
          Add: add
        """)


def shapes(rows) -> list[str]:
    return [r["Input Shapes"] for r in rows]


# --- YAML and schema errors ------------------------------------------------------------------

def test_invalid_yaml_names_file_line_and_column(tmp_path):
    path = write(tmp_path, """\
        patterns:
          add:
            iterators: {T: [1, 2}
        """)
    with pytest.raises(ConfigError) as info:
        load_config(path)
    message = str(info.value)
    assert message.startswith(f"{path}:3:")
    assert "invalid YAML" in message and "\n" not in message


def test_duplicate_keys_are_errors(tmp_path):
    path = write(tmp_path, """\
        patterns:
          add: {inputs: ["(1,)"], outputs: ["(1,)"]}
          add: {inputs: ["(2,)"], outputs: ["(2,)"]}
        assignments: {Add: add}
        """)
    with pytest.raises(ConfigError, match=r"grid.yaml:3:3: patterns: duplicate key 'add'"):
        load_config(path)


@pytest.mark.parametrize("text, where, message", [
    ("patern: {}\n", ":1:1: patern", "unknown top-level key 'patern'"),
    ("patterns: {}\nassignments: {Add: x}\n", ":1:11: patterns", "expected a mapping"),
    ("patterns:\n  p: {inputs: ['(1,)']}\nassignments: {Add: p}\n", ":2:6: patterns.p",
     "needs 'outputs'"),
    ("patterns:\n  p: {inputs: ['(1,)'], outputs: ['(1,)'], extra: 1}\nassignments: {Add: p}\n",
     ":2:44: patterns.p.extra", "unknown pattern key 'extra'"),
    ("patterns:\n  p: {inputs: ['(1,)'], outputs: ['(1,)']}\nassignments: {Add: q}\n",
     ":3:20: assignments.Add", "unknown pattern 'q'"),
    ("patterns:\n  p: {iterators: {T: NO_SUCH_GRID}, inputs: ['(T,)'], outputs: ['(T,)']}\n"
     "assignments: {Add: p}\n", ":2:22: patterns.p.iterators.T", "unknown grid 'NO_SUCH_GRID'"),
    ("patterns:\n  p: {inputs: ['(1,)'], outputs: ['(1,)'], input_dtypes: [DT_WHAT]}\n"
     "assignments: {Add: p}\n", "patterns.p.input_dtypes[0]", "unknown dtype 'DT_WHAT'"),
    ("patterns:\n  p: {inputs: ['(1,)', '(1,)'], outputs: ['(1,)'], input_dtypes: [DT_BF16]}\n"
     "assignments: {Add: p}\n", "patterns.p.input_dtypes", "1 dtype(s) for 2 slot(s)"),
    ("patterns:\n  p: {generator: nope}\nassignments: {Add: p}\n", "patterns.p.generator",
     "unknown generator 'nope'"),
    ("patterns:\n  p: {generator: grouped_matmul, params: {tokenz: [1]}}\n"
     "assignments: {GroupedMatmul: p}\n", "patterns.p.params.tokenz", "unknown parameter"),
    ("patterns:\n  p: {iterators: {min: [1]}, inputs: ['(1,)'], outputs: ['(1,)']}\n"
     "assignments: {Add: p}\n", "patterns.p.iterators.min", "function name"),
    ("rows: -1\npatterns:\n  p: {inputs: ['(1,)'], outputs: ['(1,)']}\nassignments: {Add: p}\n",
     ":1:7: rows", "expected a number >= 0"),
])
def test_schema_errors_name_the_place(tmp_path, text, where, message):
    path = write(tmp_path, text)
    with pytest.raises(ConfigError) as info:
        load_config(path)
    assert str(info.value).startswith(str(path) + ":")
    assert where in str(info.value) and message in str(info.value)


def test_missing_config_file(tmp_path):
    with pytest.raises(ConfigError, match="no such config file.*default, embedded_db"):
        resolve_config_path(tmp_path / "nope.yaml")


def test_packaged_configs_load():
    for name in PACKAGED_CONFIGS:
        config = load_config(name)
        assert config.assignments
    default = load_config(None)
    assert set(CONTRACT_KERNELS) <= set(default.kernel_types)


def test_unknown_kernel_lists_the_assigned_ones():
    with pytest.raises(UnknownKernelError, match="'NoSuchKernel'.*assigns patterns to MatMulV2"):
        generate_rows(["NoSuchKernel"], rows=1)


# --- iterators and ranges --------------------------------------------------------------------

@pytest.mark.parametrize("spec, values", [
    ("{min: 1, max: 10, step: 3}", [1, 4, 7, 10]),
    ("{min: 2, max: 9, step: 3}", [2, 5, 8]),
    ("{min: 4, max: 4}", [4]),
    ("{min: 1, max: 16, mul: 2}", [1, 2, 4, 8, 16]),
    ("{min: 3, max: 30, mul: 3}", [3, 9, 27]),
    ("[5, 3, 5]", [5, 3]),          # a repeated value gives one row (de-duplicated)
])
def test_ranges(tmp_path, spec, values):
    path = add_config(tmp_path, f"{{T: {spec}, H: [8]}}")
    rows = generate_rows(None, config_path=path, rows=0)["Add"]
    assert shapes(rows) == [f"{t},8;{t},8" for t in values]


@pytest.mark.parametrize("spec, message", [
    ("{min: 5, max: 1, step: 1}", "below min"),
    ("{min: 1, max: 5, step: 0}", "step must be > 0"),
    ("{min: 1, max: 5, mul: 1}", "mul must be > 1"),
    ("{min: 1, max: 5, step: 1, mul: 2}", "not both"),
    ("{max: 5}", "needs 'min' and 'max'"),
    ("{min: 1, max: 5, stride: 1}", "unknown range key 'stride'"),
    ("{min: 1, max: 100000000000, step: 1}", "at most"),
    ("[]", "empty list"),
])
def test_bad_ranges(tmp_path, spec, message):
    path = add_config(tmp_path, f"{{T: {spec}, H: [8]}}")
    with pytest.raises(ConfigError, match=message):
        load_config(path)


def test_iterator_order_and_named_grids(tmp_path):
    path = write(tmp_path, """\
        grids:
          TOKENS: [2, 1]
          WIDE: {min: 16, max: 32, step: 16}
        patterns:
          add:
            iterators: {T: TOKENS, H: WIDE}
            inputs: ["(T, H)", "(T, H)"]
            outputs: ["(T, H)"]
        assignments: {Add: add}
        """)
    rows = generate_rows(None, config_path=path, rows=0)["Add"]
    # The last iterator varies fastest; rows keep the stream order.
    assert shapes(rows) == ["2,16;2,16", "2,32;2,32", "1,16;1,16", "1,32;1,32"]


def test_tuple_iterators(tmp_path):
    path = add_config(tmp_path, '{"T, H": [[1, 8], [2, 16]]}')
    assert shapes(generate_rows(None, config_path=path, rows=0)["Add"]) == ["1,8;1,8",
                                                                             "2,16;2,16"]
    bad = add_config(tmp_path, '{"T, H": [[1, 8, 3]]}')
    with pytest.raises(ConfigError, match="expected 2 values per item"):
        load_config(bad)


def test_tuple_grid_needs_as_many_names(tmp_path):
    path = add_config(tmp_path, "{T: [1], H: model_gemm_nk}")
    with pytest.raises(ConfigError, match="tuples of 2"):
        generate_rows(None, config_path=path, rows=0, target_models="qwen3-32b")


# --- constraints, constants and templates ----------------------------------------------------

def test_constraints_keep_only_matching_points(tmp_path):
    path = add_config(tmp_path, "{T: {min: 1, max: 8}, H: [4, 8]}",
                      constraints='["T % 2 == 0", "T * H <= 32"]')
    rows = generate_rows(None, config_path=path, rows=0)["Add"]
    assert shapes(rows) == ["2,4;2,4", "2,8;2,8", "4,4;4,4", "4,8;4,8", "6,4;6,4", "8,4;8,4"]


def test_constants_and_expressions_in_shapes(tmp_path):
    path = write(tmp_path, """\
        patterns:
          pad:
            iterators: {T: [3, 9]}
            constants: {H: 16, block: "H // 2"}
            inputs: ["(T, H)", "(4,)"]
            outputs: ["(align(T, block), H)"]
            input_dtypes: [DT_BF16, DT_INT64]
        assignments: {PadV3: pad}
        """)
    rows = generate_rows(None, config_path=path, rows=0)["PadV3"]
    assert [(r["Input Shapes"], r["Output Shapes"]) for r in rows] == [
        ("3,16;4", "8,16"), ("9,16;4", "16,16")]
    assert rows[0]["Input Data Types"] == "DT_BF16;INT64"  # the profiler's spellings


def test_empty_slots_get_undefined_dtype_and_null_format(tmp_path):
    path = write(tmp_path, """\
        patterns:
          move:
            iterators: {T: [2], H: [4]}
            inputs: ["(T, H)", "()", "(T, H)"]
            outputs: ["(T, H)"]
        assignments: {TensorMove: move}
        """)
    row = generate_rows(None, config_path=path, rows=0)["TensorMove"][0]
    assert row["Input Shapes"] == "2,4;;2,4"
    assert row["Input Data Types"] == "DT_BF16;DT_UNDEFINED;DT_BF16"
    assert row["Input Formats"] == "ND;NULL;ND"


def test_unknown_name_in_constraint(tmp_path):
    path = add_config(tmp_path, "{T: [1], H: [4]}", constraints='["Q > 1"]')
    with pytest.raises(ExpressionError) as info:
        load_config(path)
    message = str(info.value)
    assert "pattern 'add'" in message and "'Q > 1'" in message and "known: H, T" in message


def test_unsafe_expression_in_config_is_rejected_unrun(tmp_path):
    marker = tmp_path / "ran"
    path = add_config(tmp_path, "{T: [1], H: [4]}",
                      constraints=f'["__import__(\'os\').system(\'touch {marker}\') == 0"]')
    with pytest.raises(UnsafeExpressionError, match="pattern 'add'.*rejected"):
        generate_rows(None, config_path=path, rows=0)
    assert not marker.exists()


def test_failing_expression_names_pattern_expression_and_point(tmp_path):
    path = add_config(tmp_path, "{T: [3, 2, 1], H: [4]}", inputs='["(T, H // (T - 1))", "(T, H)"]')
    with pytest.raises(ExpressionError) as info:
        generate_rows(None, config_path=path, rows=0)
    message = str(info.value)
    assert "pattern 'add'" in message and "'H // (T - 1)'" in message
    assert "T=1" in message and "by zero" in message
    assert str(path) in message


def test_failing_constraint_is_diagnosed(tmp_path):
    path = add_config(tmp_path, "{T: [2, 1], H: [4]}", constraints='["H % (T - 1) == 0"]')
    with pytest.raises(ExpressionError, match=r"'H % \(T - 1\) == 0' failed for H=4, T=1"):
        generate_rows(None, config_path=path, rows=0)


@pytest.mark.parametrize("dim, message", [
    ("T / 2", "gave 0.5"),
    ("T - 1", "gave 0"),
])
def test_dimensions_must_be_whole_and_positive(tmp_path, dim, message):
    path = add_config(tmp_path, "{T: [1], H: [4]}", inputs=f'["({dim}, H)", "(T, H)"]')
    with pytest.raises(ExpressionError, match=f"{message} for T=1.*whole number >= 1"):
        generate_rows(None, config_path=path, rows=0)


def test_integral_float_dimension_is_accepted(tmp_path):
    path = add_config(tmp_path, "{T: [4], H: [4]}", inputs='["(T / 2, H)", "(2, H)"]',
                      outputs='["(2, H)"]')
    assert shapes(generate_rows(None, config_path=path, rows=0)["Add"]) == ["2,4;2,4"]


def test_matmul_templates_must_be_gemms(tmp_path):
    path = write(tmp_path, """\
        patterns:
          bad:
            iterators: {M: [2], N: [3], K: [4]}
            inputs: ["(M, K)", "(N, N)"]
            outputs: ["(M, N)"]
        assignments: {MatMulV2: bad}
        """)
    with pytest.raises(ExpressionError, match="do not form a matrix product"):
        generate_rows(None, config_path=path, rows=0)
    path = write(tmp_path, """\
        patterns:
          bad:
            iterators: {M: [2]}
            inputs: ["(M, M, M)", "(M, M)"]
            outputs: ["(M, M)"]
        assignments: {MatMulV2: bad}
        """)
    with pytest.raises(ConfigError, match="two 2-D operands"):
        generate_rows(None, config_path=path, rows=0)


def test_rows_a_replay_spec_rejects_are_an_error(tmp_path):
    path = write(tmp_path, """\
        patterns:
          norm:
            iterators: {T: [2], D: [8]}
            inputs: ["(T, D)", "(D + 1,)"]
            outputs: ["(T, D)", "(T, 1)"]
        assignments: {RmsNorm: norm}
        """)
    with pytest.raises(Exception, match="pattern 'norm'.*cannot be replayed.*gamma"):
        generate_rows(None, config_path=path, rows=0)


def test_config_defaults_and_overrides(tmp_path):
    path = write(tmp_path, """\
        rows: 2
        seed: 5
        patterns:
          add:
            iterators: {T: {min: 1, max: 50}, H: [8]}
            inputs: ["(T, H)", "(T, H)"]
            outputs: ["(T, H)"]
        assignments:
          Add: {pattern: add, rows: 3}
          TensorMove: add
        """)
    rows = generate_rows(None, config_path=path)
    assert len(rows["Add"]) == 3 and len(rows["TensorMove"]) == 2
    assert rows["Add"] == generate_rows(["Add"], config_path=path, seed=5)["Add"]
    assert len(generate_rows(None, config_path=path, rows=4)["Add"]) == 4
