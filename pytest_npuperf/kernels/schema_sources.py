"""Operator schemas read from the upstream source files, verbatim, for `npuperf kernels
--check --schemas DIR` (and the tests' stand-ins), in this layout:

    DIR/op-plugin/op_plugin_functions.yaml           torch_npu's operators (torch.ops.npu)
    DIR/op-plugin/atb/*.cpp                          its ATB operators (torch.ops.atb):
                                                     RingMlaAtb.cpp, ReshapeAndCachAtb.cpp
    DIR/vllm-ascend/torch_binding.cpp                torch.ops._C_ascend (vllm-ascend csrc/)
    DIR/vllm-ascend/triton/split_qkv_rmsnorm_rope.py torch.ops.vllm.qkv_rmsnorm_rope (vllm-ascend
                                                     vllm_ascend/ops/triton/linearnorm/)
    DIR/torch_npu/npu_native_functions.yaml          optional: torch_npu's own (npu_format_cast)

Each file is read the way its project builds the schemas: `- func:` entries of the YAML,
`<lib>.def("...")` string literals inside a `TORCH_LIBRARY*(namespace, lib)` block of C++
(adjacent literals joined, as the compiler does), and for the Triton op the function that
`direct_register_custom_op(op_name=..., op_func=...)` registers, whose schema torch infers
from its signature (`torch.library.infer_schema`, what vLLM's helper calls). Only excerpts of
the files are needed; the whole files read the same.
"""

from __future__ import annotations

import ast
import copy
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from ..db.errors import NpuperfError

__all__ = ["LAYOUT", "SchemaSet", "SchemaText", "read_schema_dir"]

# (path inside DIR, how it is read, namespace), in the order of the module docstring.
LAYOUT = (("op-plugin/op_plugin_functions.yaml", "yaml", "npu"),
          ("op-plugin/atb/*.cpp", "cpp", ""),
          ("vllm-ascend/torch_binding.cpp", "cpp", ""),
          ("vllm-ascend/triton/split_qkv_rmsnorm_rope.py", "triton", "vllm"),
          ("torch_npu/npu_native_functions.yaml", "yaml", "npu"))
REQUIRED = ("op-plugin/op_plugin_functions.yaml", "vllm-ascend/torch_binding.cpp",
            "vllm-ascend/triton/split_qkv_rmsnorm_rope.py")


@dataclass(frozen=True)
class SchemaText:
    namespace: str
    text: str  # torch's schema text, e.g. "npu_slice(Tensor self, int[] offsets, ...) -> Tensor"
    source: str  # the file (inside DIR) it was read from

    @property
    def name(self) -> str:
        return self.text.split("(", 1)[0].strip()


@dataclass
class SchemaSet:
    """Operator schemas by namespace and name (every overload of a name)."""

    root: Path | None = None
    texts: list[SchemaText] = field(default_factory=list)

    def add(self, found: SchemaText) -> None:
        if not any(t.namespace == found.namespace and t.name == found.name for t in self.texts):
            self.texts.append(found)  # the first definition of an overload wins

    def overloads(self, namespace: str, name: str) -> list[SchemaText]:
        return [t for t in self.texts if t.namespace == namespace
                and t.name.split(".")[0] == name]


def read_schema_dir(root: Path | str) -> SchemaSet:
    """Every schema of the source files under `root` (NpuperfError for a missing file)."""
    root = Path(root)
    if not root.is_dir():
        raise NpuperfError(f"--schemas {root}: not a directory")
    missing = [p for p in REQUIRED if not (root / p).is_file()]
    if not any((root / "op-plugin" / "atb").glob("*.cpp")):
        missing.append("op-plugin/atb/RingMlaAtb.cpp")
    if missing:
        raise NpuperfError(f"--schemas {root}: missing {', '.join(missing)} (see npuperf kernels "
                           f"--help for the layout)")
    found = SchemaSet(root)
    for pattern, kind, namespace in LAYOUT:
        for path in sorted(root.glob(pattern)):
            text = path.read_text(encoding="utf-8", errors="replace")
            source = path.relative_to(root).as_posix()
            reader = {"yaml": _yaml, "cpp": _cpp, "triton": _triton}[kind]
            for ns, schema in reader(text, namespace, source):
                found.add(SchemaText(ns, schema, source))
    return found


def _yaml(text: str, namespace: str, source: str) -> Iterator[tuple[str, str]]:
    for match in re.finditer(r"^\s*-\s*func:\s*(.+?)\s*$", text, re.MULTILINE):
        yield namespace, match.group(1).strip("'\"")


_LIBRARY = re.compile(r"TORCH_LIBRARY(?:_FRAGMENT|_EXPAND)?\s*\(\s*((?:[^(),]|\([^)]*\))+?)"
                      r"\s*,\s*(\w+)\s*\)")


def _namespace(macro_argument: str) -> str:
    """`atb` -> atb; vllm-ascend's `CONCAT(_C, _ascend)` -> _C_ascend."""
    inner = re.fullmatch(r"CONCAT\s*\((.*)\)", macro_argument.strip())
    if inner:
        return "".join(part.strip() for part in inner.group(1).split(","))
    return macro_argument.strip()


def _cpp(text: str, namespace: str, source: str) -> Iterator[tuple[str, str]]:
    """Schemas of `<lib>.def("..." "...")` calls, in the namespace of the library block
    that holds them."""
    blocks = [(m.start(), _namespace(m.group(1)), m.group(2)) for m in _LIBRARY.finditer(text)]
    for start, ns, receiver in blocks:
        for call in re.finditer(rf"\b{re.escape(receiver)}\s*\.\s*def\s*\(", text[start:]):
            literal = _string_literals(text, start + call.end())
            if literal and "(" in literal:
                yield ns, literal


def _string_literals(text: str, at: int) -> str:
    """The adjacent C string literals from `at` up to the call's first argument end, joined
    (escapes decoded, backslash-newline continuations dropped)."""
    out: list[str] = []
    i = at
    while i < len(text):
        c = text[i]
        if c == '"':
            i += 1
            while i < len(text) and text[i] != '"':
                if text[i] == "\\" and i + 1 < len(text):
                    nxt = text[i + 1]
                    if nxt != "\n":
                        out.append({"n": "\n", "t": "\t"}.get(nxt, nxt))
                    i += 2
                    continue
                out.append(text[i])
                i += 1
            i += 1
        elif c.isspace():
            i += 1
        elif text.startswith("//", i):
            i = text.find("\n", i) + 1 or len(text)
        else:
            break  # `,` or `)`: the first argument ended
    return "".join(out)


def _triton(text: str, namespace: str, source: str) -> Iterator[tuple[str, str]]:
    """The schema torch infers for each function `direct_register_custom_op` registers."""
    tree = ast.parse(text)
    functions = {node.name: node for node in ast.walk(tree) if isinstance(node, ast.FunctionDef)}
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Call) and getattr(node.func, "id", "")
                == "direct_register_custom_op"):
            continue
        kwargs = {k.arg: k.value for k in node.keywords}
        name, func = kwargs.get("op_name"), kwargs.get("op_func")
        if not (isinstance(name, ast.Constant) and isinstance(func, ast.Name)
                and func.id in functions):
            continue
        mutates = ast.literal_eval(kwargs["mutates_args"]) if "mutates_args" in kwargs else []
        yield namespace, f"{name.value}{_inferred(functions[func.id], mutates)}"


def _inferred(node: ast.FunctionDef, mutates: list[str]) -> str:
    """torch.library.infer_schema of a function given by its definition: its signature is
    rebuilt (annotations evaluated against torch alone, defaults as literals), never its
    body run."""
    import torch

    stub = copy.copy(node)
    stub.body, stub.decorator_list = [ast.Pass()], []
    for default in (*node.args.defaults, *(d for d in node.args.kw_defaults if d is not None)):
        ast.literal_eval(default)  # only literal defaults (a schema allows no others)
    module = ast.fix_missing_locations(ast.Module(body=[stub], type_ignores=[]))
    names: dict[str, object] = {"torch": torch, "__builtins__": {
        "int": int, "float": float, "bool": bool, "str": str, "list": list, "tuple": tuple}}
    exec(compile(module, "<schema>", "exec"), names)  # a signature only: the body is `pass`
    return torch.library.infer_schema(names[node.name], mutates_args=mutates)
