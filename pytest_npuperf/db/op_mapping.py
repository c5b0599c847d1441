"""`op_mapping.yaml`: which kernel tables the simulator reads for each of its operators.

msmodeling's `ProfilingDataSource` (the simulator that costs a model's operators from this
database) maps every operator it meets to kernel types through the `op_mapping.yaml` of the
version directory; without one every lookup misses (docs/format.md §1). Its `operator_mappings`
name kernel types (`kernel_type`, `alternate_kernel_types`, `sub_kernels`, ...) and its
`communication_data_ref` points at the collective tables (`<DEVICE>/hccl/v<CANN>/`).

Every writer of a database stages the file in the transaction that writes the tables
(`stage_op_mapping`, through `kernels.op_mapping.ensure_op_mapping`):

- an existing file is kept byte for byte, unless npuperf generated it and nobody edited it
  since (its first line carries the hash of the rest): then it is generated again, so that new
  kernel tables and collective tables appear in it;
- a new database gets its source database's file (a device copy of a database), else one
  generated from the kernel catalog and the tables the directory holds.

This module knows the file and the directory; what a generated file maps comes from the
caller (`kernels.op_mapping`, from the kernel catalog).
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from .errors import ContractError, NpuperfError, os_error
from .files import read_bounded
from .layout import (
    FRAMEWORK_DIR,
    HCCL_DIR,
    OP_MAPPING_FILE,
    StackVersions,
    is_version_dir_name,
    parse_version_dir,
)
from .transaction import FileStamp, Transaction

GENERATED_MARK = "# npuperf-generated sha256="
MAX_OP_MAPPING_BYTES = 4 << 20
COLLECTIVE_PREFIX = "hcom_"

KEPT, COPIED, GENERATED, REGENERATED = "kept", "copied", "generated", "regenerated"


@dataclass
class MappingContext:
    """What a generated op_mapping.yaml is made from: the directory once the transaction
    commits (its kernel tables, the collective tables beside it) and its versions."""

    version_dir: Path
    kernel_types: list[str]
    collective_types: list[str] = field(default_factory=list)
    communication_ref: str | None = None
    versions: StackVersions | None = None
    device: str | None = None


def _digest(body: str) -> str:
    return hashlib.sha256(body.encode("utf-8")).hexdigest()


class _Dumper(yaml.SafeDumper):
    """Mappings as blocks, lists on one line: `alternate_kernel_types: [MatMulV3, ...]`, the
    look of the reference files."""


_Dumper.add_representer(list, lambda dumper, value: dumper.represent_sequence(
    "tag:yaml.org,2002:seq", value, flow_style=True))


def render_generated(doc: dict, comment: Iterable[str] = ()) -> str:
    """The text of a generated file: the mark (hash of the rest), comment lines, the YAML."""
    lines = [f"# {line}".rstrip() for line in comment]
    body = "\n".join(lines) + ("\n" if lines else "")
    body += yaml.dump(doc, Dumper=_Dumper, sort_keys=False, default_flow_style=False,
                      width=100, allow_unicode=True)
    return f"{GENERATED_MARK}{_digest(body)}\n{body}"


def is_unedited_generated(text: str) -> bool:
    """True for a file npuperf generated whose content is still what it wrote."""
    head, sep, body = text.partition("\n")
    return bool(sep) and head.startswith(GENERATED_MARK) and \
        head[len(GENERATED_MARK):].strip() == _digest(body)


def read_text_bounded(path: Path) -> str:
    data = read_bounded(path, MAX_OP_MAPPING_BYTES, "an op_mapping.yaml")
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError:
        raise ContractError(f"{path}: not UTF-8 text") from None


def load_op_mapping(path: Path) -> dict:
    """The parsed file; ContractError when it is not a YAML mapping."""
    text = read_text_bounded(path)
    try:
        doc = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" (line {mark.line + 1})" if mark is not None else ""
        raise ContractError(f"{path}: invalid YAML{where}") from None
    if doc is None:
        doc = {}
    if not isinstance(doc, dict):
        raise ContractError(f"{path}: not a YAML mapping")
    return doc


def referenced_kernel_types(doc: dict) -> set[str]:
    """Every kernel type the operator mappings name (`kernel_type`, `primary_kernel_type`,
    `alternate_kernel_types`, `sub_kernels`, ... at any depth)."""
    found: set[str] = set()

    def walk(node: object) -> None:
        if isinstance(node, dict):
            for key, value in node.items():
                name = str(key)
                if isinstance(value, str) and name.endswith("kernel_type"):
                    found.add(value)
                elif isinstance(value, list) and (name.endswith("kernel_types")
                                                  or name == "sub_kernels"):
                    found.update(v for v in value if isinstance(v, str))
                else:
                    walk(value)
        elif isinstance(node, list):
            for item in node:
                walk(item)

    walk(doc.get("operator_mappings") or {})
    return found


def default_hccl_dir(version_dir: Path) -> Path | None:
    """`<DEVICE>/hccl/v<CANN>` of a `<DEVICE>/vllm_ascend/<VERSION>` directory."""
    version_dir = Path(os.path.abspath(version_dir))
    if version_dir.parent.name != FRAMEWORK_DIR or not is_version_dir_name(version_dir.name):
        return None
    cann = parse_version_dir(version_dir.name).cann
    return version_dir.parent.parent / HCCL_DIR / f"v{cann}"


def version_dirs_for_hccl(hccl_dir: str | Path) -> list[Path]:
    """The version directories that read `<DEVICE>/hccl/v<CANN>` (every
    `<DEVICE>/vllm_ascend/vllm*_torch*_cann<CANN>`): where a writer of collective tables calls
    `ensure_op_mapping(tx, version_dir, hccl_dir=...)` so that their `communication_data_ref`
    follows (a generated file is regenerated, someone's own is kept)."""
    hccl = Path(os.path.abspath(hccl_dir))
    framework = hccl.parent.parent / FRAMEWORK_DIR
    if hccl.parent.name != HCCL_DIR or not hccl.name.startswith("v") or not framework.is_dir():
        return []
    return sorted(d for d in framework.iterdir() if d.is_dir() and is_version_dir_name(d.name)
                  and parse_version_dir(d.name).cann == hccl.name[1:])


def _names(directory: Path, staged: Iterable[Path], keep: Callable[[str], bool]) -> list[str]:
    names = set()
    if directory.is_dir():
        try:
            names.update(os.listdir(directory))
        except OSError as exc:
            raise os_error(directory, exc) from None
    names.update(p.name for p in staged if Path(os.path.abspath(p.parent))
                 == Path(os.path.abspath(directory)))
    return sorted(n[:-4] for n in names if n.endswith(".csv") and not n.startswith(".")
                  and keep(n))


def mapping_context(version_dir: Path, *, staged: Iterable[Path] = (),
                    hccl_dir: Path | None = None) -> MappingContext:
    """The directory as it will be once `staged` files are in place."""
    version_dir = Path(version_dir)
    staged = list(staged)
    kernel_types = _names(version_dir, staged, lambda n: not n.startswith(COLLECTIVE_PREFIX))
    hccl = Path(hccl_dir) if hccl_dir is not None else default_hccl_dir(version_dir)
    collectives = _names(hccl, staged, lambda n: n.startswith(COLLECTIVE_PREFIX)) if hccl else []
    ref = None
    if collectives and hccl is not None:
        ref = Path(os.path.relpath(os.path.abspath(hccl), os.path.abspath(version_dir))).as_posix()
        ref = ref.rstrip("/") + "/"
    absolute = Path(os.path.abspath(version_dir))
    versions = device = None
    if is_version_dir_name(absolute.name):
        versions = parse_version_dir(absolute.name)
        if absolute.parent.name == FRAMEWORK_DIR:
            device = absolute.parent.parent.name
    return MappingContext(version_dir, kernel_types, collectives, ref, versions, device)


def _referenced_hccl(version_dir: Path, text: str) -> Path | None:
    """The directory a generated file's `communication_data_ref` names, when it still holds
    collective tables: a writer of collective tables may have pointed it elsewhere than the
    default `v<CANN>` (a gloo or nccl version), and a later kernel write keeps that."""
    # The file is one npuperf generated (unedited): its key is a top-level line, and
    # parsing that line alone spares a whole-file YAML parse (tens of ms) on every write.
    line = next((x for x in text.splitlines() if x.startswith("communication_data_ref:")), "")
    try:
        ref = (yaml.safe_load(line) or {}).get("communication_data_ref")
    except (yaml.YAMLError, AttributeError):
        return None
    if not isinstance(ref, str) or not ref.strip():
        return None
    hccl = Path(os.path.normpath(Path(os.path.abspath(version_dir)) / ref))
    return hccl if _names(hccl, (), lambda n: n.startswith(COLLECTIVE_PREFIX)) else None


def stage_op_mapping(tx: Transaction, version_dir: str | Path,
                     build: Callable[[MappingContext], str], *, source: str | Path | None = None,
                     hccl_dir: str | Path | None = None) -> str:
    """Stage `version_dir/op_mapping.yaml` in `tx` (after the tables it writes); returns what
    was done: kept, copied (from `source`'s), generated or regenerated.

    `build(context)` returns the text of a generated file (`render_generated`).
    """
    version_dir = Path(version_dir)
    target = version_dir / OP_MAPPING_FILE
    hccl = Path(hccl_dir) if hccl_dir is not None else None
    if os.path.lexists(target):
        if not target.is_file():
            raise NpuperfError(f"{target}: not a file")
        stamp = FileStamp.of(target)
        text = read_text_bounded(target)
        if not is_unedited_generated(text):
            return KEPT  # someone's own mapping: never rewritten
        if hccl is None:  # a kernel writer: the collective tables stay those it named
            hccl = _referenced_hccl(version_dir, text)
        fresh = build(mapping_context(version_dir, staged=tx.staged, hccl_dir=hccl))
        if fresh == text:
            return KEPT
        tx.stage_text(target, fresh, expect=stamp)
        return REGENERATED
    if source is not None:
        theirs = Path(source) / OP_MAPPING_FILE
        if theirs.is_file() and Path(os.path.abspath(theirs)) != Path(os.path.abspath(target)):
            read_text_bounded(theirs)  # a huge or binary file is refused before it is copied
            try:
                data = theirs.read_bytes()
            except OSError as exc:
                raise os_error(theirs, exc) from None
            tx.stage_bytes(target, data, expect=None)
            return COPIED
    tx.stage_text(target, build(mapping_context(version_dir, staged=tx.staged, hccl_dir=hccl)),
                  expect=None)
    return GENERATED
