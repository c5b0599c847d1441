"""YAML with positions: every value keeps the file, line and column it came from.

`load_yaml` returns plain Python data plus a `Marks` table (path -> line, column) so that a
schema error can say `grid.yaml:12:7: patterns.matmul.inputs[1]: ...`. Invalid YAML and
duplicate mapping keys are errors with the position PyYAML reports.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import yaml

from .errors import ConfigError

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


def parse_yaml_text(text: str, source: str) -> tuple[object, Marks]:
    marks = Marks(source)
    loader = yaml.SafeLoader(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return None, marks
        return _convert(node, (), marks, loader), marks
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        where = f"{source}:{mark.line + 1}:{mark.column + 1}" if mark else source
        problem = " ".join(p for p in (exc.context, exc.problem) if p)
        raise ConfigError(f"{where}: invalid YAML: {problem}") from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"{source}: invalid YAML: {str(exc).splitlines()[0]}") from None
    finally:
        loader.dispose()


def load_yaml(path: str | Path) -> tuple[object, Marks]:
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError(f"{path}: no such file") from None
    except IsADirectoryError:
        raise ConfigError(f"{path}: is a directory, not a YAML file") from None
    except UnicodeDecodeError:
        raise ConfigError(f"{path}: not UTF-8 text") from None
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read: {exc.strerror or exc}") from None
    return parse_yaml_text(text, str(path))
