"""`run_<stamp>.json`: everything a later tool needs to read a session back (every case with
its statistics, totals, the write per file), strict JSON (no NaN: null instead)."""

from __future__ import annotations

import dataclasses
import json
import math
import os
import shutil
import socket
from collections.abc import Callable, Sequence
from pathlib import PurePath
from typing import Any, BinaryIO, TextIO

from ..db.samples import samples_text
from ..measure.overhead import DEFINITION as OVERHEAD_DEFINITION
from ..measure.result import CaseResult
from ..replay.outcome import GAP_HIGH, GAP_LOW, SessionInfo, WriteOutcome
from . import summary as S

try:
    import orjson
except ImportError:  # installed without its dependencies (pip's --no-deps)
    orjson = None

SCHEMA = "npuperf-run/1"


def run_json(outcome: WriteOutcome, results: list[CaseResult],
             session: SessionInfo, *, baseline: str = "", cases: bool = True
             ) -> dict[str, Any]:
    """The run JSON as a dict; `cases=False` leaves the case list out (`case_lines` renders
    it apart, `dumps_run_json` puts it in place)."""
    in_calls = S.session_calls_s(results, session)
    overhead = S.overhead(results, session)
    return {
        "schema": SCHEMA,
        "run_id": outcome.run_id,
        "stamp": outcome.stamp,
        "host": socket.gethostname(),
        "baseline": {"ref": baseline} if baseline else None,
        "session": {
            "started": session.started,
            "wall_s": _num(session.wall_s),
            "wall_from": session.wall_from,
            "workers": session.workers,
            "cores": session.cores,
            "load_at_start": _num(session.load_at_start),
            "threads": session.threads,
            "device": jsonable(session.device),
            "options": jsonable(session.options),
        },
        "database": {
            "source": str(outcome.source),
            "target": None if outcome.target is None else str(outcome.target),
            "native": outcome.native,
            "dry_run": outcome.dry_run,
        },
        "totals": {
            "cases": len(results),
            "session_wall_s": _num(session.wall_s),
            "time_in_calls_s": _num(S.time_in_calls(results)),
            "cases_wall_s": _num(math.fsum(r.wall_s for r in results if S.finite(r.wall_s))),
            "duty_cycle": _num(S.duty_cycle(in_calls, session)) if session.timed_here else None,
            "per_case_overhead_s": _num(S.per_case_overhead(in_calls, session, len(results))),
            "duty_cycle_definition": S.DUTY_CYCLE_DEFINITION,
            "overhead_s": None if overhead is None else _num(overhead[0]),
            "overhead_parts_s": {} if overhead is None else
            {name: _num(seconds) for name, seconds in overhead[1].items()},
            "overhead_definition": OVERHEAD_DEFINITION,
            "by_status": S.status_counts(results),
            "preempted": S.preemption(results),
            "by_kernel_type": S.kernel_type_counts(results),
        },
        "outcome": {
            "files": [jsonable(dataclasses.asdict(f)) for f in outcome.files],
            "totals": outcome.totals(),
            "gap_rows": len(outcome.gaps),
            "hotspots": sum(1 for g in outcome.gaps if g.hotspot),
            "gap_band": [GAP_LOW, GAP_HIGH],
            "notes": list(outcome.notes),
        },
        **({"cases": [case_json(r) for r in results]} if cases else {}),
    }


def case_json(result: CaseResult) -> dict[str, Any]:
    """One case. Its kept samples (at most MAX_KEPT_SAMPLES, spread over the run) are in
    `samples_z`, compressed (base64 of zlib float32, as in the history): a run JSON can be the
    baseline of a later run (`npuperf compare`, `--npuperf-baseline`)."""
    tflops, gbps = S.achieved(result)
    st = result.stats
    stats = None if st is None else {
        "samples": st.samples, "mean": _num(st.mean), "median": _num(st.median),
        "std": _num(st.std), "min": _num(st.min), "max": _num(st.max), "p90": _num(st.p90),
        "q1": _num(st.q1), "q3": _num(st.q3), "outliers": st.outliers}
    return {
        "nodeid": result.nodeid,
        "case_id": result.case_id,
        "kernel_type": result.kernel_type,
        "measured_kernel_type": result.measured_kernel_type,
        "file": result.file,
        "signature": result.signature,
        "row": result.row,
        "status": result.status,
        "method": result.method,
        "fallback": result.fallback,
        "implementation": result.implementation,
        "impl": result.impl,
        "cache": result.cache,
        "statistic": result.statistic,
        "value": _num(result.value),
        "precision": _num(result.precision),
        "stop_reason": result.stop_reason,
        "stats": stats,
        "error": result.error,
        "detail": result.detail,
        "note": result.note,
        "device": result.device,
        "stack": result.stack,
        "threads": result.threads,
        "host_load": _num(result.host_load),
        "reference_us": _num(result.reference_us),
        "reference_memory_us": _num(result.reference_memory_us),
        "warmup": result.warmup,
        "preempted": result.preempted,
        "preempted_kept": result.preempted_kept,
        "time_in_calls_s": _num(result.time_in_calls_s),
        "wall_s": _num(result.wall_s),
        "flops": _num(result.flops),
        "bytes": _num(result.bytes),
        "bound_us": _num(result.bound_us),
        "compute_bound_us": _num(result.compute_bound_us),
        "memory_bound_us": _num(result.memory_bound_us),
        "memory_level": result.memory_level,
        "hbm_bound_us": _num(result.hbm_bound_us),
        "bound_by": result.bound_by,
        "bound_derivation": result.bound_derivation,
        "cold_bytes": _num(result.cold_bytes),
        "verified": result.verified,
        "extra_kernels": dict(result.extra_kernels),
        "achieved_tflops": _num(tflops),
        "achieved_gbps": _num(gbps),
        "mfu": _num(result.mfu),
        "mbu": _num(result.mbu),
        "regression": _flat_jsonable(result.regression) if result.regression else None,
        "timestamp": result.timestamp,
        "samples_z": samples_text(result.samples),
    }


def case_result(entry: dict[str, Any]) -> CaseResult:
    """A case of a run JSON back as a result (its kept samples, statistics and probes): what a
    fresh process measured for its parent (harness/fresh.py)."""
    from ..db.samples import samples_from_text
    from ..measure.stats import SampleStats

    values = {k: v for k, v in entry.items()
              if k in CaseResult.__dataclass_fields__ and k not in ("stats", "samples")}
    result = CaseResult(**values)
    stats = entry.get("stats")
    result.stats = SampleStats.from_dict(stats) if isinstance(stats, dict) else None
    result.samples = samples_from_text(entry.get("samples_z") or "")
    return result


CASES_PER_PIECE = 5_000  # case lines per piece of a run JSON's text (case_pieces)


# The stdlib's encoder, as compact as orjson's: a case line is the same JSON either way.
# allow_nan=False: a NaN that slipped through must fail here, not in the reader.
_STDLIB_LINE = json.JSONEncoder(allow_nan=False, ensure_ascii=False, separators=(",", ":")).encode


def _float_of(value: Any) -> float:
    """orjson's `default`: a float subclass (numpy's float64) as the stdlib writes it."""
    if isinstance(value, float):
        return float(value)
    raise TypeError(f"Object of type {type(value).__name__} is not JSON serializable")


def case_line(case: dict[str, Any]) -> bytes:
    """One case of the case list, compact JSON in UTF-8: orjson's (a large run's 10^5 lines
    take a third of the stdlib's time, seconds at its end), else the stdlib's (installed
    without its dependencies, or a value orjson refuses: an integer beyond 64 bits). orjson
    writes a NaN as null where the stdlib raises: strict JSON either way."""
    if orjson is not None:
        try:
            return orjson.dumps(case, default=_float_of, option=orjson.OPT_NON_STR_KEYS)
        except orjson.JSONEncodeError:
            pass
    return _STDLIB_LINE(case).encode("utf-8")


def case_pieces(cases: Sequence[dict[str, Any]] | Sequence[CaseResult]) -> list[str]:
    """The case list's lines as the run JSON holds them (case dicts, or results: `case_json`
    of each), one line per case, in pieces of CASES_PER_PIECE lines: 10^5 cases make
    hundreds of MB of text, which is never joined into one string (`run_json_pieces`)."""
    return [_piece(cases[first:first + CASES_PER_PIECE]).decode("utf-8")
            for first in range(0, len(cases), CASES_PER_PIECE)]


def _piece(cases: Sequence[dict[str, Any]] | Sequence[CaseResult]) -> bytes:
    return b",\n".join(b"  " + case_line(c if isinstance(c, dict) else case_json(c))
                       for c in cases)


def spool_cases(cases: Sequence[CaseResult], spool: BinaryIO) -> int:
    """`case_pieces` of the results, written to `spool` (UTF-8) a piece at a time, the pieces
    joined as the run JSON joins them: a large run's hundreds of MB of case lines wait on
    disk, not in memory, until the file is written (`spooled_run_json`). Returns the cases."""
    for first in range(0, len(cases), CASES_PER_PIECE):
        if first:
            spool.write(b",\n")
        spool.write(_piece(cases[first:first + CASES_PER_PIECE]))
    return len(cases)


def spooled_run_json(data: dict[str, Any], spool: BinaryIO, cases: int
                     ) -> Callable[[TextIO], None]:
    """What writes the run JSON (`data` without its cases, the `cases` lines `spool_cases`
    wrote to `spool`) to a text handle: `dumps_run_json`'s text, the lines copied over."""
    def fill(handle: TextIO) -> None:
        if cases:
            opening, _, closing = run_json_pieces(data, [""])
        else:
            (opening,), closing = run_json_pieces(data, []), ""
        handle.write(opening)
        if cases:
            handle.flush()
            append_file(spool, handle.buffer)
        handle.write(closing)
    return fill


def append_file(source: BinaryIO, target: BinaryIO) -> None:
    """All of `source` written to `target` where it stands, inside the kernel where it can
    (`os.sendfile`: the hundreds of MB of a large run's case lines copied through Python's
    buffers took most of a second), else through a buffer."""
    source.flush()
    sent = 0
    try:
        size = os.fstat(source.fileno()).st_size
        target.flush()
        into = target.fileno()
        while sent < size:
            step = os.sendfile(into, source.fileno(), sent, size - sent)
            if not step:
                break
            sent += step
    except (AttributeError, OSError):  # io.UnsupportedOperation is an OSError
        pass  # no sendfile between these two (another system, a handle in memory)
    source.seek(sent)  # (what follows is written at the file's offset, where sendfile left it)
    shutil.copyfileobj(source, target, 1 << 22)


def run_json_pieces(data: dict[str, Any], pieces: list[str] | None = None) -> list[str]:
    """The run JSON's text in pieces (their concatenation is `dumps_run_json`): indented,
    except one line per case, so that 10^5 cases stay compact and grep-able. `pieces`: the
    case list rendered already (`case_pieces`; `data` then holds no "cases")."""
    if pieces is None:
        cases = data.get("cases")
        pieces = case_pieces(cases) if isinstance(cases, list) else []
    if not pieces:
        whole = {**data, "cases": []} if "cases" not in data else data
        return [json.dumps(whole, indent=1, allow_nan=False, ensure_ascii=False) + "\n"]
    head = json.dumps({k: v for k, v in data.items() if k != "cases"}, indent=1,
                      allow_nan=False, ensure_ascii=False)
    opening = "{\n" if head == "{}" else head[:-2] + ",\n"
    text = [f'{opening} "cases": [\n']
    for index, piece in enumerate(pieces):
        if index:
            text.append(",\n")
        text.append(piece)
    text.append("\n ]\n}\n")
    return text


def dumps_run_json(data: dict[str, Any], pieces: list[str] | None = None) -> str:
    """The run JSON's text (see `run_json_pieces`)."""
    return "".join(run_json_pieces(data, pieces))


def jsonable(value: Any) -> Any:
    """Options and device descriptions hold whatever their authors put there (paths,
    tuples, enums): make them JSON, keeping what JSON can say and stringifying the rest."""
    if value is None or isinstance(value, (bool, str, int)):
        return value
    if isinstance(value, float):
        return _num(value)
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, set, frozenset)):
        items = sorted(value, key=str) if isinstance(value, (set, frozenset)) else value
        return [jsonable(v) for v in items]
    if isinstance(value, PurePath):
        return str(value)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return jsonable(dataclasses.asdict(value))
    if type(value).__module__ == "numpy" and hasattr(value, "tolist"):
        return jsonable(value.tolist())
    return str(value)


_PLAIN = (str, int, bool, type(None))


def _flat_jsonable(value: dict) -> Any:
    """`jsonable` of a dict, its plain values (a verdict's: strings, numbers) passed straight
    through: 10^5 times at the end of a large run."""
    if not all(type(k) is str and (type(v) in _PLAIN or (type(v) is float and v - v == 0.0))
               for k, v in value.items()):
        return jsonable(value)
    return dict(value)


def _num(value: float | int | None) -> float | int | None:
    if value is None or type(value) is int:
        return value
    value = float(value)
    return value if value - value == 0.0 else None  # nan and +-inf give nan
