"""The safe expression evaluator of grid templates: what it allows, what it rejects unrun."""

from __future__ import annotations

import pytest

from pytest_npuperf.grid.errors import ExpressionError, UnsafeExpressionError
from pytest_npuperf.grid.expr import align, ceil_div, evaluate, parse_expression, parse_shape


@pytest.mark.parametrize("text, env, expected", [
    ("2 + 3 * 4", {}, 14),
    ("(2 + 3) * 4", {}, 20),
    ("7 // 2", {}, 3),
    ("7 % 3", {}, 1),
    ("7 / 2", {}, 3.5),
    ("2 ** 10", {}, 1024),
    ("-M + +N", {"M": 3, "N": 5}, 2),
    ("M * N - K", {"M": 2, "N": 3, "K": 1}, 5),
    ("1 <= M <= 8", {"M": 8}, True),
    ("M == 4 and N != 4", {"M": 4, "N": 5}, True),
    ("M < 2 or N >= 5", {"M": 4, "N": 5}, True),
    ("not M > 3", {"M": 4}, False),
    ("M if M > 2 else 3", {"M": 1}, 3),
    ("min(M, N, 7)", {"M": 9, "N": 8}, 7),
    ("max(M, 2 * N)", {"M": 9, "N": 8}, 16),
    ("abs(M - N)", {"M": 2, "N": 8}, 6),
    ("align(M, 8)", {"M": 13}, 16),
    ("align(M, 8)", {"M": 16}, 16),
    ("ceil_div(M, 128)", {"M": 129}, 2),
    ("ceil_div(M, 128)", {"M": 128}, 1),
    ("max(1, T // 2)", {"T": 1}, 1),
    ("2.5 * 2", {}, 5.0),
    ("True", {}, True),
])
def test_allowed_forms(text, env, expected):
    assert evaluate(text, env) == expected


def test_align_and_ceil_div_on_floats():
    assert align(5.5, 2) == 6
    assert ceil_div(5.5, 2) == 3
    assert align(0, 8) == 0


@pytest.mark.parametrize("text, reason", [
    ("M.real", "attribute access"),
    ("(1).__class__", "attribute access"),
    ("__import__('os')", "'__import__'"),
    ("eval('1')", "calling 'eval'"),
    ("open('/etc/passwd')", "calling 'open'"),
    ("exec('x = 1')", "calling 'exec'"),
    ("getattr(M, 'real')", "calling 'getattr'"),
    ("M[0]", "subscripts"),
    ("M[0:2]", "subscripts"),
    ("lambda: 1", "lambdas"),
    ("[i for i in M]", "comprehensions"),
    ("(i for i in M)", "comprehensions"),
    ("{i: i for i in M}", "comprehensions"),
    ("'text'", "only numbers"),
    ("_private + 1", "reserved"),
    ("__class__", "reserved"),
    ("min(M, key=abs)", "keyword arguments"),
    ("max(*M)", "starred"),
    ("abs(M, N)", "abs() takes 1"),
    ("min(M)", "min() takes at least 2"),
    ("(M := 3)", "assignment expressions"),
    ("M in N", "comparison"),
    ("M is N", "comparison"),
    ("[M, N]", "lists"),
    ("M @ N", "MatMult"),
    ("~M", "Invert"),
    ("None", "only numbers"),
])
def test_rejected_forms(text, reason):
    with pytest.raises(UnsafeExpressionError) as info:
        parse_expression(text, where="pattern 'p'")
    message = str(info.value)
    assert "pattern 'p'" in message and repr(text) in message
    assert reason in message
    assert "\n" not in message


def test_rejected_expression_is_never_run(tmp_path):
    marker = tmp_path / "ran"
    text = f"__import__('os').system('touch {marker}')"
    with pytest.raises(UnsafeExpressionError):
        parse_expression(text)
    with pytest.raises(UnsafeExpressionError):
        evaluate(f"open('{marker}', 'w')")
    assert not marker.exists()


def test_no_builtins_reachable():
    # Only the listed functions exist at run time, even for names that look harmless.
    with pytest.raises(ExpressionError, match="unknown name"):
        evaluate("len")
    with pytest.raises(ExpressionError):
        evaluate("print")


def test_syntax_errors_name_the_expression():
    with pytest.raises(ExpressionError, match=r"pattern 'p': invalid expression 'M \+'"):
        parse_expression("M +", where="pattern 'p'")
    with pytest.raises(ExpressionError, match="empty expression"):
        parse_expression("  ", where="pattern 'p'")


def test_failure_names_pattern_expression_and_values():
    expr = parse_expression("K // (M - 1)", where="grid.yaml:3:5: pattern 'matmul'")
    with pytest.raises(ExpressionError) as info:
        expr.evaluate({"M": 1, "K": 7, "N": 3})
    message = str(info.value)
    assert "pattern 'matmul'" in message and "'K // (M - 1)'" in message
    assert "K=7" in message and "M=1" in message and "N=3" not in message
    assert "by zero" in message


def test_power_is_guarded():
    with pytest.raises(ExpressionError, match="too large"):
        evaluate("10 ** 10 ** 10")
    with pytest.raises(ExpressionError, match="too large"):
        evaluate("(2 ** 100) ** 100")
    assert evaluate("2 ** -1") == 0.5


def test_too_long_or_deep_expressions_are_errors():
    with pytest.raises(ExpressionError, match="too long"):
        parse_expression("1 + " * 1000 + "1")
    with pytest.raises(ExpressionError):
        parse_expression("(" * 500 + "1" + ")" * 500)


def test_names_and_check_names():
    expr = parse_expression("max(M, N) * block")
    assert expr.names == {"M", "N", "block"}
    expr.check_names({"M", "N", "block"})
    with pytest.raises(ExpressionError, match=r"unknown name\(s\) block .*known: M, N"):
        expr.check_names({"M", "N"})


@pytest.mark.parametrize("text, dims", [
    ("(M, K)", ["M", "K"]),
    ("(D,)", ["D"]),
    ("D", ["D"]),
    ("(B * S, H, max(16, T // 2))", ["B * S", "H", "max(16, T // 2)"]),
    (["M", "K"], ["M", "K"]),
    (128, ["128"]),
])
def test_shape_templates(text, dims):
    slot = parse_shape(text)
    assert [d.text for d in slot] == dims


@pytest.mark.parametrize("text", ["()", "", "  ", "[]", []])
def test_empty_slot_templates(text):
    assert parse_shape(text) is None


def test_shape_template_elements_are_checked():
    with pytest.raises(UnsafeExpressionError):
        parse_shape("(M, x.y)", where="pattern 'p'")
    with pytest.raises(ExpressionError):
        parse_shape("(M, *K)", where="pattern 'p'")
