"""`collection_meta.yaml`: how a database was collected, beside its tables.

One file per version directory (the simulator reads only the tables and op_mapping.yaml, so it
is left alone). It records:

- `collections`: one entry per write that added rows: `npuperf grid` (theory rows), a fill
  round of `npuperf grid --fill` (what it added and why: the density violation it closes or
  the interval whose leave-one-out error it splits), `npuperf parse` (profiled rows); each
  with its time, npuperf version, the device and serving stack of the directory, the density
  standard it followed (fill) and the rows it added per kernel table;
- `reused`: rows that came from another device or version, and why (`npuperf provenance
  --reused`), e.g. a table copied from an A2 database because the A3 one lacks it.

Replays say their own: every measured row names its device and stack (`MicroBench Device`,
`MicroBench Stack`), a device copy lists its measuring stacks in `measured_stack.json`.
Writers stage the new text in the transaction that writes their tables; a file someone broke
is never overwritten (the write stops and says so).
"""

from __future__ import annotations

import datetime as _dt
import os
from collections.abc import Mapping
from pathlib import Path

import yaml

from .database import Database
from .errors import ContractError, NpuperfError
from .files import read_bounded
from .layout import FRAMEWORK_DIR, is_version_dir_name, kernel_file_name
from .measured_stack import MEASURED_STACK_FILE, read_measured_stack
from .transaction import FileStamp, Transaction

PROVENANCE_FILE = "collection_meta.yaml"
SCHEMA = "npuperf-collection/1"
MAX_BYTES = 8 << 20
_HEADER = ("# collection_meta.yaml: how this database was collected (written by npuperf grid, "
           "grid --fill,\n# parse and provenance --reused; see docs/coverage.md). The simulator "
           "does not read it.\n")


def read_provenance(directory: str | Path) -> dict:
    """The record of a version directory ({} when there is none). ContractError when the file
    is not one."""
    path = Path(directory) / PROVENANCE_FILE
    if not path.is_file():
        return {}
    try:
        doc = yaml.safe_load(read_bounded(path, MAX_BYTES, "a collection record").decode("utf-8"))
    except (yaml.YAMLError, UnicodeDecodeError):
        raise ContractError(f"{path}: not a YAML file") from None
    if doc is None:
        return {}
    if not isinstance(doc, Mapping) or doc.get("schema") != SCHEMA:
        raise ContractError(f"{path}: not a collection record (schema {SCHEMA})")
    for key in ("collections", "reused"):
        if not isinstance(doc.get(key, []), list):
            raise ContractError(f"{path}: `{key}` is not a list")
    return dict(doc)


def _device_and_stack(directory: Path) -> tuple[str, str]:
    absolute = Path(os.path.abspath(directory))
    if is_version_dir_name(absolute.name) and absolute.parent.name == FRAMEWORK_DIR:
        return absolute.parent.parent.name, absolute.name
    return "", absolute.name if is_version_dir_name(absolute.name) else ""


def collection_entry(directory: str | Path, kind: str, rows: Mapping[str, int], *,
                     version: str, when: _dt.datetime | None = None, **extra) -> dict:
    """An entry of `collections` for a write of `kind` (by npuperf `version`) that added
    `rows` per kernel table."""
    device, stack = _device_and_stack(Path(directory))
    entry = {"kind": kind,
             "when": (when or _dt.datetime.now()).isoformat(timespec="seconds"),
             "npuperf": version, **({"device": device} if device else {}),
             **({"stack": stack} if stack else {}),
             "rows": {k: int(v) for k, v in sorted(rows.items()) if v}}
    entry.update({k: v for k, v in extra.items() if v not in (None, "", [], {})})
    return entry


def render(doc: Mapping) -> str:
    body = yaml.safe_dump({"schema": SCHEMA, "collections": list(doc.get("collections", [])),
                           "reused": list(doc.get("reused", []))},
                          sort_keys=False, allow_unicode=True, width=100)
    return _HEADER + body


def stage_provenance(tx: Transaction, directory: str | Path, *, collection: dict | None = None,
                     reused: dict | None = None) -> None:
    """Stage the record with one more entry, in the transaction writing the tables."""
    path = Path(directory) / PROVENANCE_FILE
    stamp = FileStamp.of(path)
    try:
        doc = read_provenance(directory)
    except ContractError as exc:
        raise NpuperfError(f"{exc}; fix or remove it (nothing was written)") from None
    doc.setdefault("collections", [])
    doc.setdefault("reused", [])
    if collection is not None:
        doc["collections"].append(collection)
    if reused is not None:
        doc["reused"].append(reused)
    tx.stage_text(path, render(doc), expect=stamp)


def summary_lines(directory: str | Path) -> list[str]:
    """What the record says, in a few lines (for validate and coverage)."""
    try:
        doc = read_provenance(directory)
    except ContractError as exc:
        return [f"provenance: {exc}"]
    if not doc:
        return [f"provenance: no {PROVENANCE_FILE} (how the rows were collected is not "
                f"recorded)"]
    lines = []
    for entry in doc.get("collections", []):
        if not isinstance(entry, Mapping):
            continue
        rows = entry.get("rows") or {}
        added = sum(int(v) for v in rows.values()) if isinstance(rows, Mapping) else 0
        where = " ".join(str(entry.get(k)) for k in ("device", "stack") if entry.get(k))
        standard = entry.get("standard")
        std = f", standard {standard.get('version')}" if isinstance(standard, Mapping) else ""
        label = str(entry.get("kind", "?")) + (f" round {entry['round']}" if "round" in entry
                                                 else "")
        lines.append(f"provenance: {label} at {entry.get('when', '?')}: {added} row(s) in "
                     f"{len(rows)} table(s){std}" + (f" ({where})" if where else ""))
    for entry in doc.get("reused", []):
        if isinstance(entry, Mapping):
            source = " ".join(str(entry.get(k)) for k in ("from_device", "from_version")
                              if entry.get(k))
            lines.append(f"provenance: reused {entry.get('rows', 'all')} row(s) of "
                         f"{entry.get('table', '?')} from {source or '?'}: "
                         f"{entry.get('why', '')}".rstrip())
    return lines or [f"provenance: {PROVENANCE_FILE} records nothing yet"]


def measured_lines(directory: str | Path) -> list[str]:
    """The stacks that measured a device copy (measured_stack.json)."""
    record = read_measured_stack(Path(directory))
    return [f"provenance: measured with {e.get('stack')} on {record.get('device')}: "
            f"{e.get('runs')} run(s), {e.get('rows')} row(s) ({MEASURED_STACK_FILE})"
            for e in record.get("stacks", []) if isinstance(e, dict)]


def reuse_problems(directory: str | Path) -> list[str]:
    """`reused` entries naming a table the directory does not have."""
    try:
        doc = read_provenance(directory)
    except ContractError as exc:
        return [str(exc)]
    return [f"reused entry names {entry.get('table')!r}: no such kernel table here"
            for entry in doc.get("reused", []) if isinstance(entry, Mapping)
            and not (Path(directory) / kernel_file_name(str(entry.get("table", "")))).is_file()]


def record_reuse(directory: str | Path, table: str, *, from_device: str, from_version: str,
                 rows: int | None, why: str, when: _dt.datetime | None = None) -> str:
    """Record that `table`'s rows (all, or `rows` of them) came from another device or version
    of the database, and why; returns a line saying so."""
    directory = Path(directory)
    if not (directory / kernel_file_name(table)).is_file():
        raise NpuperfError(f"--reused {table}: {directory} has no {kernel_file_name(table)}")
    if not (from_device or from_version):
        raise NpuperfError("--reused needs --from-device or --from-version (where the rows "
                           "come from)")
    entry = {"table": table, "rows": rows if rows is not None else "all",
             "from_device": from_device, "from_version": from_version, "why": " ".join(why.split()),
             "when": (when or _dt.datetime.now()).isoformat(timespec="seconds")}
    with Database(directory).transaction("npuperf provenance --reused") as tx:
        stage_provenance(tx, directory, reused=entry)
    return (f"recorded: {entry['rows']} row(s) of {table} from "
            f"{' '.join(x for x in (from_device, from_version) if x)}")
