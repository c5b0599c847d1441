"""The hand-off between a wrapped run's child (which measures) and its parent (which
attributes kernels and writes): the child's session and every case's result, in one file.

Format `npuperf-handoff/2`, JSON lines: a header `{"schema", "session"}`, then blocks of up
to BLOCK results, one line each, column-wise: `{"count": n, "columns": {name: column}}`.
10^5 cases travel through here, and one JSON object per case (the first format) made the
parent spend seconds building and interning dicts: a list item costs a fraction of a dict.
Column names are CaseResult fields, `stats.<field>` for SampleStats' fields (null: no
statistics) and `profile.<key>` for the profile record's keys (`profile.` holds each
result's list of keys, so a missing key and a null value stay apart). A field that has its
default for every result of a block has no column. A column is one of:
- a list, one JSON value per result;
- `{"codes": [...], "values": [...]}`: few distinct values (kernel type, file, launches,
  status), each decoded once;
- `{"parts": [[...], ...], "nulls": [...]}`: lists of one length (a profile's `range_us`),
  item by item, with the results whose value is null;
- `{"like": name, "other": [[i, value], ...]}`: equal to column `name` but at a few results
  (the marker text is the case id unless msprof's limit cut it).
Samples and tracebacks are not handed off (the profile gives the samples; the statistics
stay as a fallback). The file is written whole, then renamed into place: a child that dies
while writing leaves no hand-off, and the parent says so. A damaged file, or one of another
format, is a one-line data error (ContractError).
"""

from __future__ import annotations

import dataclasses
import io
import itertools
import json
import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..db.errors import ContractError, os_error
from ..db.files import open_binary
from ..measure.result import CaseResult
from ..measure.stats import SampleStats

HANDOFF_NAME = "npuperf_handoff.jsonl"
HANDOFF_SCHEMA = "npuperf-handoff/2"
BLOCK = 20_000  # results per line: bounds the child's temporary texts
_LEFT_OUT = ("samples", "detail")
_STATS = tuple(f.name for f in dataclasses.fields(SampleStats))
_STATS_DEFAULTS = {f.name: f.default for f in dataclasses.fields(SampleStats)
                   if f.default is not dataclasses.MISSING}
_PROFILE = "profile."
_LIKE = {"profile.marker": "case_id"}
_FEW = 4  # dictionary-encode a column with at most 1 / _FEW distinct values per result


@dataclass
class Handoff:
    """What the child measured: its session (where to write) and every case's result."""

    session: dict[str, Any] = field(default_factory=dict)
    results: list[CaseResult] = field(default_factory=list)
    path: Path | None = None


_FIELDS = dataclasses.fields(CaseResult)
_DEFAULTS = {f.name: f.default for f in _FIELDS if f.default is not dataclasses.MISSING}


# -- writing --------------------------------------------------------------------------------

def _key(value: Any) -> Any:
    """A hashable key telling apart values JSON tells apart (1, 1.0 and True are not equal)."""
    if isinstance(value, list | dict):
        return json.dumps(value, sort_keys=False)
    return type(value), value


def _encode(name: str, values: list, columns: dict[str, Any]) -> Any:
    like = _LIKE.get(name)
    if like is not None and like in columns and isinstance(columns[like], list):
        other = [[i, v] for i, (v, w) in enumerate(zip(values, columns[like])) if v != w]
        if len(other) * _FEW <= len(values):
            return {"like": like, "other": other}
    keys = [_key(v) for v in values]
    codes: dict[Any, int] = {}
    distinct: list = []
    for key, value in zip(keys, values):
        if key not in codes:
            codes[key] = len(distinct)
            distinct.append(value)
            if len(distinct) * _FEW > len(values):
                break
    else:
        return {"codes": [codes[k] for k in keys], "values": distinct}
    widths = {len(v) if isinstance(v, list) else -1 for v in values if v is not None}
    if len(widths) == 1 and min(widths) > 0 and not any(
            isinstance(item, list | dict) for v in values if v is not None for item in v):
        width = widths.pop()
        return {"parts": [[None if v is None else v[j] for v in values] for j in range(width)],
                "nulls": [i for i, v in enumerate(values) if v is None]}
    return values


def _block(results: list[CaseResult]) -> dict[str, Any]:
    plain: dict[str, list] = {}
    for f in _FIELDS:
        if f.name in _LEFT_OUT or f.name in ("stats", "profile"):
            continue
        values = [getattr(r, f.name) for r in results]
        default = _DEFAULTS.get(f.name, _DEFAULTS)  # no default: always written
        if f.default_factory is not dataclasses.MISSING and f.name != "timestamp":
            default = f.default_factory()
        if any(v != default for v in values):
            plain[f.name] = values
    stats = [r.stats for r in results]
    if any(s is not None for s in stats):
        for name in _STATS:
            plain[f"stats.{name}"] = [None if s is None else getattr(s, name) for s in stats]
    profiles = [r.profile for r in results]
    if any(profiles):
        plain[_PROFILE] = [list(p) for p in profiles]
        for key in dict.fromkeys(k for p in profiles for k in p):
            plain[_PROFILE + key] = [p.get(key) for p in profiles]
    columns: dict[str, Any] = {}
    for name, values in plain.items():
        columns[name] = _encode(name, values, plain)
    return {"count": len(results), "columns": columns}


def write_handoff(path: Path, session: dict[str, Any], results: list[CaseResult]) -> None:
    """The header line, then the results a block per line; written whole, then renamed."""
    path = Path(path)
    temp = path.with_name(path.name + ".tmp")
    try:
        with open(temp, "w", encoding="utf-8") as handle:
            handle.write(json.dumps({"schema": HANDOFF_SCHEMA, "session": session},
                                    allow_nan=False, ensure_ascii=False, default=str) + "\n")
            for at in range(0, len(results), BLOCK):
                handle.write(json.dumps(_block(results[at:at + BLOCK]), allow_nan=False,
                                        ensure_ascii=False) + "\n")
        os.replace(temp, path)
    except OSError as exc:
        raise os_error(path, exc, "cannot write the hand-off") from None


# -- reading --------------------------------------------------------------------------------

class _Damaged(Exception):
    pass


def _decode(column: Any, count: int, columns: dict[str, Any], *, shared: bool = False) -> list:
    """A column's values, one per result; `shared`: lists and dicts of a dictionary-encoded
    column may be one object for several results (the caller only reads them)."""
    if isinstance(column, list):
        values = column
    elif not isinstance(column, dict):
        raise _Damaged("a column is neither a list nor an encoded column")
    elif "codes" in column:
        distinct = column["values"]
        values = list(map(distinct.__getitem__, column["codes"]))
        # Lists and dicts are copied per result (results may change theirs); texts are shared.
        if not shared and any(isinstance(v, list | dict) for v in distinct):
            if all(type(v) is list for v in distinct):
                values = list(map(list, values))
            else:
                values = [type(v)(v) if isinstance(v, list | dict) else v for v in values]
    elif "parts" in column:
        values = list(map(list, zip(*column["parts"])))
        for i in column["nulls"]:
            values[i] = None
    elif "like" in column:
        values = list(_decode(columns[column["like"]], count, columns))
        for i, value in column["other"]:
            values[i] = value
    else:
        raise _Damaged(f"unknown column encoding {sorted(column)}")
    if len(values) != count:
        raise _Damaged(f"a column has {len(values)} values for {count} results")
    return values


_NUMBER = (int, float)
_KINDS = {"str": (str,), "int": (int,), "float": _NUMBER, "dict": (dict,), "list": (list,),
          "bool": (bool,), "SampleStats": (dict,)}
_ITEMS = {"float]": _NUMBER, "int]": (int,)}  # list[float], dict[str, int], ...


def _checker(annotation: str):
    """A test of one JSON value against a field's annotation (`float | None`,
    `dict[str, float]`): its kind, null where allowed, the items' kind where it is said."""
    parts = [p.strip() for p in annotation.split("|")]
    nullable = "None" in parts
    main = parts[0]
    kinds = _KINDS.get(main.split("[")[0], (object,))
    items = next((k for tail, k in _ITEMS.items() if main.endswith(tail)), None)

    def fits(value: Any) -> bool:
        if value is None:
            return nullable
        if isinstance(value, bool) and bool not in kinds:  # JSON true is no number
            return False
        if not isinstance(value, kinds):
            return False
        if items is None:
            return True
        inner = value.values() if isinstance(value, dict) else value
        return all(isinstance(v, items) and not isinstance(v, bool) for v in inner)

    def all_fit(values: list) -> bool:
        """`all(map(fits, values))`, decided once per distinct type where the type alone
        decides (every value but a list or dict whose items are checked): 10^5 results x
        tens of columns were millions of calls."""
        for kind in set(map(type, values)):
            if items is not None and kind in (list, dict):
                if not all(map(fits, values)):
                    return False
            elif not fits(next(v for v in values if type(v) is kind)):
                return False
        return True
    return fits, all_fit


_FITS = {f.name: _checker(str(f.type)) for f in dataclasses.fields(CaseResult)}
_FITS.update({f"stats.{f.name}": _checker(f"{f.type} | None")
              for f in dataclasses.fields(SampleStats)})


def _check_types(name: str, values: list) -> None:
    checker = _FITS.get(name)
    if checker is None:
        return  # a column of another version: dropped
    fits, all_fit = checker
    if all_fit(values):
        return
    bad = next((v for v in values if not fits(v)), _FITS)
    if bad is not _FITS:
        raise _Damaged(f"column {name!r} holds {json.dumps(bad)[:40]}, not a value of its type")


def _profiles(columns: dict[str, Any], count: int) -> list[dict]:
    if _PROFILE not in columns:
        return [{} for _ in range(count)]
    keys = _decode(columns[_PROFILE], count, columns, shared=True)
    # Checked once per distinct list of keys (every result of a run has the same).
    damaged = _Damaged(f"column {_PROFILE!r} holds something else than lists of key names")
    if not set(map(type, keys)) <= {list}:
        raise damaged
    try:
        key_sets = set(map(tuple, keys))
    except TypeError:  # an unhashable item: no key name
        raise damaged from None
    if not all(isinstance(n, str) for ks in key_sets for n in ks):
        raise damaged
    values = {k: _decode(columns[_PROFILE + k], count, columns)
              for k in dict.fromkeys(k for ks in key_sets for k in ks)}
    if len(key_sets) == 1 and keys[0]:  # the usual case: every result has the same keys
        names = tuple(keys[0])
        return [dict(zip(names, row)) for row in zip(*(values[k] for k in names))]
    return [{k: values[k][i] for k in ks} for i, ks in enumerate(keys)]


def _decoded(name: str, columns: dict[str, Any], count: int) -> list:
    values = _decode(columns[name], count, columns)
    _check_types(name, values)
    return values


def _results(block: dict[str, Any]) -> list[CaseResult]:
    count = block["count"]
    columns = block["columns"]
    if not isinstance(count, int) or isinstance(count, bool) or not isinstance(columns, dict):
        raise _Damaged("a block needs a whole count and a columns object")
    decoded = {name: _decoded(name, columns, count) for name in columns
               if not name.startswith((_PROFILE, "stats."))}
    if "stats.samples" in columns:
        parts = [_decoded(f"stats.{n}", columns, count) if f"stats.{n}" in columns
                 else itertools.repeat(_STATS_DEFAULTS[n]) for n in _STATS]
        decoded["stats"] = [None if row[0] is None else SampleStats(*row) for row in zip(*parts)]
    decoded["profile"] = _profiles(columns, count)
    arguments = []
    for f in _FIELDS:
        if f.name in decoded:
            arguments.append(decoded[f.name])
        elif f.default is not dataclasses.MISSING:
            arguments.append(itertools.repeat(f.default, count))
        elif f.default_factory is not dataclasses.MISSING:
            arguments.append([f.default_factory() for _ in range(count)])
        else:
            raise _Damaged(f"no {f.name} column")
    return list(map(CaseResult, *arguments))


def _lines(path: Path) -> Iterator[tuple[int, dict]]:
    try:
        with io.TextIOWrapper(open_binary(path, "a hand-off file"), encoding="utf-8") as handle:
            for number, line in enumerate(handle, start=1):
                if line.strip():
                    try:
                        data = json.loads(line)
                    except json.JSONDecodeError as exc:
                        raise ContractError(f"{path}: line {number} is not JSON ({exc.msg}); the "
                                           f"hand-off is damaged") from None
                    if not isinstance(data, dict):
                        raise ContractError(f"{path}: line {number} is not a JSON object; the "
                                           f"hand-off is damaged")
                    yield number, data
    except UnicodeDecodeError as exc:
        raise ContractError(f"{path}: not UTF-8 text (offset {exc.start}); the hand-off is "
                            f"damaged") from None
    except OSError as exc:
        raise os_error(path, exc) from None


def read_handoff(path: Path) -> Handoff:
    handoff = Handoff(path=Path(path))
    for number, data in _lines(Path(path)):
        if number == 1:
            schema = data.get("schema")
            if schema != HANDOFF_SCHEMA:
                what = (f"written by another npuperf version (schema {schema})"
                        if str(schema).startswith("npuperf-handoff/") else
                        f"not an npuperf hand-off (schema {schema!r})")
                raise ContractError(f"{path}: {what}; this version reads {HANDOFF_SCHEMA}: "
                                   f"backfill it with the npuperf version that ran it")
            session = data.get("session") or {}
            if not isinstance(session, dict):
                raise ContractError(f"{path}: line 1: the session is not a JSON object; the "
                                    f"hand-off is damaged")
            handoff.session = dict(session)
            continue
        try:
            handoff.results += _results(data)
        except (_Damaged, KeyError, TypeError, ValueError, IndexError) as exc:
            why = f"no {exc}" if isinstance(exc, KeyError) else str(exc) or type(exc).__name__
            raise ContractError(f"{path}: line {number}: {why}; the hand-off is damaged") from None
    return handoff


def find_handoffs(path: Path) -> list[Path]:
    """Hand-off files at or below `path` (a run directory of an earlier wrapped run)."""
    path = Path(path)
    if path.is_file():
        return [path] if path.name == HANDOFF_NAME else []
    return sorted(p for p in path.rglob(HANDOFF_NAME) if p.is_file())
