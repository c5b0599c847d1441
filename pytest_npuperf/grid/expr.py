"""A small, safe expression language for grid templates and constraints.

Expressions are parsed with `ast` and checked node by node *before* anything runs: only
numbers, names, `+ - * / // % **`, unary `-`/`+`, comparisons, `and`/`or`/`not`,
`a if c else b`, and calls to `min`, `max`, `abs`, `align(x, a)` (= ceil(x / a) * a) and
`ceil_div(x, a)` are accepted. Attribute access, subscripts, any other call (`eval`,
`__import__`, ...), lambdas, comprehensions, strings and names starting with `_` are
rejected at parse time: such an expression is never executed.

A checked tree is compiled to a code object that runs with no builtins and only the functions
above in scope. Every arithmetic result goes through a magnitude guard (`**` before it is
computed), so that `10 ** 10 ** 10`, or constants squaring each other (`a1: a0 * a0`, `a2:
a1 * a1`, ...), are an error rather than a hang. Expressions nested deeper than MAX_DEPTH are
refused when parsed. Where the compiled grid templates run an expression per candidate,
`magnitude_bound` proves from the iterators' values that no result can exceed the guard, and the
unguarded (faster) tree is used; otherwise the guarded one. Shape templates are tuples of
expressions: `"(M, K)"`, `"(D,)"`, `"()"` (an empty slot).
"""

from __future__ import annotations

import ast
import copy
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import CodeType

from ..db.errors import clip
from .errors import ExpressionError, UnsafeExpressionError

MAX_EXPRESSION_LENGTH = 2000
MAX_DEPTH = 100
MAX_MAGNITUDE = 2 ** 128
"""Largest absolute value any arithmetic result may have (shapes, flops and bytes are far below)."""
_MAX_EXPONENT = 1024
_MAX_POWER_BASE = 2 ** 64


def align(x, a):
    """`x` rounded up to a multiple of `a`: ceil(x / a) * a."""
    if isinstance(x, int) and isinstance(a, int):
        return -(-x // a) * a
    return math.ceil(x / a) * a


def ceil_div(x, a):
    """ceil(x / a), exact for integers."""
    if isinstance(x, int) and isinstance(a, int):
        return -(-x // a)
    return math.ceil(x / a)


def _too_large(value) -> OverflowError:
    text = f"{value:.3g}" if isinstance(value, float) else f"about 2**{int(value).bit_length()}"
    return OverflowError(f"a result of {text} is beyond the {MAX_MAGNITUDE:.3g} limit "
                         f"(runaway arithmetic?)")


def guarded_pow(base, exponent):
    """`base ** exponent`, refusing results that would take unbounded time or memory."""
    if abs(exponent) > _MAX_EXPONENT or (abs(base) > _MAX_POWER_BASE and abs(exponent) > 1):
        raise OverflowError(f"{base!r} ** {exponent!r} is too large")
    magnitude = abs(base)
    if magnitude > 1 and exponent > 0 and exponent * math.log2(magnitude) > 128:
        raise OverflowError(f"{base!r} ** {exponent!r} is beyond the {MAX_MAGNITUDE:.3g} limit")
    return base ** exponent


def guard(value):
    """An arithmetic result, unless its magnitude is beyond MAX_MAGNITUDE (or not a number)."""
    if type(value) is int:
        if -MAX_MAGNITUDE <= value <= MAX_MAGNITUDE:
            return value
        raise _too_large(value)
    if abs(value) > MAX_MAGNITUDE:  # an inf too; a NaN passes and fails as a dimension
        raise _too_large(value)
    return value


FUNCTIONS: dict[str, object] = {"min": min, "max": max, "abs": abs, "align": align,
                                "ceil_div": ceil_div}
_ARITY: dict[str, tuple[int, int | None]] = {"min": (2, None), "max": (2, None), "abs": (1, 1),
                                              "align": (2, 2), "ceil_div": (2, 2)}
POW_HELPER = "_pow"
GUARD_HELPER = "_guard"
# What a compiled expression sees: the functions above, nothing else (no builtins).
RUNTIME_GLOBALS: dict[str, object] = {"__builtins__": {}, **FUNCTIONS, POW_HELPER: guarded_pow,
                                      GUARD_HELPER: guard}

_BINOPS = {ast.Add: "+", ast.Sub: "-", ast.Mult: "*", ast.Div: "/", ast.FloorDiv: "//",
           ast.Mod: "%", ast.Pow: "**"}
_UNARY = (ast.USub, ast.UAdd, ast.Not)
_COMPARE = (ast.Eq, ast.NotEq, ast.Lt, ast.LtE, ast.Gt, ast.GtE)
_REJECTED = {
    ast.Attribute: "attribute access", ast.Subscript: "subscripts", ast.Lambda: "lambdas",
    ast.ListComp: "comprehensions", ast.SetComp: "comprehensions",
    ast.DictComp: "comprehensions", ast.GeneratorExp: "comprehensions",
    ast.Starred: "starred arguments", ast.List: "lists", ast.Dict: "dicts", ast.Set: "sets",
    ast.JoinedStr: "strings", ast.NamedExpr: "assignment expressions", ast.Await: "await",
    ast.Yield: "yield", ast.YieldFrom: "yield", ast.Slice: "slices",
}


def _describe(node: ast.AST) -> str:
    for kind, text in _REJECTED.items():
        if isinstance(node, kind):
            return text
    if isinstance(node, ast.Constant):
        return f"the constant {node.value!r} (only numbers are allowed)"
    if isinstance(node, ast.BinOp):
        return f"the operator {type(node.op).__name__}"
    if isinstance(node, ast.UnaryOp):
        return f"the unary operator {type(node.op).__name__}"
    if isinstance(node, ast.Compare):
        return "this comparison (only == != < <= > >= are allowed)"
    return f"{type(node).__name__} nodes"


class _Checker(ast.NodeVisitor):
    """Raises UnsafeExpressionError at the first construct outside the language."""

    def __init__(self, fail) -> None:
        self.fail = fail

    def generic_visit(self, node: ast.AST) -> None:
        self.fail(f"{_describe(node)} not allowed")

    def visit_Expression(self, node: ast.Expression) -> None:
        self.visit(node.body)

    def visit_Constant(self, node: ast.Constant) -> None:
        if type(node.value) not in (int, float, bool):
            self.generic_visit(node)
        value = node.value
        if isinstance(value, float) and not math.isfinite(value):
            self.fail(f"the number {value!r} is not finite")
        if abs(value) > MAX_MAGNITUDE:
            self.fail(f"the number {clip(value)} is beyond the {MAX_MAGNITUDE:.3g} limit")

    def visit_Name(self, node: ast.Name) -> None:
        if node.id.startswith("_"):
            self.fail(f"the name {node.id!r} is not allowed (names starting with '_' are "
                      f"reserved)")
        if not isinstance(node.ctx, ast.Load):
            self.fail(f"assignment to {node.id!r} not allowed")

    def visit_BinOp(self, node: ast.BinOp) -> None:
        if type(node.op) not in _BINOPS:
            self.generic_visit(node)
        self.visit(node.left)
        self.visit(node.right)

    def visit_UnaryOp(self, node: ast.UnaryOp) -> None:
        if not isinstance(node.op, _UNARY):
            self.generic_visit(node)
        self.visit(node.operand)

    def visit_BoolOp(self, node: ast.BoolOp) -> None:
        for value in node.values:
            self.visit(value)

    def visit_Compare(self, node: ast.Compare) -> None:
        if not all(isinstance(op, _COMPARE) for op in node.ops):
            self.generic_visit(node)
        self.visit(node.left)
        for comparator in node.comparators:
            self.visit(comparator)

    def visit_IfExp(self, node: ast.IfExp) -> None:
        self.visit(node.test)
        self.visit(node.body)
        self.visit(node.orelse)

    def visit_Call(self, node: ast.Call) -> None:
        func = node.func
        if not isinstance(func, ast.Name) or func.id not in FUNCTIONS:
            callee = func.id if isinstance(func, ast.Name) else ast.unparse(func)
            self.fail(f"calling {callee!r} is not allowed (only "
                      f"{', '.join(FUNCTIONS)} may be called)")
        if node.keywords:
            self.fail(f"keyword arguments to {func.id}() are not allowed")
        for arg in node.args:
            self.visit(arg)
        low, high = _ARITY[func.id]
        count = len(node.args)
        if count < low or (high is not None and count > high):
            want = f"{low}" if low == high else f"at least {low}"
            self.fail(f"{func.id}() takes {want} argument(s), got {count}")


class _PowToCall(ast.NodeTransformer):
    def visit_BinOp(self, node: ast.BinOp) -> ast.AST:
        self.generic_visit(node)
        if isinstance(node.op, ast.Pow):
            return ast.copy_location(
                ast.Call(func=ast.Name(POW_HELPER, ast.Load()), args=[node.left, node.right],
                         keywords=[]), node)
        return node


class _Guarded(ast.NodeTransformer):
    """Every arithmetic result (and every call to align / ceil_div) through the guard."""

    def visit_BinOp(self, node: ast.BinOp) -> ast.AST:
        self.generic_visit(node)
        return ast.copy_location(ast.Call(func=ast.Name(GUARD_HELPER, ast.Load()), args=[node],
                                          keywords=[]), node)

    def visit_Call(self, node: ast.Call) -> ast.AST:
        self.generic_visit(node)
        if isinstance(node.func, ast.Name) and node.func.id in ("align", "ceil_div"):
            return ast.copy_location(ast.Call(func=ast.Name(GUARD_HELPER, ast.Load()),
                                              args=[node], keywords=[]), node)
        return node


def _depth(tree: ast.AST) -> int:
    deepest = 0
    stack = [(tree, 1)]
    while stack:
        node, depth = stack.pop()
        deepest = max(deepest, depth)
        stack.extend((child, depth + 1) for child in ast.iter_child_nodes(node))
    return deepest


def magnitude_bound(tree: ast.AST, bounds: Mapping[str, float]) -> float | None:
    """The largest absolute value `tree` or any part of it can take when each name's value is
    at most `bounds[name]` in absolute value; None when no bound can be proven (a division by
    something that may be near zero, an unknown name)."""
    worst = 0.0

    def visit(node: ast.AST) -> float | None:
        nonlocal worst
        value = _bound(node, visit, bounds)
        if value is None:
            return None
        worst = max(worst, value)
        return value

    top = visit(tree)
    return None if top is None else worst


def _bound(node: ast.AST, visit, bounds: Mapping[str, float]) -> float | None:
    if isinstance(node, ast.Expression):
        return visit(node.body)
    if isinstance(node, ast.Constant):
        return abs(float(node.value))
    if isinstance(node, ast.Name):
        return bounds.get(node.id)
    if isinstance(node, ast.UnaryOp):
        inner = visit(node.operand)
        return None if inner is None else (1.0 if isinstance(node.op, ast.Not) else inner)
    if isinstance(node, (ast.Compare,)):
        parts = [visit(node.left), *(visit(c) for c in node.comparators)]
        return None if None in parts else 1.0
    if isinstance(node, ast.BoolOp):  # `a or b` is one of its operands
        parts = [visit(v) for v in node.values]
        return None if None in parts else max(parts)
    if isinstance(node, ast.IfExp):
        parts = [visit(node.test), visit(node.body), visit(node.orelse)]
        return None if None in parts else max(parts[1:])
    if isinstance(node, ast.BinOp):
        left, right = visit(node.left), visit(node.right)
        if left is None or right is None:
            return None
        op = type(node.op)
        if op in (ast.Add, ast.Sub):
            return left + right
        if op is ast.Mult:
            return left * right
        if op is ast.Mod:
            return right
        divisor = node.right.value if isinstance(node.right, ast.Constant) else None
        if op in (ast.Div, ast.FloorDiv) and divisor and abs(divisor) >= 1:
            return left + 1
        return None
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
        args = [visit(a) for a in node.args]
        if None in args:
            return None
        name = node.func.id
        if name in ("min", "max", "abs"):
            return max(args)
        if name == POW_HELPER:
            return float(MAX_MAGNITUDE)  # guarded_pow refuses anything larger
        divisor = node.args[1].value if len(node.args) == 2 and isinstance(
            node.args[1], ast.Constant) else None
        if name in ("align", "ceil_div") and divisor and abs(divisor) >= 1:
            return args[0] + abs(divisor)
        return None
    return None


def _names(tree: ast.AST) -> frozenset[str]:
    return frozenset(n.id for n in ast.walk(tree) if isinstance(n, ast.Name)
                     and n.id not in FUNCTIONS and n.id not in (POW_HELPER, GUARD_HELPER))


def _parse(text: str, where: str) -> ast.Expression:
    if not isinstance(text, str):
        raise ExpressionError(f"{where}: expected an expression, got {clip(text)}")
    if len(text) > MAX_EXPRESSION_LENGTH:
        raise ExpressionError(f"{where}: expression of {len(text)} characters is too long "
                              f"(at most {MAX_EXPRESSION_LENGTH})")
    source = text.strip()
    if not source:
        raise ExpressionError(f"{where}: empty expression")
    try:
        tree = ast.parse(source, mode="eval")
    except SyntaxError as exc:
        raise ExpressionError(f"{where}: invalid expression {clip(text, 120)}: {exc.msg}") from None
    except (RecursionError, MemoryError, ValueError):
        raise ExpressionError(f"{where}: expression {clip(text)} is too deeply nested or "
                              f"malformed") from None
    if _depth(tree) > MAX_DEPTH:
        raise ExpressionError(f"{where}: expression {clip(text)} is nested more than "
                              f"{MAX_DEPTH} levels deep")
    return tree


def _check(tree: ast.AST, text: str, where: str) -> None:
    def fail(reason: str) -> None:
        raise UnsafeExpressionError(f"{where}: unsafe expression {clip(text, 120)} rejected: "
                                    f"{reason}")
    try:
        _Checker(fail).visit(tree)
    except RecursionError:
        raise ExpressionError(f"{where}: expression {clip(text, 120)} is too deeply nested") from None


@dataclass(frozen=True)
class Expr:
    """A checked expression: its text, the names it reads and a compiled code object."""

    text: str
    where: str
    tree: ast.expr = field(repr=False, compare=False)
    names: frozenset[str] = field(compare=False)
    code: CodeType = field(repr=False, compare=False)
    guarded_tree: ast.expr | None = field(default=None, repr=False, compare=False)

    def node(self, *, guarded: bool = False) -> ast.expr:
        """A fresh copy of the checked tree (`**` already routed through its guard); with
        `guarded`, every arithmetic result goes through the magnitude guard too."""
        tree = self.guarded_tree if guarded and self.guarded_tree is not None else self.tree
        return copy.deepcopy(tree)

    def bounded(self, bounds: Mapping[str, float]) -> bool:
        """Whether no part of this expression can exceed MAX_MAGNITUDE when each name is at
        most `bounds[name]` in absolute value (then the unguarded tree is safe)."""
        bound = magnitude_bound(self.tree, bounds)
        return bound is not None and bound <= MAX_MAGNITUDE

    def evaluate(self, env: Mapping[str, object]) -> object:
        try:
            return eval(self.code, RUNTIME_GLOBALS, dict(env))
        except Exception as exc:
            raise self.failure(env, exc) from None

    def failure(self, env: Mapping[str, object], exc: BaseException) -> ExpressionError:
        reason = str(exc) or type(exc).__name__
        if isinstance(exc, NameError):
            reason = f"unknown name ({reason})"
        shown = ", ".join(f"{k}={clip(env[k], 40)}" for k in sorted(self.names) if k in env)
        at = f" for {shown}" if shown else ""
        return ExpressionError(f"{self.where}: expression {clip(self.text, 120)} failed{at}: {reason}")

    def check_names(self, known: set[str] | frozenset[str]) -> None:
        unknown = sorted(self.names - set(known))
        if unknown:
            listed = ", ".join(sorted(known)) or "none"
            raise ExpressionError(f"{self.where}: unknown name(s) {', '.join(unknown)} in "
                                  f"expression {clip(self.text, 120)} (known: {listed})")

    @property
    def constant(self) -> bool:
        return not self.names


def parse_expression(text: object, *, where: str = "expression") -> Expr:
    """Parse and check one expression. Raises UnsafeExpressionError / ExpressionError."""
    if isinstance(text, (bool, int, float)):
        text = repr(text)
    tree = _parse(text, where)  # type: ignore[arg-type]
    _check(tree, text, where)  # type: ignore[arg-type]
    body = _PowToCall().visit(tree).body
    ast.fix_missing_locations(body)
    guarded = _Guarded().visit(ast.Expression(copy.deepcopy(body))).body
    ast.fix_missing_locations(guarded)
    code = compile(ast.fix_missing_locations(ast.Expression(guarded)), f"<{where}>", "eval")
    return Expr(str(text), where, body, _names(body), code, guarded)


def parse_shape(text: object, *, where: str = "shape") -> tuple[Expr, ...] | None:
    """A slot template: `"(M, K)"` -> two expressions, `"(D,)"` -> one, `"()"` or `""` -> None
    (an empty slot). A bare expression `"D"` is a 1-D slot."""
    if isinstance(text, (list, tuple)):
        parts = [parse_expression(p, where=where) for p in text]
        return tuple(parts) if parts else None
    if isinstance(text, (int, float)) and not isinstance(text, bool):
        return (parse_expression(text, where=where),)
    if not isinstance(text, str):
        raise ExpressionError(f"{where}: expected a shape like \"(M, K)\", got {clip(text)}")
    source = text.strip()
    if source in ("", "()", "[]"):
        return None
    tree = _parse(source, where)
    if isinstance(tree.body, ast.Tuple):
        elements = tree.body.elts
        if not elements:
            return None
        dims = []
        for element in elements:
            piece = ast.get_source_segment(source, element) or ast.unparse(element)
            dims.append(parse_expression(piece, where=where))
        return tuple(dims)
    return (parse_expression(source, where=where),)


def evaluate(text: str, env: Mapping[str, object] | None = None, *,
             where: str = "expression") -> object:
    """Parse, check and evaluate in one go (for tests and one-off use)."""
    expr = parse_expression(text, where=where)
    return expr.evaluate(env or {})
