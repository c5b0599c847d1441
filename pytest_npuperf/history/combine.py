"""`npuperf merge`: several hosts' results into one database and one history."""

from __future__ import annotations

from pathlib import Path

from ..db.combine import combine_databases
from ..db.errors import NpuperfError
from .convert import read_run_json, records_from_run_json
from .store import HistoryStore, is_history_file


def classify(sources: list[Path]) -> tuple[list[Path], list[Path], list[Path]]:
    """(database directories, history files, run JSONs); an unknown source is an error."""
    databases, histories, runs = [], [], []
    for source in sources:
        if source.is_dir():
            databases.append(source)
        elif not source.exists():
            raise NpuperfError(f"{source}: no such file or directory")
        elif is_history_file(source):
            histories.append(source)
        elif source.suffix == ".json":
            runs.append(source)
        else:
            raise NpuperfError(f"{source}: neither a database directory, a history file nor a "
                               f"run JSON")
    return databases, histories, runs


def combine_sources(sources: list[Path], *, history: Path | None, database: Path | None,
                  dry_run: bool = False) -> str:
    databases, histories, runs = classify([Path(s) for s in sources])
    if databases and database is None:
        raise NpuperfError(f"{databases[0]} is a database directory: name the database to merge "
                           f"it into with --db DIR")
    if (histories or runs) and history is None:
        first = (histories or runs)[0]
        raise NpuperfError(f"{first}: name the history to merge it into with --history FILE")
    if history is not None and any(h.resolve() == Path(history).resolve() for h in histories):
        raise NpuperfError(f"{history}: a source is the target history itself")
    # Read every run JSON first: a bad one stops the merge before anything is written.
    imported = [records_from_run_json(read_run_json(path), path) for path in runs]
    lines = []
    if databases:
        lines.append(combine_databases(database, databases, dry_run=dry_run).render())
    if histories or imported:
        if dry_run:
            count = len(imported)
            for path in histories:
                with HistoryStore(path, readonly=True) as store:
                    count += len(store.runs())
            lines.append(f"would merge {count} run(s) into {history}")
        else:
            total_runs = total_cases = 0
            with HistoryStore(history) as target:
                for path in histories:
                    with HistoryStore(path, readonly=True) as source:
                        done_runs, done_cases = target.merge_from(source)
                    total_runs, total_cases = total_runs + done_runs, total_cases + done_cases
                for run, cases in imported:
                    total_cases += target.record(run, cases)
                    total_runs += 1
                kept = len(target.runs())
            lines.append(f"merged {total_runs} run(s) ({total_cases} case(s)) into {history}; "
                         f"it holds {kept} run(s)")
    return "\n".join(lines)
