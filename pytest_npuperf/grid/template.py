"""Template patterns compiled into fast candidate streams.

A template pattern is a product of iterators, filtered by constraints, mapped through shape
templates. Evaluating the templates per candidate with an interpreter would dominate a
million-candidate run, so the checked expression trees (see expr.py) are assembled into one
generator function per (pattern, kernel type): nested `for` loops over the iterators, the
constraints as one `if`, the dims as local variables, and a `yield` of the candidate's
signature key, its memory estimate and its iterator values. The assembled tree only ever
contains the checked user expressions plus constructs built here; it runs with no builtins.

Selected candidates are turned into rows by a second assembled function that returns the slot
shapes; the row's real signature is then computed with `db.signature` and must equal the key
the stream used (an internal consistency check).
"""

from __future__ import annotations

import ast
import itertools
import sys
from collections.abc import Iterator, Mapping, Sequence

from ..db.columns import SIGNATURE_COLUMNS
from ..db.shapes import DTYPE_BYTES, NULL_FORMAT, UNDEFINED_DTYPE, Slot, format_shapes
from ..db.signature import signature, signature_kind
from ..kernels import catalog
from .config import MAX_CANDIDATES, TemplatePattern, Values, candidate_count
from .errors import ConfigError, ExpressionError
from .expr import RUNTIME_GLOBALS, Expr
from .generators import Candidate
from .sampling import Key, KeySpace, flatten_signature
from .yamlio import Marks

_FRACTAL_NZ = "FRACTAL_NZ"


class _BadDim(Exception):
    def __init__(self, index: int, value: object, values: tuple) -> None:
        super().__init__(index, value, values)
        self.index, self.value, self.values = index, value, values


class _NotGemm(Exception):
    def __init__(self, values: tuple) -> None:
        super().__init__(values)
        self.values = values


def _dim(index: int, value: object, values: tuple) -> int:
    """A dimension as an int >= 1 (an integral float is accepted), else _BadDim."""
    if type(value) is int and value >= 1:
        return value
    if type(value) is float and value.is_integer() and value >= 1:
        return int(value)
    raise _BadDim(index, value, values)


def _gemm_k(a0: int, a1: int, b0: int, b1: int, o0: int, o1: int, values: tuple) -> int:
    """K of `out(o0, o1) = a @ b` as db.signature.gemm_layout resolves it, else _NotGemm."""
    if a0 == o0 and ((b1 == a1 and b0 == o1) or (b0 == a1 and b1 == o1)):
        return a1
    if a1 == o0 and ((b1 == a0 and b0 == o1) or (b0 == a0 and b1 == o1)):
        return a0
    raise _NotGemm(values)


EVALUATION_ERRORS = (_BadDim, _NotGemm, ArithmeticError, TypeError, ValueError)
"""What evaluating a template can raise (turned into an ExpressionError by `diagnose`)."""

_HELPERS = {"_dim": _dim, "_gemm_k": _gemm_k, "_type": type, "_int": int}
DIAGNOSE_POINTS = 200_000
"""Grid points evaluated slowly, from the start, to name the one that failed."""


def _name(identifier: str) -> ast.Name:
    return ast.Name(identifier, ast.Load())


def _const(value: object) -> ast.Constant:
    return ast.Constant(value)


def _mul(nodes: Sequence[ast.expr]) -> ast.expr:
    out = nodes[0]
    for node in nodes[1:]:
        out = ast.BinOp(out, ast.Mult(), node)
    return out


def _add(nodes: Sequence[ast.expr]) -> ast.expr:
    if not nodes:
        return _const(0)
    out = nodes[0]
    for node in nodes[1:]:
        out = ast.BinOp(out, ast.Add(), node)
    return out


class CompiledTemplate:
    """One template pattern, bound to one kernel type, the target models and the key space."""

    def __init__(self, pattern: TemplatePattern, kernel_type: str, grids: Mapping[str, Values],
                 keys: KeySpace, marks: Marks, *, op_state: str, core: str) -> None:
        self.pattern = pattern
        self.kernel_type = kernel_type
        self.marks = marks
        self.op_state = pattern.op_state or op_state
        self.core = pattern.accelerator_core or core
        self.where = f"{marks.where(pattern.path)}: pattern {pattern.name!r}"
        self.groups: list[tuple[str, ...]] = [it.names for it in pattern.iterators]
        self.flat_names: list[str] = [n for g in self.groups for n in g]
        self.values: list[Values] = [self._resolve(it, grids) for it in pattern.iterators]
        self.count = candidate_count(self.values)
        if self.count > MAX_CANDIDATES:
            sizes = " x ".join(f"{', '.join(g)}: {len(v):,}" for g, v in zip(self.groups,
                                                                              self.values))
            raise ConfigError(f"{self.where}: the iterators give {self.count:,} candidates "
                              f"({sizes}); at most {MAX_CANDIDATES:,} per kernel type: narrow "
                              f"the ranges or split the pattern")
        self.constants = self._constants()
        self._bounds = self._magnitudes()
        self.in_dtypes, self.in_formats, self.out_dtypes, self.out_formats = self._layout()
        self.kind = signature_kind(kernel_type)
        self._positive_names = self._positive_ints()
        self.static_id = keys.static_id(self._static())
        namespace = {**RUNTIME_GLOBALS, **_HELPERS, **self.constants}
        module = ast.Module(body=[self._stream_function(), self._shape_function()],
                            type_ignores=[])
        code = compile(ast.fix_missing_locations(module), f"<grid pattern {pattern.name}>", "exec")
        exec(code, namespace)
        self._stream = namespace["_stream"]
        self._shapes = namespace["_shapes"]

    # -- binding -------------------------------------------------------------------------------

    def _resolve(self, iterator, grids: Mapping[str, Values]) -> Values:
        values = iterator.values.resolve(grids)
        path = iterator.values.path
        width = len(iterator.names)
        if isinstance(values, range):
            if width != 1:
                raise self.marks.error(path, f"a range gives single values; it cannot bind "
                                             f"{', '.join(iterator.names)}")
            return values
        for item in values:
            if width == 1:
                if isinstance(item, tuple):
                    raise self.marks.error(path, f"grid items are tuples of {len(item)}; bind "
                                                 f"them to as many names, e.g. "
                                                 f"\"{', '.join('ABCD'[:len(item)])}\"")
                self._check_number(item, path)
            else:
                if not isinstance(item, tuple) or len(item) != width:
                    raise self.marks.error(path, f"expected items of {width} values for "
                                                 f"{', '.join(iterator.names)}, got {item!r}")
                for part in item:
                    self._check_number(part, path)
        return values

    def _magnitudes(self) -> dict[str, float]:
        """The largest absolute value of every name: what proves an expression bounded."""
        out: dict[str, float] = {k: abs(float(v)) for k, v in self.constants.items()}
        for group, values in zip(self.groups, self.values):
            if isinstance(values, range):
                out[group[0]] = float(max(abs(values[0]), abs(values[-1]))) if len(values) else 0.0
                continue
            for i, name in enumerate(group):
                items = [v[i] for v in values] if len(group) > 1 else list(values)
                out[name] = max((abs(float(v)) for v in items), default=0.0)
        return out

    def _check_number(self, value: object, path: tuple) -> None:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise self.marks.error(path, f"template values must be numbers, got {value!r}")

    def _constants(self) -> dict[str, object]:
        env: dict[str, object] = {}
        for name, expr in self.pattern.constants.items():
            value = expr.evaluate(env)
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise ExpressionError(f"{expr.where}: expression {expr.text!r} gave {value!r}, "
                                      f"not a number")
            env[name] = value
        return env

    def _layout(self) -> tuple[list[str], list[str], list[str], list[str]]:
        layout = catalog.slot_layout(self.kernel_type)
        spec_in, spec_out = layout if layout else ((), ())
        p = self.pattern

        def side(slots, spec, dtypes, formats):
            d_out, f_out = [], []
            for i, slot in enumerate(slots):
                if slot is None:
                    d_out.append(dtypes[i] if dtypes else UNDEFINED_DTYPE)
                    f_out.append(formats[i] if formats else NULL_FORMAT)
                    continue
                default = spec[i] if i < len(spec) else None
                d_out.append(dtypes[i] if dtypes else (default.dtype if default else "DT_BF16"))
                f_out.append(formats[i] if formats else (default.format if default else "ND"))
            return d_out, f_out

        in_d, in_f = side(p.inputs, spec_in, p.input_dtypes, p.input_formats)
        out_d, out_f = side(p.outputs, spec_out, p.output_dtypes, p.output_formats)
        for dtype in (*in_d, *out_d):
            if dtype not in DTYPE_BYTES:
                raise ConfigError(f"{self.where}: unknown dtype {dtype!r}")
        return in_d, in_f, out_d, out_f

    def _positive_ints(self) -> set[str]:
        """Names whose every value is an int >= 1: dims that are just such a name need no check."""
        good = set()
        for group, values in zip(self.groups, self.values):
            if isinstance(values, range):
                if values.start >= 1 and values.step > 0:
                    good.add(group[0])
                continue
            for i, name in enumerate(group):
                items = (v[i] for v in values) if len(group) > 1 else values
                if all(type(v) is int and v >= 1 for v in items):
                    good.add(name)
        good |= {k for k, v in self.constants.items() if type(v) is int and v >= 1}
        return good

    # -- signature structure -------------------------------------------------------------------

    def _row_cells(self, inputs: Sequence[Slot], outputs: Sequence[Slot]) -> dict[str, str]:
        return {
            "Input Shapes": format_shapes(tuple(inputs)),
            "Input Data Types": ";".join(self.in_dtypes),
            "Input Formats": ";".join(self.in_formats),
            "Output Shapes": format_shapes(tuple(outputs)),
            "Output Data Types": ";".join(self.out_dtypes),
        }

    def _static(self) -> object:
        """The signature structure of this template's rows (dims do not change it)."""
        ones = [None if s is None else (1,) * len(s) for s in self.pattern.inputs]
        out_ones = [None if s is None else (1,) * len(s) for s in self.pattern.outputs]
        cells = self._row_cells(ones, out_ones)
        sig = signature(self.kernel_type, *(cells[c] for c in SIGNATURE_COLUMNS))
        static, _ = flatten_signature(sig)
        p = self.pattern
        operands_ok = (len(p.inputs) >= 2 and p.inputs[0] is not None
                       and p.inputs[1] is not None and p.outputs[0] is not None
                       and len(p.outputs[0]) >= 2)
        if self.kind == "gemm" and (not operands_ok or sig.kind != "gemm"):
            raise ConfigError(f"{self.where}: {self.kernel_type} rows need two 2-D operands "
                              f"(or FRACTAL_NZ 4-D ones) and a 2-D output")
        return static

    # -- assembling the functions --------------------------------------------------------------

    def _dim_nodes(self) -> tuple[list[ast.stmt], list[list[ast.expr] | None],
                                  list[list[ast.expr] | None]]:
        """Statements computing every dim into a local, and the locals per slot."""
        stmts: list[ast.stmt] = []
        values_tuple = ast.Tuple([_name(n) for n in self.flat_names], ast.Load())
        counter = itertools.count()

        def side(slots, prefix):
            names: list[list[ast.expr] | None] = []
            for i, slot in enumerate(slots):
                if slot is None:
                    names.append(None)
                    continue
                locals_ = []
                for j, dim in enumerate(slot):
                    local = f"_{prefix}{i}_{j}"
                    index = next(counter)
                    self._dim_exprs.append(dim)
                    guarded = not dim.bounded(self._bounds)
                    stmts.append(ast.Assign([ast.Name(local, ast.Store())],
                                            dim.node(guarded=guarded)))
                    if not (isinstance(dim.tree, ast.Name) and dim.tree.id in self._positive_names):
                        # if _type(x) is not _int or x < 1: x = _dim(index, x, values)
                        test = ast.BoolOp(ast.Or(), [
                            ast.Compare(ast.Call(_name("_type"), [_name(local)], []),
                                        [ast.IsNot()], [_name("_int")]),
                            ast.Compare(_name(local), [ast.Lt()], [_const(1)])])
                        fix = ast.Assign([ast.Name(local, ast.Store())], ast.Call(
                            _name("_dim"), [_const(index), _name(local), values_tuple], []))
                        stmts.append(ast.If(test, [fix], []))
                    node = _name(local)
                    self._local_texts.append((node, ast.dump(dim.tree)))
                    locals_.append(node)
                names.append(locals_)
            return names

        self._dim_exprs: list[Expr] = []
        self._local_texts: list[tuple[ast.expr, str]] = []
        ins = side(self.pattern.inputs, "i")
        outs = side(self.pattern.outputs, "o")
        return stmts, ins, outs

    def _memory_node(self, ins, outs) -> ast.expr:
        terms = []
        for slots, dtypes in ((ins, self.in_dtypes), (outs, self.out_dtypes)):
            for dims, dtype in zip(slots, dtypes):
                size = DTYPE_BYTES[dtype]
                if dims is None or not size:
                    continue
                factor = int(size) if float(size).is_integer() else size
                terms.append(_mul([*dims, _const(factor)]))
        return _add(terms)

    def _key_node(self, ins, outs) -> ast.expr:
        def present(slots):
            return [d for dims in slots if dims is not None for d in dims]

        trimmed = list(ins)
        while trimmed and trimmed[-1] is None:
            trimmed.pop()
        if self.kind == "gemm":
            a, b = self._nd(ins[0], self.in_formats[0]), self._nd(ins[1], self.in_formats[1])
            out = outs[0]
            o0, o1 = out[-2], out[-1]
            k = self._static_k(a, b, out)
            if k is None:
                k = ast.Call(_name("_gemm_k"), [*a, *b, o0, o1,
                                                ast.Tuple([_name(n) for n in self.flat_names],
                                                          ast.Load())], [])
            dims = [o0, k, o1, *present(trimmed[2:])]
        elif self.kind == "slice":
            dims = list(ins[0] or [])
        elif self.kind == "index":
            dims = list(ins[0] or [])
            dims.append(_mul(trimmed[-1]) if len(trimmed) > 1 else _const(0))
        else:
            dims = [*present(ins), *present(outs)]
        return ast.Tuple([_const(self.static_id), *dims], ast.Load())

    def _static_k(self, a, b, out) -> ast.expr | None:
        """K when the templates are literally (X, Y) x (Z, Y) -> (X, Z): no check per candidate."""
        if len(a) != 2 or len(b) != 2 or len(out) != 2:
            return None
        exprs = {id(node): text for node, text in self._local_texts}
        texts = [exprs.get(id(node)) for node in (*a, *b, *out)]
        if None in texts:
            return None
        a0, a1, b0, b1, o0, o1 = texts
        if a0 == o0 and b1 == a1 and b0 == o1:
            return a[1]
        return None

    @staticmethod
    def _nd(dims: list[ast.expr], fmt: str) -> list[ast.expr]:
        """ND dims of an operand; a FRACTAL_NZ (..., a, b, c, d) is the matrix (b*c, a*d)."""
        if fmt == _FRACTAL_NZ and len(dims) >= 4:
            a, b, c, d = dims[-4:]
            return [ast.BinOp(b, ast.Mult(), c), ast.BinOp(a, ast.Mult(), d)]
        return dims

    def _loops(self, inner: list[ast.stmt]) -> list[ast.stmt]:
        body = inner
        for index in reversed(range(len(self.groups))):
            group = self.groups[index]
            if len(group) == 1:
                target: ast.expr = ast.Name(group[0], ast.Store())
            else:
                target = ast.Tuple([ast.Name(n, ast.Store()) for n in group], ast.Store())
            body = [ast.For(target, _name(f"_it{index}"), body, [])]
        return body

    def _constraint_stmts(self) -> list[ast.stmt]:
        if not self.pattern.constraints:
            return []
        nodes = [c.node(guarded=not c.bounded(self._bounds)) for c in self.pattern.constraints]
        test = nodes[0] if len(nodes) == 1 else ast.BoolOp(ast.And(), nodes)
        return [ast.If(ast.UnaryOp(ast.Not(), test), [ast.Continue()], [])]

    def _function(self, name: str, body: list[ast.stmt], args: list[str]) -> ast.FunctionDef:
        arguments = ast.arguments(posonlyargs=[], args=[ast.arg(a) for a in args], vararg=None,
                                  kwonlyargs=[], kw_defaults=[], kwarg=None, defaults=[])
        extra = {"type_params": []} if sys.version_info >= (3, 12) else {}
        return ast.FunctionDef(name=name, args=arguments, body=body, decorator_list=[],
                               returns=None, **extra)

    def _stream_function(self) -> ast.FunctionDef:
        dim_stmts, ins, outs = self._dim_nodes()
        yield_value = ast.Tuple([self._key_node(ins, outs), self._memory_node(ins, outs),
                                 ast.Tuple([_name(n) for n in self.flat_names], ast.Load())],
                                ast.Load())
        inner = [*self._constraint_stmts(), *dim_stmts, ast.Expr(ast.Yield(yield_value))]
        if self.groups:
            body = self._loops(inner)
        else:  # no iterators: one grid point
            body = [ast.For(ast.Name("_point", ast.Store()), ast.Tuple([_const(0)], ast.Load()),
                            inner, [])]
        args = [f"_it{i}" for i in range(len(self.groups))]
        return self._function("_stream", body, args)

    def _shape_function(self) -> ast.FunctionDef:
        dim_stmts, ins, outs = self._dim_nodes()

        def slots(side):
            return ast.Tuple([_const(None) if dims is None else ast.Tuple(dims, ast.Load())
                              for dims in side], ast.Load())

        body = [*dim_stmts, ast.Return(ast.Tuple([slots(ins), slots(outs)], ast.Load()))]
        return self._function("_shapes", body, list(self.flat_names))

    # -- running -------------------------------------------------------------------------------

    def candidates(self) -> Iterator[tuple[Key, float, tuple]]:
        """(key, memory estimate, iterator values) of every grid point the constraints keep.

        An evaluation error escapes raw (no wrapper on the hot path): pass it to `diagnose`.
        """
        return self._stream(*self.values)

    def shapes(self, values: tuple) -> tuple[tuple[Slot, ...], tuple[Slot, ...]]:
        try:
            return self._shapes(*values)
        except EVALUATION_ERRORS as exc:
            raise self.diagnose(exc) from None

    def candidate(self, values: tuple) -> Candidate:
        inputs, outputs = self.shapes(values)
        return Candidate(inputs, tuple(self.in_dtypes), tuple(self.in_formats), outputs,
                         tuple(self.out_dtypes), tuple(self.out_formats),
                         variables=dict(zip(self.flat_names, values)))

    # -- errors --------------------------------------------------------------------------------

    def _points(self) -> Iterator[dict[str, object]]:
        for combo in itertools.product(*self.values):
            env: dict[str, object] = dict(self.constants)
            for group, value in zip(self.groups, combo):
                if len(group) == 1:
                    env[group[0]] = value
                else:
                    env.update(zip(group, value))
            yield env

    def diagnose(self, exc: BaseException) -> ExpressionError:
        """Find the grid point and expression that failed, by evaluating slowly from the start."""
        if isinstance(exc, _BadDim):
            expr = self._dim_exprs[exc.index] if exc.index < len(self._dim_exprs) else None
            env = dict(zip(self.flat_names, exc.values))
            if expr is not None:
                return ExpressionError(
                    f"{expr.where}: expression {expr.text!r} gave {exc.value!r} for "
                    f"{_show(env, expr)}: a dimension must be a whole number >= 1")
        if isinstance(exc, _NotGemm):
            env = dict(zip(self.flat_names, exc.values))
            shown = ", ".join(f"{k}={v!r}" for k, v in env.items())
            return ExpressionError(f"{self.where}: for {shown} the shapes do not form a matrix "
                                   f"product (M, K) x (N, K) -> (M, N)")
        for number, env in enumerate(self._points()):
            if number >= DIAGNOSE_POINTS:
                break
            try:
                keep = all(c.evaluate(env) for c in self.pattern.constraints)
                if not keep:
                    continue
                for dim in self._dim_exprs:
                    dim.evaluate(env)
            except ExpressionError as error:
                return error
        return ExpressionError(f"{self.where}: evaluation failed: {exc}")


def _show(env: Mapping[str, object], expr: Expr) -> str:
    names = [k for k in env if k in expr.names] or list(env)
    return ", ".join(f"{k}={env[k]!r}" for k in names)
