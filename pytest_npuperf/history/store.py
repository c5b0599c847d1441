"""The run history: one SQLite file (stdlib sqlite3) holding every recorded run.

Tables: `runs` (one row per session: time, device, software stack, git commit, host,
options, how it ended), `cases` (one row per case of a run: its statistics, method, status,
roofline, collective columns, verdict against its baseline) and `samples` (the case's kept
samples, zlib-compressed float32). Unique keys make every write an upsert: `runs.run_id`,
`cases(run, kind, key)`, `samples.case_row`, so importing a run twice (or merging histories
that share runs) never duplicates anything.

A run is written in one SQLite transaction (`record`): it is in the file whole, or not at all
(a process killed mid-write leaves SQLite's rollback journal, which the next opener replays).
The schema version is SQLite's `user_version`; opening an older file migrates it inside a
transaction, a newer one is refused rather than written into.
"""

from __future__ import annotations

import json
import math
import sqlite3
from array import array
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import MISSING, fields
from itertools import islice, repeat
from operator import attrgetter, itemgetter
from pathlib import Path
from typing import Any, Generic, TypeVar

from ..db.errors import ContractError, NpuperfError
from ..db.samples import SAMPLES_ENCODING, decode_samples, encode_samples
from .records import (
    CASE_COLUMNS,
    JSON_FIELDS,
    MEASURED_STATUSES,
    RUN_COLUMNS,
    CaseRecord,
    RunRecord,
)

T = TypeVar("T")
APPLICATION = "npuperf-history"
_BUSY_TIMEOUT_S = 60.0  # another session recording its run holds the write lock briefly
# A check before a session starts, or a read, waits this long for another process's lock: a
# history held longer is an error at once, not a session that sits silent for a minute.
QUICK_TIMEOUT_S = 5.0
_CACHE_KIB = 64 * 1024  # SQLite's page cache while a run is recorded (negative: KiB)
RECORD_BATCH = 10_000  # cases recorded per statement (and held as records at once)

_CASE_TYPES = {
    "kind": "TEXT NOT NULL", "key": "TEXT NOT NULL", "kernel": "TEXT NOT NULL",
    "samples_count": "INTEGER", "outliers": "INTEGER", "message_bytes": "INTEGER",
    "num_devices": "INTEGER", "tier": "INTEGER",
}
_TEXT_FIELDS = {"signature", "status", "method", "statistic", "stop_reason", "device", "stack",
                "timestamp", "memory_level", "bound_by", "dtype", "verdict", "baseline_run",
                "extra"}


def _case_column_sql(name: str) -> str:
    sql_type = _CASE_TYPES.get(name) or ("TEXT" if name in _TEXT_FIELDS else "REAL")
    return f'"{name}" {sql_type}'


def _create_v1(conn: sqlite3.Connection) -> None:
    conn.execute("CREATE TABLE meta (name TEXT PRIMARY KEY, value TEXT NOT NULL)")
    conn.execute("INSERT INTO meta VALUES ('application', ?)", (APPLICATION,))
    conn.execute("""CREATE TABLE runs (
        id INTEGER PRIMARY KEY,
        run_id TEXT NOT NULL UNIQUE, started REAL NOT NULL, started_iso TEXT, device TEXT,
        device_kind TEXT, device_name TEXT, stack TEXT, host TEXT, git_commit TEXT,
        git_dirty INTEGER, options TEXT, source TEXT, target TEXT, cases INTEGER,
        exit_status INTEGER, passed INTEGER, baseline TEXT, imported_from TEXT)""")
    columns = ",\n        ".join(_case_column_sql(c) for c in CASE_COLUMNS)
    conn.execute(f"""CREATE TABLE cases (
        id INTEGER PRIMARY KEY,
        run INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
        {columns},
        UNIQUE (run, kind, key))""")
    conn.execute("""CREATE TABLE samples (
        case_row INTEGER PRIMARY KEY REFERENCES cases(id) ON DELETE CASCADE,
        encoding TEXT NOT NULL, count INTEGER NOT NULL, data BLOB NOT NULL)""")
    conn.execute("CREATE INDEX cases_by_key ON cases (kind, key)")
    conn.execute("CREATE INDEX cases_by_kernel ON cases (kernel, signature)")
    conn.execute("CREATE INDEX runs_by_device ON runs (device, started)")


# MIGRATIONS[i] takes a file from schema version i to i + 1 (version 0: a new, empty file).
MIGRATIONS: list[Callable[[sqlite3.Connection], None]] = [_create_v1]


def schema_version() -> int:
    return len(MIGRATIONS)


def _json_functions(conn: sqlite3.Connection) -> None:
    """json_valid and json_extract ('$.key' paths), in Python, on an SQLite built without its
    JSON functions (the queries use them; SQLite 3.38 and later always has them)."""
    try:
        conn.execute("SELECT json_valid('{}'), json_extract('{}', '$.a')")
    except sqlite3.OperationalError:
        _python_json_functions(conn)


def _python_json_functions(conn: sqlite3.Connection) -> None:
    def parsed(text: Any) -> Any:
        try:
            return json.loads(text) if isinstance(text, str) else None
        except ValueError:
            return None

    def extract(text: Any, path: str) -> Any:
        value = parsed(text)
        for part in path.split(".")[1:]:
            value = value.get(part) if isinstance(value, dict) else None
        if isinstance(value, bool):
            return int(value)
        return json.dumps(value) if isinstance(value, dict | list) else value

    conn.create_function("json_valid", 1, lambda text: int(parsed(text) is not None),
                         deterministic=True)
    conn.create_function("json_extract", 2, extract, deterministic=True)


class HistoryError(NpuperfError):
    pass


def _sql_error(path: Path, exc: sqlite3.Error) -> NpuperfError:
    text = str(exc)
    if isinstance(exc, sqlite3.DatabaseError) and "not a database" in text:
        return ContractError(f"{path}: not a history file (not an SQLite database)")
    if "locked" in text or "busy" in text:
        return HistoryError(f"{path}: the history is locked by another process ({text}); try "
                            f"again when it has finished")
    return HistoryError(f"{path}: history database error: {text}")


class HistoryStore:
    """An open history file. `readonly`: never create, migrate or write it."""

    def __init__(self, path: str | Path, *, readonly: bool = False,
                 busy_timeout_s: float | None = None) -> None:
        """`busy_timeout_s`: how long to wait for another process's lock (a reader
        QUICK_TIMEOUT_S, a writer the time another session takes to record its run)."""
        self.path = Path(path)
        self.readonly = readonly
        wait = busy_timeout_s if busy_timeout_s is not None else (
            QUICK_TIMEOUT_S if readonly else _BUSY_TIMEOUT_S)
        if readonly and not self.path.is_file():
            raise HistoryError(f"{self.path}: no such history file")
        if self.path.exists() and not self.path.is_file():
            raise HistoryError(f"{self.path}: not a file")
        try:
            if readonly:
                uri = f"{self.path.resolve().as_uri()}?mode=ro"
                self.conn = sqlite3.connect(uri, uri=True, timeout=wait, isolation_level=None)
            else:
                self.path.parent.mkdir(parents=True, exist_ok=True)
                self.conn = sqlite3.connect(self.path, timeout=wait, isolation_level=None)
            self.conn.execute("PRAGMA foreign_keys = ON")
            _json_functions(self.conn)
            self._check_schema()
        except sqlite3.Error as exc:
            self.close()
            raise _sql_error(self.path, exc) from None
        except BaseException:
            self.close()
            raise

    # -- schema -------------------------------------------------------------------------------
    def _version(self) -> int:
        return int(self.conn.execute("PRAGMA user_version").fetchone()[0])

    def _check_schema(self) -> None:
        version = self._version()
        if version > schema_version():
            raise HistoryError(f"{self.path}: history schema version {version} is newer than "
                               f"this pytest_npuperf's ({schema_version()}); upgrade "
                               f"pytest_npuperf to use it")
        if version == 0:
            tables = self.conn.execute("SELECT count(*) FROM sqlite_master").fetchone()[0]
            if tables:
                raise ContractError(f"{self.path}: an SQLite database, but not a pytest_npuperf "
                                    f"history (it has other tables)")
        else:
            self._check_application()
            self._check_tables()
        if version < schema_version():
            if self.readonly:
                raise HistoryError(f"{self.path}: history schema version {version} is older "
                                   f"than {schema_version()}; a run that records into it (or "
                                   f"npuperf merge) migrates it")
            self._migrate()

    def _check_application(self) -> None:
        try:
            row = self.conn.execute(
                "SELECT value FROM meta WHERE name = 'application'").fetchone()
        except sqlite3.Error:
            row = None
        if row is None or row[0] != APPLICATION:
            raise ContractError(f"{self.path}: an SQLite database, but not a pytest_npuperf "
                                f"history")

    def _check_tables(self) -> None:
        """Every table and case column the schema has: a history damaged by hand (its cases
        table dropped) is refused when opened, before a session measures anything, not
        found at the first case that asks it for a baseline."""
        tables = {row[0] for row in self.conn.execute(
            "SELECT name FROM sqlite_master WHERE type = 'table'")}
        missing = [t for t in ("meta", "runs", "cases", "samples") if t not in tables]
        if not missing:
            present = {row[1] for row in self.conn.execute("PRAGMA table_info(cases)")}
            missing = [f"cases.{c}" for c in CASE_COLUMNS if c not in present]
        if missing:
            shown = ", ".join(missing[:4]) + (", ..." if len(missing) > 4 else "")
            raise ContractError(f"{self.path}: a damaged history: {shown} missing (changed "
                                f"by hand?); restore it, or move it away to start a new one")

    def _migrate(self) -> None:
        with self._transaction():
            version = self._version()  # again, under the write lock: another may have done it
            for step in MIGRATIONS[version:]:
                step(self.conn)
            self.conn.execute(f"PRAGMA user_version = {schema_version()}")

    @contextmanager
    def _transaction(self) -> Iterator[sqlite3.Connection]:
        """BEGIN IMMEDIATE ... COMMIT; any exception (Ctrl-C included) rolls back."""
        self.conn.execute("BEGIN IMMEDIATE")
        try:
            yield self.conn
        except BaseException:
            self.conn.execute("ROLLBACK")
            raise
        self.conn.execute("COMMIT")

    def close(self) -> None:
        conn = getattr(self, "conn", None)
        if conn is not None:
            conn.close()
            self.conn = None  # type: ignore[assignment]

    def __enter__(self) -> HistoryStore:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # -- writing --------------------------------------------------------------------------------
    def record(self, run: RunRecord, cases: Iterable[CaseRecord]) -> int:
        """Upsert one run and its cases in one transaction; returns the cases written. Only a
        batch of the records exists at once: `cases` may be a generator."""
        return self.record_values(run_values(run), case_batches(cases))

    def record_values(self, run: list, batches: Iterable[tuple[list, list, list]]) -> int:
        """`record` of values made elsewhere: `run_values` of the run, `case_values` of each
        batch of its cases (history/recorder.py's child is given them); an exception out of
        `batches` leaves nothing written."""
        if self.readonly:
            raise HistoryError(f"{self.path}: opened read-only")
        try:
            with self._transaction() as conn:
                writer = _RunWriter(conn, run)
                return sum(writer.write(*batch) for batch in batches)
        except sqlite3.Error as exc:
            raise _sql_error(self.path, exc) from None

    def merge_from(self, other: HistoryStore) -> tuple[int, int]:
        """Every run of `other` upserted here, each in its own transaction: (runs, cases)."""
        runs = cases = 0
        for run in other.runs():
            cases += self.record(run, other.run_cases(run.run_id))
            runs += 1
        return runs, cases

    # -- reading --------------------------------------------------------------------------------
    def _query(self, sql: str, params: Iterable[Any] = ()) -> list[sqlite3.Row]:
        try:
            cursor = self.conn.execute(sql, tuple(params))
            cursor.row_factory = sqlite3.Row
            return cursor.fetchall()
        except sqlite3.Error as exc:
            raise _sql_error(self.path, exc) from None

    def runs(self, device: str | None = None, *, passed_only: bool = False) -> list[RunRecord]:
        """Runs oldest first."""
        where, params = _run_filter(device, passed_only)
        rows = self._query(f"SELECT * FROM runs r {where} ORDER BY r.started, r.id", params)
        return [_run_of(row) for row in rows]

    def run(self, ref: str) -> RunRecord:
        """A run by its id, or by a prefix of it that names one run."""
        rows = self._query("SELECT * FROM runs WHERE run_id = ?", (ref,))
        if not rows:
            pattern = ref.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"
            rows = self._query("SELECT * FROM runs WHERE run_id LIKE ? ESCAPE '\\' "
                               "ORDER BY started", (pattern,))
        if not rows:
            raise HistoryError(f"{self.path}: no run {ref!r} in this history{self._suggest(ref)}")
        if len(rows) > 1:
            shown = ", ".join(r["run_id"] for r in rows[:5])
            raise HistoryError(f"{self.path}: {ref!r} names {len(rows)} runs ({shown}); give "
                               f"more of the run id")
        return _run_of(rows[0])

    def _suggest(self, ref: str) -> str:
        """Run ids like `ref` (else the newest), for an error about a run not found."""
        import difflib

        ids = [row["run_id"] for row in self._query("SELECT run_id FROM runs ORDER BY started "
                                                    "DESC, id DESC")]
        if not ids:
            return " (it holds no run yet)"
        close = difflib.get_close_matches(ref, ids, n=3, cutoff=0.5)
        shown = close or ids[:3]
        what = "did you mean" if close else "newest"
        return (f"; {what}: {', '.join(shown)} ({len(ids)} run(s): npuperf runs lists them, "
                f"last and last-good name the newest)")

    def find_runs(self, *, device: str | None = None, kernel: str | None = None,
                  since: float | None = None, until: float | None = None
                  ) -> list[tuple[RunRecord, int]]:
        """Runs oldest first, with how many of their cases match `kernel` (all: no kernel),
        optionally only on `device`, started in [since, until), holding a case of `kernel`."""
        clauses, params = _run_clauses(device, False, since=since, until=until)
        match = "c.kernel = ?" if kernel else "1"
        count = f"(SELECT count(*) FROM cases c WHERE c.run = r.id AND {match})"
        having = [f"{count} > 0"] if kernel else []
        where = " AND ".join(clauses + having) or "1"
        rows = self._query(f"SELECT r.*, {count} AS matched FROM runs r WHERE {where} "
                           f"ORDER BY r.started, r.id",
                           ([kernel] if kernel else []) + params + ([kernel] if kernel else []))
        return [(_run_of(row), int(row["matched"])) for row in rows]

    def latest(self, device: str | None = None, *, passed_only: bool = False,
               exclude: Iterable[str] = ()) -> RunRecord | None:
        where, params = _run_filter(device, passed_only, exclude)
        rows = self._query(f"SELECT * FROM runs r {where} ORDER BY r.started DESC, r.id DESC "
                           f"LIMIT 1", params)
        return _run_of(rows[0]) if rows else None

    def run_cases(self, run_id: str, *, with_samples: bool = True) -> list[CaseRecord]:
        return self._cases("r.run_id = ?", (run_id,), with_samples=with_samples)

    def latest_cases(self, kind: str, key: str, *, device: str | None = None,
                     before: float | None = None, passed_only: bool = False,
                     exclude: Iterable[str] = (), limit: int = 1,
                     with_samples: bool = True) -> list[CaseRecord]:
        """The newest `limit` measurements of a case (measured statuses only), newest first,
        optionally only on `device`, in runs started before `before`, in passed runs, not in
        runs `exclude`."""
        clauses, params = _run_clauses(device, passed_only, exclude, until=before)
        clauses += ["c.kind = ?", "c.key = ?",
                    f"c.status IN ({', '.join('?' * len(MEASURED_STATUSES))})"]
        params += [kind, key, *MEASURED_STATUSES]
        return self._cases(" AND ".join(clauses), params, order="r.started DESC, r.id DESC",
                           limit=limit, with_samples=with_samples)

    def verdict_reads(self, kind: str, keys: Iterable[str], *, device: str | None = None,
                      before: float | None = None, passed_only: bool = False,
                      exclude: Iterable[str] = (), depth: int = 1, values: int = 10,
                      columns: Sequence[str] = (), extra_keys: Sequence[str] = (),
                      candidate_extra: Sequence[str] = ()
                      ) -> dict[str, tuple[list[CaseRecord], list[tuple[float, str, dict, str]]]]:
        """What the verdicts of many cases read, in one query (a large run's end: a query
        for the baselines and another for their spreads read the same rows twice): key ->
        (`latest_cases`' records, newest `depth`, only `columns` of them (and kind, key,
        kernel, median_us, verdict, status; the others at their defaults) and the `extra_keys` of
        `extra` and its `candidate_extra` (those read for the records alone); `case_values`'
        values, newest `values`, their `extra_keys`); keys without any are absent. `depth`
        0: the values alone."""
        extra_keys = tuple(dict.fromkeys(extra_keys))
        candidate_extra = tuple(k for k in dict.fromkeys(candidate_extra) if k not in extra_keys)
        clauses, params = _run_clauses(device, passed_only, exclude, until=before)
        # The newest runs first: a key they measured often enough has nothing older to read
        # (a nightly history grows by a run a night; read whole, each night's verdicts took
        # longer than the last). A key they did not is read over every run.
        reach = max(depth, values) + READ_SLACK
        newest = [row for row, _ in self._newest_runs(clauses, params, reach + 1)]
        within = newest[:reach] if len(newest) > reach else None
        wanted = list(dict.fromkeys(keys))
        by_key, names = self._measured(kind, wanted, clauses, params, within, columns,
                                       extra_keys)
        median, verdict, status, run_id, started, run_row, case_row = (
            names.index(name) for name in ("median_us", "verdict", "status", "r_run_id",
                                           "r_started", "r_row", "c_row"))

        def trusted(row: tuple) -> bool:
            return row[status] == "ok" and _positive(row[median])
        if within is not None:
            short = [name for name in wanted if len(by_key.get(name, ())) < depth
                     or sum(map(trusted, by_key.get(name, ()))) < values]
            if short:
                by_key.update(self._measured(kind, short, clauses, params, None, columns,
                                             extra_keys)[0])
        first_key = case_row + 1
        newest_first = itemgetter(started, run_row)
        candidates: list[tuple] = []
        found: dict[str, tuple[list, list[tuple[float, str, dict, str]]]] = {}
        for name, measured in by_key.items():
            measured.sort(key=newest_first, reverse=True)
            candidates += measured[:depth]
            spread = [(float(row[median]), row[verdict] or "",
                       _extra_of(extra_keys, row[first_key:]), row[run_id])
                      for row in measured if trusted(row)]
            found[name] = ([], spread[:values])
        if candidates:
            candidates = self._with_samples(candidates, case_row, candidate_extra)
            names = [*names, "s_encoding", "s_data"]
            read = (*extra_keys, *candidate_extra)
            last = len(names) - 2
            for row, record in zip(candidates, self._records(candidates, names)):
                record.extra = _extra_of(read, (*row[first_key:last], *row[last + 2:]))
                found[record.key][0].append(record)
        return {name: reads for name, reads in found.items() if reads[0] or reads[1]}

    def _newest_runs(self, run_clauses: list[str], run_params: list[Any], limit: int
                     ) -> list[tuple[int, str]]:
        """(row id, run id) of the newest `limit` runs `run_clauses` match, newest first."""
        where = f" WHERE {' AND '.join(run_clauses)}" if run_clauses else ""
        return [(row[0], row[1]) for row in self._query(
            f"SELECT r.id, r.run_id FROM runs r{where} ORDER BY r.started DESC, r.id DESC "
            f"LIMIT {int(limit)}", run_params)]

    def _measured(self, kind: str, keys: list[str], run_clauses: list[str],
                  run_params: list[Any], within: list[int] | None, columns: Sequence[str],
                  extra_keys: Sequence[str]) -> tuple[dict[str, list[tuple]], list[str]]:
        """The measurements of `keys` (measured statuses) in the runs `run_clauses` match
        (`within`: only these runs' rows; None: every run's), per key, and the columns'
        names: `columns` and those `verdict_reads` ranks them by. Through the key index (or,
        `within`, the unique (run, kind, key) one), ranked by the caller: a window function
        ranking them inside SQLite sorted them all twice and joined them again (10^5 cases
        over 10 runs: 17 s, this read 5 s)."""
        clauses = [*run_clauses, f"c.status IN ({', '.join('?' * len(MEASURED_STATUSES))})"]
        params = [kind, *run_params, *MEASURED_STATUSES]
        if within is not None:
            clauses.append(f"c.run IN ({', '.join('?' * len(within))})")
            params += within
        self._want(keys)
        sql = (f"SELECT {_selected([*columns, 'median_us', 'verdict', 'status'])}, "
               f"r.run_id AS r_run_id, r.started AS r_started, r.id AS r_row, c.id AS c_row"
               f"{_extra_columns(extra_keys)} "
               f"FROM npuperf_wanted w CROSS JOIN cases c ON c.kind = ? AND c.key = w.key "
               f"JOIN runs r ON r.id = c.run WHERE {' AND '.join(clauses)}")
        rows, names = self._rows(sql, params)
        key = names.index("key")
        by_key: dict[str, list[tuple]] = {}
        for row in rows:
            by_key.setdefault(row[key], []).append(row)
        return by_key, names

    def _with_samples(self, rows: list[tuple], case_row: int,
                      extra_keys: Sequence[str] = ()) -> list[tuple]:
        """`rows` (holding the case's row id at `case_row`), each with its samples' encoding
        and data appended (None, None: none kept), then its `extra_keys` of `extra`."""
        ids = [row[case_row] for row in rows]
        try:
            self.conn.execute("CREATE TEMP TABLE IF NOT EXISTS npuperf_rows "
                              "(id INTEGER PRIMARY KEY)")
            self.conn.execute("DELETE FROM npuperf_rows")
            self.conn.executemany("INSERT OR IGNORE INTO npuperf_rows VALUES (?)",
                                  ((i,) for i in sorted(ids)))
            kept = {found[0]: found[1:] for found in self.conn.execute(
                f"SELECT w.id, s.encoding, s.data{_extra_columns(extra_keys)} "
                f"FROM npuperf_rows w JOIN cases c ON c.id = w.id "
                f"LEFT JOIN samples s ON s.case_row = w.id")}
        except sqlite3.Error as exc:
            raise _sql_error(self.path, exc) from None
        none = (None,) * (2 + len(extra_keys))
        return [(*row, *kept.get(i, none)) for row, i in zip(rows, ids)]

    def _want(self, keys: Iterable[str]) -> None:
        """The keys wanted, in the temporary table npuperf_wanted (a read-only history takes
        one too): the cases are then found through its (kind, key) index, not by a scan of
        every run's cases."""
        wanted = sorted(set(keys))
        try:
            self.conn.execute("PRAGMA temp_store = MEMORY")
            self.conn.execute("CREATE TEMP TABLE IF NOT EXISTS npuperf_wanted "
                              "(key TEXT PRIMARY KEY)")
            self.conn.execute("DELETE FROM npuperf_wanted")
            # In order: each key goes at the end of the table's index, none splits a page.
            # One JSON array, unpacked inside SQLite: a statement per key costs 10x more.
            try:
                self.conn.execute("INSERT INTO npuperf_wanted SELECT value FROM json_each(?)",
                                  (json.dumps(wanted),))
            except sqlite3.OperationalError:  # an SQLite built without its JSON functions
                self.conn.executemany("INSERT INTO npuperf_wanted VALUES (?)",
                                      ((key,) for key in wanted))
        except sqlite3.Error as exc:
            raise _sql_error(self.path, exc) from None

    def trend(self, *, kernel: str | None = None, signature: str | None = None,
              device: str | None = None, last: int | None = None, since: float | None = None,
              until: float | None = None) -> list[CaseRecord]:
        """Measurements of the matching cases, oldest first; `last`: per case, the newest N;
        `since` / `until`: runs started in [since, until)."""
        clauses, params = _run_clauses(device, False, since=since, until=until)
        if kernel:
            clauses.append("c.kernel = ?")
            params.append(kernel)
        if signature:
            clauses.append("(c.signature = ? OR instr(c.key, ?) > 0)")
            params += [signature, signature]
        where = " AND ".join(clauses) or "1"
        records = self._cases(where, params, order="c.kind, c.key, r.started, r.id",
                              with_samples=False)
        if last:
            by_case: dict[tuple[str, str], list[CaseRecord]] = {}
            for record in records:
                by_case.setdefault((record.kind, record.key), []).append(record)
            records = [r for group in by_case.values() for r in group[-last:]]
        return records

    def case_values(self, kind: str, key: str, *, device: str | None = None,
                    before: float | None = None, passed_only: bool = False,
                    exclude: Iterable[str] = (), limit: int = 10
                    ) -> list[tuple[float, str, str, str]]:
        """(median_us, verdict, extra, run id) of the newest `limit` trusted (`ok`)
        measurements of one case, newest first: what its session-to-session spread needs,
        without building records or reading samples (history/spread.py, once per judged
        case). Of `extra`, only the SPREAD_EXTRA keys it holds are read."""
        clauses, params = _run_clauses(device, passed_only, exclude, until=before)
        clauses += ["c.kind = ?", "c.key = ?", "c.status = 'ok'", "c.median_us > 0"]
        rows = self._query(
            f"SELECT c.median_us, c.verdict, {_extra_sql(SPREAD_EXTRA)}, r.run_id FROM cases c "
            f"JOIN runs r ON r.id = c.run WHERE {' AND '.join(clauses)} ORDER BY r.started "
            f"DESC, r.id DESC LIMIT {int(limit)}", [*params, kind, key])
        last = 2 + len(SPREAD_EXTRA)
        return [(float(row[0]), row[1] or "", _extra_of(SPREAD_EXTRA, row[2:last]), row[last])
                for row in rows]

    def recent_values(self, kind: str, *, device: str | None = None,
                      before: float | None = None, passed_only: bool = False,
                      exclude: Iterable[str] = (), runs: int = 20,
                      changed: Sequence[str] = ()
                      ) -> tuple[array, array, array, list[str]]:
        """The trusted (`ok`) measurements of `kind` in the newest `runs` runs that match,
        their verdict none of `changed`, their preempted samples not kept (`extra`'s
        `preempted_kept` a JSON true): one read for the host's typical session-to-session
        spread (history/spread.py), as columns (int64, float64, int64): per measurement its
        case's code (one per key, in the order first read), its median, its run's rank (0:
        the newest); and the run ids by rank."""
        clauses, params = _run_clauses(device, passed_only, exclude, until=before)
        window = self._newest_runs(clauses, params, runs)
        codes, medians, ranks = array("q"), array("d"), array("q")
        if not window:
            return codes, medians, ranks, []
        rank = {row: index for index, (row, _) in enumerate(window)}
        unchanged = (f" AND (c.verdict IS NULL OR c.verdict NOT IN "
                     f"({', '.join('?' * len(changed))}))" if changed else "")
        sql = (f"SELECT c.key, c.median_us, c.run FROM cases c WHERE c.run IN "
               f"({', '.join('?' * len(window))}) AND c.kind = ? AND c.status = 'ok' "
               f"AND typeof(c.median_us) = 'real' AND c.median_us > 0{unchanged} AND NOT coalesce("
               f"CASE WHEN json_valid(c.extra) THEN json_extract(c.extra, '$.preempted_kept') END, "
               f"0) IS 1")
        cases: dict[str, int] = {}
        # Millions of values in a large run's history: read a slice at a time into columns,
        # each key's text let go once coded (all the rows at once held a GB).
        try:
            cursor = self.conn.execute(sql, (*rank, kind, *changed))
            while found := cursor.fetchmany(_FETCHED_AT_ONCE):
                keys, values, run_rows = zip(*found)
                codes.extend([cases.setdefault(key, len(cases)) for key in keys])
                medians.extend(values)
                ranks.extend([rank[row] for row in run_rows])
        except sqlite3.Error as exc:
            raise _sql_error(self.path, exc) from None
        return codes, medians, ranks, [run_id for _, run_id in window]

    def _cases(self, where: str, params: Iterable[Any], *, order: str = "c.id",
               limit: int | None = None, with_samples: bool = True) -> list[CaseRecord]:
        sample_columns = ", s.encoding AS s_encoding, s.data AS s_data" if with_samples else ""
        join = " LEFT JOIN samples s ON s.case_row = c.id" if with_samples else ""
        sql = (f"SELECT c.*, r.run_id AS r_run_id, r.started AS r_started{sample_columns} "
               f"FROM cases c JOIN runs r ON r.id = c.run{join} WHERE {where} ORDER BY {order}"
               + (f" LIMIT {int(limit)}" if limit else ""))
        return self._records(*self._rows(sql, params))

    def _rows(self, sql: str, params: Iterable[Any]) -> tuple[list[tuple], list[str]]:
        """The rows of `sql` and its columns' names."""
        try:
            cursor = self.conn.execute(sql, tuple(params))
            return cursor.fetchall(), [d[0] for d in cursor.description]
        except sqlite3.Error as exc:
            raise _sql_error(self.path, exc) from None

    def _records(self, rows: list[tuple], names: list[str]) -> list[CaseRecord]:
        """The case of each row (`cases` columns, `r_run_id`, `r_started`, optionally
        `s_encoding`, `s_data`): its columns found by position once (10^5 rows: by name,
        row by row, the conversion cost seconds)."""
        return _cases_from(rows, {name: names.index(name) for name in CASE_COLUMNS
                                  if name in names},
                           names.index("r_run_id"), names.index("r_started"),
                           names.index("s_data") if "s_data" in names else None,
                           names.index("s_encoding") if "s_encoding" in names else None,
                           self.path)


class Prefetched(Generic[T]):
    """Per key of one kind, what a batch query read at once (a large run's verdicts); a key
    outside the batch is read alone, when it is asked for."""

    def __init__(self) -> None:
        self._batch: tuple[str, set[str], dict[str, list[T]]] | None = None

    def load(self, kind: str, keys: list[str],
             read: Callable[[str, list[str]], dict[str, list[T]]]) -> None:
        self._batch = None  # the previous batch freed before the next is read
        if keys:
            self._batch = (kind, set(keys), read(kind, keys))

    def get(self, kind: str, key: str, read: Callable[[str, str], list[T]]) -> list[T]:
        batch = self._batch
        if batch is not None and batch[0] == kind and key in batch[1]:
            return batch[2].get(key, [])
        return read(kind, key)


def _run_clauses(device: str | None, passed_only: bool, exclude: Iterable[str] = (), *,
                 since: float | None = None, until: float | None = None
                 ) -> tuple[list[str], list[Any]]:
    """SQL conditions on the run `r`: on `device`, passed, not one of `exclude`, started in
    [since, until)."""
    clauses: list[str] = []
    params: list[Any] = []
    if device is not None:
        clauses.append("r.device = ?")
        params.append(device)
    for value, condition in ((since, "r.started >= ?"), (until, "r.started < ?")):
        if value is not None:
            clauses.append(condition)
            params.append(value)
    if passed_only:
        clauses.append("r.passed = 1")
    excluded = list(exclude)
    if excluded:
        clauses.append(f"r.run_id NOT IN ({', '.join('?' * len(excluded))})")
        params += excluded
    return clauses, params


def _run_filter(device: str | None, passed_only: bool, exclude: Iterable[str] = ()
                ) -> tuple[str, list[Any]]:
    clauses, params = _run_clauses(device, passed_only, exclude)
    return ("WHERE " + " AND ".join(clauses)) if clauses else "", params


def _selected(columns: Sequence[str]) -> str:
    """The `cases` columns of a query: `columns` and kind, key and kernel (`extra` is read
    key by key, `_extra_sql`)."""
    unknown = set(columns) - set(CASE_COLUMNS)
    if unknown:
        raise ValueError(f"not columns of the cases table: {sorted(unknown)}")
    wanted = {"kind", "key", "kernel", *columns} - {"extra"}
    return ", ".join(f'c."{name}"' for name in CASE_COLUMNS if name in wanted)


_FETCHED_AT_ONCE = 100_000  # rows of a large read converted at a time

# `verdict_reads` looks first at as many of the newest runs as it wants measurements of a
# case and this many more: room for runs in which a case was not trusted (noisy, suspect)
# before it is read over every run (10 of 15: 94 % of cases noisy one run in five).
READ_SLACK = 5


# What a case's session-to-session spread reads of a past measurement's `extra`
# (history/spread.py: its cache mode and implementation, whether it kept preempted samples).
SPREAD_EXTRA = ("cache", "impl", "preempted_kept")


def _extra_sql(keys: Sequence[str]) -> str:
    """Columns of a query: each of `keys` of the case's (`c`) `extra` JSON, read inside
    SQLite (10^5 verdicts: json.loads of every `extra` in Python cost a second), NULL where
    it is absent or `extra` is no JSON (a file changed by hand)."""
    return ", ".join(f"CASE WHEN json_valid(c.extra) THEN json_extract(c.extra, '$.{key}') END"
                     for key in keys)


def _extra_columns(keys: Sequence[str]) -> str:
    """`_extra_sql` of `keys` after a query's other columns ("" for none)."""
    return ", " + _extra_sql(keys) if keys else ""


def _positive(value: Any) -> bool:
    """A stored duration that counts (`median_us > 0` as SQLite compares it, less what it
    would compare as text)."""
    return type(value) in (float, int) and value > 0


def _extra_of(keys: Sequence[str], values: Sequence[Any]) -> dict[str, Any]:
    """`extra` as far as `_extra_sql` read it (a JSON true or false reads as 1 or 0)."""
    return {key: value for key, value in zip(keys, values) if value is not None}


def _batches(items: Iterable[Any], size: int) -> Iterator[list[Any]]:
    iterator = iter(items)
    while batch := list(islice(iterator, size)):
        yield batch


def run_values(run: RunRecord) -> list:
    """The run's `INSERT INTO runs` values, in RUN_COLUMNS order."""
    return [_to_sql(name, getattr(run, name)) for name in RUN_COLUMNS]


_CASE_VALUES = attrgetter(*CASE_COLUMNS)
_JSON_AT = [i for i, name in enumerate(CASE_COLUMNS) if name in JSON_FIELDS]


def case_batches(cases: Iterable[CaseRecord]) -> Iterator[tuple[list[list], list[tuple],
                                                                list[tuple]]]:
    """`case_values` of `cases` a batch of RECORD_BATCH at a time, made as they are read."""
    return (case_values(batch) for batch in _batches(cases, RECORD_BATCH))


def case_values(batch: list[CaseRecord]) -> tuple[list[list], list[tuple], list[tuple]]:
    """What `_RunWriter.write` writes of a batch of cases: their `cases` values (CASE_COLUMNS
    order: `_to_sql` of each column, with the checks that cannot change what SQLite stores
    left out, it stores a NaN as NULL and a bool as 0/1 itself; only the JSON columns are
    converted), their samples with their keys, and the keys of the cases that have none."""
    rows = []
    encode = _JSON.encode
    for case in batch:
        found = list(_CASE_VALUES(case))
        for index in _JSON_AT:
            if not isinstance(found[index], str):
                found[index] = encode(found[index])
        rows.append(found)
    samples = [(case.samples, case.kind, case.key) for case in batch if case.samples]
    empty = [(case.kind, case.key) for case in batch if not case.samples]
    return rows, samples, empty


class _RunWriter:
    """One run's upsert, inside the caller's transaction on `conn`: the run's row at once,
    then its cases a batch at a time (`write`); the same statements in this process and in
    the child that records a large run (history/recorder.py)."""

    def __init__(self, conn: sqlite3.Connection, run: list) -> None:
        names = ", ".join(RUN_COLUMNS)
        updates = ", ".join(f"{n} = excluded.{n}" for n in RUN_COLUMNS if n != "run_id")
        conn.execute(f"INSERT INTO runs ({names}) VALUES ({', '.join('?' * len(run))}) "
                     f"ON CONFLICT(run_id) DO UPDATE SET {updates}", run)
        run_row = int(conn.execute("SELECT id FROM runs WHERE run_id = ?",
                                   (run[RUN_COLUMNS.index("run_id")],)).fetchone()[0])
        quoted = ", ".join(f'"{c}"' for c in CASE_COLUMNS)
        case_updates = ", ".join(f'"{c}" = excluded."{c}"' for c in CASE_COLUMNS
                                 if c not in ("kind", "key"))
        # The run's row id is SQLite's own integer, written into the statements: the rows
        # are made without it (in the parent, for a child that learns it only here).
        self.insert = (f"INSERT INTO cases (run, {quoted}) VALUES ({run_row}, "
                       f"{', '.join('?' * len(CASE_COLUMNS))}) "
                       f"ON CONFLICT(run, kind, key) DO UPDATE SET {case_updates}")
        self.samples = (f"INSERT INTO samples SELECT id, ?, ?, ? FROM cases WHERE run = {run_row} "
                        f"AND kind = ? AND key = ? ON CONFLICT(case_row) DO UPDATE SET "
                        f"encoding = excluded.encoding, count = excluded.count, "
                        f"data = excluded.data")
        self.delete = (f"DELETE FROM samples WHERE case_row = (SELECT id FROM cases WHERE "
                       f"run = {run_row} AND kind = ? AND key = ?)")
        # The cases' indexes of a large run outgrow SQLite's default page cache (2 MB):
        # every insert then reads and writes index pages through the file.
        conn.execute(f"PRAGMA cache_size = -{_CACHE_KIB}")
        self.conn = conn

    def write(self, rows: list[list], samples: list[tuple], empty: list[tuple]) -> int:
        """A batch of `case_values`, each statement over the whole batch (10^5 cases: a
        statement per row and a lookup of its id cost most of a large run's end); a case's
        samples find their row through the unique index, inside SQLite. A case listed twice
        is written twice, the later one winning, as row by row."""
        self.conn.executemany(self.insert, rows)
        # Encoded here: in the child that records a large run, not in its busy parent.
        self.conn.executemany(self.samples, ((SAMPLES_ENCODING, len(values), encode_samples(values),
                                              kind, key) for values, kind, key in samples))
        self.conn.executemany(self.delete, empty)
        return len(rows)


# `json.dumps(value, sort_keys=True, default=str)`, its encoder made once.
_JSON = json.JSONEncoder(sort_keys=True, default=str)


def _to_sql(name: str, value: Any) -> Any:
    if name in JSON_FIELDS and not isinstance(value, str):
        return json.dumps(value, sort_keys=True, default=str)
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, float) and value != value:  # NaN: unknown
        return None
    return value


def _from_json(text: Any) -> dict:
    if not isinstance(text, str) or not text:
        return {}
    try:
        value = json.loads(text)
    except ValueError:
        return {"text": text}
    return value if isinstance(value, dict) else {"text": text}


def _started(value: Any) -> float:
    """What orders runs: a number, whatever the file holds."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        return 0.0
    return float(value)


def _run_of(row: sqlite3.Row) -> RunRecord:
    values = {name: row[name] for name in RUN_COLUMNS}
    for name in ("stack", "options"):
        values[name] = _from_json(values[name])
    for name in ("git_dirty", "passed"):
        values[name] = None if values[name] is None else bool(values[name])
    values["started"] = _started(values["started"])
    for name in ("cases", "exit_status"):
        if isinstance(values[name], bool) or not isinstance(values[name], int | None):
            values[name] = 0 if name == "cases" else None
    defaults = RunRecord.__dataclass_fields__
    return RunRecord(**{k: ("" if v is None and isinstance(defaults[k].default, str) else v)
                        for k, v in values.items()})


# A duration (or ratio) read back is a float > 0 and below this (11.6 days): what is not (NaN
# and text stored by hand, a negative, 1e308) is unknown, not a number that ends a trend page.
_MAX_US = 1e12
_DEFAULTS = {f.name: f.default for f in fields(CaseRecord)}
_FACTORIES = {f.name: f.default_factory for f in fields(CaseRecord)
              if f.default_factory is not MISSING}
_INTEGERS = {name for name, sql in _CASE_TYPES.items() if sql.startswith("INTEGER")}


def _number(name: str, value: Any) -> Any:
    """A numeric column's value as the record holds it, or its default when the file holds
    something else."""
    if value is None:
        return value
    if isinstance(value, bool) or not isinstance(value, int | float) \
            or not math.isfinite(value) or (name in _INTEGERS and value != int(value)):
        return _DEFAULTS[name]
    if name.endswith("_us") or name == "ratio":
        return value if 0 < value < _MAX_US else _DEFAULTS[name]
    if name == "p_value":
        return value if 0 <= value <= 1 else _DEFAULTS[name]
    return int(value) if name in _INTEGERS else value


# Per column of CASE_COLUMNS: text (kind, key, kernel and the text fields), JSON (extra), or
# how `_number` checks it; a value that passes its check as it is is left as it is.
_KINDS = tuple("json" if name == "extra" else "text"
               if name in _TEXT_FIELDS or name in ("kind", "key", "kernel")
               else "int" if name in _INTEGERS else "us"
               if name.endswith("_us") or name == "ratio" else "p" if name == "p_value"
               else "float" for name in CASE_COLUMNS)


def _text(value: Any) -> str:
    return value if type(value) is str else "" if value is None else str(value)


def _column(name: str, kind: str, values: Sequence[Any]) -> list[Any]:
    """A `cases` column read back: what the file holds that is no text, number or duration of
    the column's kind read as unknown (`_number`), column by column (10^5 rows x 40
    columns: row by row, the checks cost seconds)."""
    if kind == "text":
        return [_text(v) for v in values]
    if kind == "json":
        return [_from_json(_text(v)) for v in values]
    if kind == "int":
        return [v if v is None or type(v) is int else _number(name, v) for v in values]
    if kind == "us":
        return [v if v is None or (type(v) is float and 0 < v < _MAX_US) else _number(name, v)
                for v in values]
    if kind == "p":
        return [v if v is None or (type(v) is float and 0 <= v <= 1) else _number(name, v)
                for v in values]
    return [v if v is None or (type(v) is float and v - v == 0.0) else _number(name, v)
            for v in values]


def _cases_from(rows: list[tuple], at: dict[str, int], run_id: int, started: int,
                data: int | None, encoding: int | None, path: Path) -> list[CaseRecord]:
    """Case records from rows holding `cases` columns (name -> position: every one of
    CASE_COLUMNS, or some, the others left at their defaults), their run's id and start, and
    optionally their samples."""
    if not rows:
        return []
    columns = list(zip(*rows))
    # Every column by position, those not read at their defaults (10^5 records: by keyword,
    # a dict per record cost a second).
    read = [_column(name, kind, columns[at[name]]) if name in at
            else [_FACTORIES[name]() for _ in rows] if name in _FACTORIES
            else repeat(_DEFAULTS[name], len(rows))
            for name, kind in zip(CASE_COLUMNS, _KINDS)]
    records = list(map(CaseRecord, *read))
    for record, row in zip(records, rows):
        record.run_id, record.run_started = str(row[run_id]), _started(row[started])
        blob = row[data] if data is not None else None
        if blob is not None:
            try:
                record.samples = [v for v in decode_samples(blob, row[encoding])
                                  if math.isfinite(v) and 0 < v < _MAX_US]
            except ValueError as exc:
                raise ContractError(f"{path}: damaged samples of case {record.key} in run "
                                    f"{record.run_id}: {exc}") from None
    return records


def is_history_file(path: Path) -> bool:
    """Whether `path` starts like an SQLite file (a cheap check before opening it)."""
    try:
        with open(path, "rb") as handle:
            return handle.read(16) == b"SQLite format 3\x00"
    except OSError:
        return False


