"""YAML with positions: every value keeps the file, line and column it came from.

`load_yaml` returns plain Python data plus a `Marks` table (path -> line, column) so that a
schema error can say `grid.yaml:12:7: patterns.matmul.inputs[1]: ...`. Invalid YAML and
duplicate mapping keys are errors with the position PyYAML reports.

Bounded: a file is read up to MAX_YAML_BYTES (`--config /dev/zero` ends at once), and a
document whose aliases would expand it past MAX_NODES values ("billion laughs") is refused
before anything is built from it: PyYAML shares an aliased node, but converting it to Python
data (and every check after that) visits it once per use.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import yaml

from ..db.errors import NpuperfError
from ..db.files import read_bounded
from .errors import ConfigError

MAX_YAML_BYTES = 4 << 20
MAX_NODES = 1_000_000

Path_ = tuple  # a path into the document: keys and list indices


def path_text(path: Path_) -> str:
    out = ""
    for part in path:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += f".{part}" if out else str(part)
    return out or "(document)"


@dataclass
class Marks:
    """Where each value of a loaded document is, for error messages."""

    source: str
    positions: dict[Path_, tuple[int, int]] = field(default_factory=dict)
    key_positions: dict[Path_, tuple[int, int]] = field(default_factory=dict)

    def where(self, path: Path_, *, key: bool = False) -> str:
        """`file:line:column: dotted.path` of the value at `path` (or its nearest parent);
        with `key`, the position of the mapping key that names it."""
        probe = tuple(path)
        if key and probe in self.key_positions:
            line, column = self.key_positions[probe]
            return f"{self.source}:{line}:{column}: {path_text(path)}"
        while probe not in self.positions and probe:
            probe = probe[:-1]
        line, column = self.positions.get(probe, (1, 1))
        return f"{self.source}:{line}:{column}: {path_text(path)}"

    def error(self, path: Path_, message: str, *, key: bool = False) -> ConfigError:
        return ConfigError(f"{self.where(path, key=key)}: {message}")


def _convert(node: yaml.Node, path: Path_, marks: Marks, constructor: yaml.SafeLoader):
    marks.positions[path] = (node.start_mark.line + 1, node.start_mark.column + 1)
    if isinstance(node, yaml.MappingNode):
        out: dict = {}
        constructor.flatten_mapping(node)
        for key_node, value_node in node.value:
            key = constructor.construct_object(key_node, deep=True)
            if isinstance(key, (list, dict)):
                raise marks.error(path, "mapping keys must be plain values")
            if key in out:
                line, column = key_node.start_mark.line + 1, key_node.start_mark.column + 1
                raise ConfigError(f"{marks.source}:{line}:{column}: {path_text(path)}: "
                                  f"duplicate key {key!r}")
            marks.key_positions[(*path, key)] = (key_node.start_mark.line + 1,
                                                 key_node.start_mark.column + 1)
            out[key] = _convert(value_node, (*path, key), marks, constructor)
        return out
    if isinstance(node, yaml.SequenceNode):
        return [_convert(item, (*path, i), marks, constructor) for i, item in enumerate(node.value)]
    return constructor.construct_object(node, deep=True)


def expanded_size(root: yaml.Node, budget: int = MAX_NODES) -> int:
    """Values the document has once every alias is expanded (merge keys included), counted
    over the shared node graph (each node's size computed once, capped past `budget`).
    A node that contains itself (a recursive alias) counts as over the budget."""
    sizes: dict[int, int] = {}
    open_nodes: set[int] = set()
    stack: list[yaml.Node] = [root]
    while stack:
        node = stack[-1]
        if id(node) in sizes:
            stack.pop()
            continue
        if isinstance(node, yaml.MappingNode):
            children = [n for pair in node.value for n in pair]
        elif isinstance(node, yaml.SequenceNode):
            children = list(node.value)
        else:
            sizes[id(node)] = 1
            stack.pop()
            continue
        missing = [c for c in children if id(c) not in sizes]
        if missing and id(node) not in open_nodes:
            open_nodes.add(id(node))
            if any(id(c) in open_nodes for c in missing):
                return budget + 1  # recursive
            stack.extend(missing)
            continue
        if missing:  # back here with children still unsized: they contain this node
            return budget + 1
        open_nodes.discard(id(node))
        sizes[id(node)] = min(1 + sum(sizes[id(c)] for c in children), budget + 1)
        stack.pop()
    return sizes[id(root)]


def parse_yaml_text(text: str, source: str) -> tuple[object, Marks]:
    marks = Marks(source)
    loader = yaml.SafeLoader(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return None, marks
        if expanded_size(node) > MAX_NODES:
            raise ConfigError(f"{source}: the document expands to more than {MAX_NODES:,} values "
                              f"through its aliases (&anchor / *alias); refusing to build it")
        return _convert(node, (), marks, loader), marks
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        where = f"{source}:{mark.line + 1}:{mark.column + 1}" if mark else source
        problem = " ".join(p for p in (exc.context, exc.problem) if p)
        raise ConfigError(f"{where}: invalid YAML: {problem}") from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"{source}: invalid YAML: {str(exc).splitlines()[0]}") from None
    except RecursionError:
        raise ConfigError(f"{source}: the document is nested too deeply") from None
    finally:
        loader.dispose()


def read_bounded_text(path: str | Path, limit: int = MAX_YAML_BYTES) -> str:
    """A small text file (a config, a model file), read at most `limit` bytes: a device or a
    huge file is refused without reading the rest."""
    path = Path(path)
    try:
        data = read_bounded(path, limit, "a YAML file", "a grid config or model file is a few "
                                                        "kilobytes (is this the right file?)")
    except NpuperfError as exc:
        raise ConfigError(str(exc)) from None
    if b"\0" in data:
        raise ConfigError(f"{path}: contains NUL bytes: a binary file, not YAML")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise ConfigError(f"{path}: not UTF-8 text") from None


def load_yaml(path: str | Path) -> tuple[object, Marks]:
    path = Path(path)
    return parse_yaml_text(read_bounded_text(path), str(path))
