"""nccl-tests and HCCL Test output to hcom table rows.

nccl-tests (NVIDIA/nccl-tests; layout read from its src/common.cu and src/util.cu):
- the result table is announced by a `#` header naming its columns: modern builds
  `size count type redop root time algbw busbw #wrong` (out-of-place, then in-place), older
  ones `error` for `#wrong`, no `root` (all_reduce), no `redop` (all_gather) or `root`
  instead of `redop` (broadcast). Columns are found by name, so both read the same way, as
  does the per-iteration variant (`i_min ...`) and a trailing timestamp.
- `size` is nccl-tests' whole buffer, max(send, recv) bytes: all_gather's gathered output and
  reduce_scatter's scattered input are n x the per-rank message of docs/format.md §7, so their
  message_bytes is size / n; all_reduce, broadcast and alltoall take size as is.
- `#wrong` counts wrong elements (a row with any is not imported); old `error` is the largest
  deviation (kept in `check`); `N/A` means the run did not check.
- Duration(us) is the out-of-place time (in-place where a line has only that), busbw_gbps the
  log's own busbw of the same column group; the in-place pair is kept in inplace_* columns.
- Lines that are not the table (MPI and NCCL chatter, `[1,0]<stdout>:` prefixes of
  `mpirun --tag-output`, warnings between rows) are skipped.
- Ranks: the `#  Rank N ... on HOST device D` lines (one per GPU); the hosts give the grid
  (hosts x GPUs per host) that places the group on a topology tier unless one is given.

HCCL Test (CANN's hccl_test; the layout is that of the CANN documentation's example, reformatted
by the docs, so it is read leniently): a `|`-separated table with a `data_size(Bytes)` column,
`avg_time(us)` (or `aveg_time`, as the documentation names it), `alg_bandwidth(GB/s)` and
`check_result` (success, failed, NULL); header words may end in `:`. Assumed: data_size is the
per-NPU message of docs/format.md §7 for every op (the documentation: "the size of data used in
collective communication on one NPU"); the log does not say how many NPUs took part nor the data
type: an `mpirun -n N` / `-d TYPE` command line in the file gives them, else --num-devices
(required) and the data type (default fp32, HCCL Test's default). Its alg_bandwidth is not
used: in the example it is data_size / time in GiB/s; bandwidth_gbps is recomputed.
"""

from __future__ import annotations

import datetime as _dt
import math
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from ..db.errors import ContractError, NpuperfError, clip
from ..db.files import read_bounded
from ..db.shapes import dtype_bytes, is_known_dtype, normalize_dtype
from .ops import OPS, op_named
from .sweep import check_grid, tier_of
from .table import cell, ranks_cell

MAX_LOG_BYTES = 64 << 20
NCCL_TESTS, HCCL_TEST = "nccl-tests", "hccl-test"
_TAG_PREFIX = re.compile(r"^\[\d+,\d+\]<std(?:out|err)>:\s?")
_RANK_LINE = re.compile(r"^#\s*Rank\s+(\d+)\b.*?\bon\s+(\S+)\s+device\s+(\d+)")
_NCCL_PARAMS = re.compile(r"warmup iters:\s*(\d+)\s+iters:\s*(\d+)")
_NCCL_BOUNDS = re.compile(r"^#\s*Out of bounds values\s*:\s*(\d+)\s+FAILED")
# Binary names, also inside file names such as `h100_all_reduce_perf.txt` (no \b: `_` is a
# word character).
_NCCL_BINARY = re.compile(r"(?<![A-Za-z])(all_reduce|all_gather|reduce_scatter|alltoallv?|"
                          r"broadcast|reduce|sendrecv|scatter|gather|hypercube)_perf(?![A-Za-z])")
_HCCL_BINARY = re.compile(r"(?<![A-Za-z])(all_reduce|all_gather|reduce_scatter|alltoallv?|"
                          r"broadcast|reduce|scatter|send_recv)_test(?![A-Za-z])")
# A collective named in a file name without its tool's binary, as benchmark harnesses name
# their logs: superbench's `superbench_nccl_allreduce.log`, `nccl_all-gather.txt`, `allReduce`.
_COLLECTIVE_NAME = re.compile(r"(?<![A-Za-z])(all[_-]?reduce|all[_-]?gather|reduce[_-]?scatter|"
                              r"all[_-]?to[_-]?allv?|broadcast|bcast)(?![A-Za-z])", re.IGNORECASE)
_HCCL_PARAMS = re.compile(r"iters is (\d+),\s*warmup_iters is (\d+)")
_MPI_NP = re.compile(r"(?:mpirun|mpiexec)\b.*?\s-(?:n|np)\s+(\d+)")
_HCCL_DTYPE = re.compile(r"_test\b.*?\s-d\s+(\w+)")
_TIME_NAMES = ("time", "cputime")
# nccl-tests' type names (src/common.cu test_typenames) -> contract dtype tokens.
_NCCL_TYPES = {"float": "DT_FLOAT", "half": "DT_FLOAT16", "bfloat16": "DT_BF16",
               "int8": "DT_INT8", "uint8": "DT_UINT8", "int32": "DT_INT32", "int": "DT_INT32",
               "uint32": "DT_UINT32", "int64": "DT_INT64", "uint64": "DT_UINT64",
               "double": "DT_DOUBLE", "f8e4m3": "DT_FLOAT8_E4M3", "f8e5m2": "DT_FLOAT8_E5M2"}


@dataclass
class ImportedLog:
    path: Path
    format: str
    op: str
    num_devices: int
    topology_tier: int
    rows: list[dict[str, str]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def file_name(self) -> str:
        return OPS[self.op].file_name


@dataclass(frozen=True)
class ImportOptions:
    op: str | None = None
    num_devices: int | None = None
    topology_tier: int | None = None
    grid: tuple[int, ...] | None = None
    dtype: str | None = None  # HCCL Test only: its table has no type column
    run_id: str = ""


def read_log(path: Path) -> str:
    data = read_bounded(path, MAX_LOG_BYTES, "a benchmark log",
                        f"a benchmark log is expected to be under {MAX_LOG_BYTES >> 20} MiB")
    return data.decode("utf-8", errors="replace")


def _lines(text: str) -> list[str]:
    return [_TAG_PREFIX.sub("", line.rstrip("\r")) for line in text.splitlines()]


def detect_format(text: str) -> str | None:
    for line in _lines(text):
        if "|" in line and "data_size" in line.lower():
            return HCCL_TEST
        if _nccl_header(line) is not None:
            return NCCL_TESTS
    return None


def import_log(path: str | Path, options: ImportOptions) -> ImportedLog:
    path = Path(path)
    text = read_log(path)
    kind = detect_format(text)
    if kind is None:
        raise ContractError(f"{path}: no nccl-tests or HCCL Test result table found (nccl-tests: "
                            f"a '# size count type ...' header; HCCL Test: a 'data_size | "
                            f"avg_time | ...' header)")
    parse = _parse_nccl_tests if kind == NCCL_TESTS else _parse_hccl_test
    lines = _lines(text)
    cut = _cut_last_line(text, lines)
    log = parse(path, lines, options)
    if cut is not None:
        log.notes.append(f"the last line has no line end (the log was cut there): left out: "
                         f"{clip(cut, 60)}")
    return log


def _cut_last_line(text: str, lines: list[str]) -> str | None:
    """Remove and return a result row on the last line when it has no line end: a log cut
    while it was written holds half a row there, whose numbers would be read as whole."""
    if not lines or text.endswith(("\n", "\r")) or not lines[-1].strip()[:1].isdigit():
        return None
    return lines.pop().strip()


class _Junk:
    """Lines inside a result table that are no result row: counted, one shown."""

    def __init__(self) -> None:
        self.count = 0
        self.example = ""

    def add(self, line: str) -> None:
        self.count += 1
        self.example = self.example or line.strip()

    def note(self) -> list[str]:
        if not self.count:
            return []
        return [f"{self.count} line(s) inside the result table are no result row, left out "
                f"(e.g. {clip(self.example, 60)})"]


def _op_of(path: Path, lines: list[str], options: ImportOptions, binary: re.Pattern,
           tool: str, table: Callable[[], tuple[str | None, str]] | None = None,
           notes: list[str] | None = None) -> str:
    """The collective of a log: --op, else the binary on a command line or in the file name,
    else a collective's name in the file name (superbench's logs), else what the result
    table's columns say (`table`: (op or None, why))."""
    if options.op:
        return op_named(options.op).name
    for text in (*lines, path.name):
        match = binary.search(text)
        if match:
            try:
                return op_named(match.group(1)).name
            except ValueError:
                raise ContractError(f"{path}: {match.group(0)} has no hcom table (collectives: "
                                    f"{', '.join(OPS)})") from None
    match = _COLLECTIVE_NAME.search(path.name)
    if match:
        if notes is not None:
            notes.append(f"collective taken from the file name ({match.group(0)}); pass --op "
                         f"if it is another")
        return op_named(match.group(1)).name
    why = "no command line or file name naming it"
    if table is not None:
        op, why = table()
        if op is not None:
            if notes is not None:
                notes.append(f"collective taken from the result table: {why}; pass --op if it "
                             f"is another")
            return op
    raise NpuperfError(f"{path}: cannot tell which collective this {tool} output measured "
                       f"({why}): pass --op")


def _op_from_table(path: Path, raw: list[tuple[list[str], _Layout]], n: int
                   ) -> tuple[str | None, str]:
    """The collective an nccl-tests table fits (None where several do), and why. nccl-tests
    prints `count` as the per-rank element count of the op's parameter and `size` as the
    larger buffer: size = count x element size for all_reduce, broadcast and reduce,
    n x that for all_gather, reduce_scatter and alltoall. `redop` is `none` where nothing is
    reduced; `root` -1 where no rank is the root."""
    tokens, lay = raw[0]
    pre = lay.preamble
    if not {"size", "count", "type"} <= pre.keys():
        return None, "no size, count and type columns to tell it from"
    dtype = _NCCL_TYPES.get(tokens[pre["type"]].lower(), normalize_dtype(tokens[pre["type"]]))
    size, count = int(tokens[pre["size"]]), int(tokens[pre["count"]])
    if not is_known_dtype(dtype) or count < 1:
        return None, f"an unknown data type {tokens[pre['type']]!r} or an empty first row"
    ratio = size / (count * dtype_bytes(dtype))
    redop = tokens[pre["redop"]].lower() if "redop" in pre else "none"
    root = tokens[pre["root"]] if "root" in pre else "-1"
    per_rank = "size = count x element size" if ratio == 1 else \
        f"size = {n} ranks x count x element size" if ratio == n else f"size / count = {ratio:g}"
    facts = f"redop {redop}, root {root}, {per_rank}"
    if ratio == 1 and redop != "none":
        if root != "-1":
            raise ContractError(f"{path}: the table is a reduce to root {root} ({facts}), which has no "
                                f"hcom table (collectives: {', '.join(OPS)})")
        return "all_reduce", f"{facts}: all_reduce"
    if ratio == 1 and root != "-1":
        return "broadcast", f"{facts}: broadcast"
    if ratio == n and n > 1 and redop != "none":
        return "reduce_scatter", f"{facts}: reduce_scatter"
    if ratio == n and n > 1:
        return None, f"{facts}: all_gather or all_to_all alike"
    return None, f"{facts}: no collective with a table fits"


def _tier(n: int, options: ImportOptions, hosts: list[str], notes: list[str]) -> int:
    if options.topology_tier is not None:
        return options.topology_tier
    grid = options.grid
    if grid is None:
        grid = (1, n)
        if len(set(hosts)) > 1:
            if n % len(set(hosts)):
                notes.append(f"{n} ranks on {len(set(hosts))} hosts are not evenly spread: "
                             f"grid taken as one node")
            else:
                grid = (len(set(hosts)), n // len(set(hosts)))
    return tier_of(range(n), check_grid(grid))


def _now() -> str:
    return _dt.datetime.now().isoformat(timespec="seconds")


def _number(text: str) -> float | None:
    try:
        value = float(text)
    except ValueError:
        return None
    return value if math.isfinite(value) and value >= 0 else None


def _positive(text: str) -> float | None:
    value = _number(text)
    return value if value else None


# -- nccl-tests -------------------------------------------------------------------------------

@dataclass(frozen=True)
class _Layout:
    preamble: dict[str, int]  # size, count, type, redop, root -> token index
    groups: list[dict[str, int]]  # per column group (out-of-place, in-place): name -> offset
    width: list[int]  # tokens per group


def _nccl_header(line: str) -> _Layout | None:
    if not line.startswith("#"):
        return None
    tokens = line.lstrip("#").split()
    if not ({"size", "count", "algbw", "busbw"} <= set(tokens)
            and any(t in _TIME_NAMES for t in tokens)):
        return None
    starts = [i for i, t in enumerate(tokens) if t in _TIME_NAMES]
    preamble = {t: i for i, t in enumerate(tokens[:starts[0]])}
    groups, widths = [], []
    for k, start in enumerate(starts):
        end = starts[k + 1] if k + 1 < len(starts) else len(tokens)
        names = tokens[start:end]
        groups.append({("time" if n in _TIME_NAMES else n.lstrip("#")): j
                       for j, n in enumerate(names)})
        widths.append(end - start)
    return _Layout(preamble, groups, widths)


@dataclass
class _Measure:
    time_us: float
    busbw: float | None
    check: str
    wrong: int


def _group_values(tokens: list[str], start: int, names: dict[str, int]) -> _Measure | None:
    time = _positive(tokens[start + names["time"]])
    if time is None:
        return None
    busbw = _number(tokens[start + names["busbw"]]) if "busbw" in names else None
    check, wrong = "not checked", 0
    for name, label in (("wrong", "#wrong"), ("error", "error")):
        text = tokens[start + names[name]] if name in names else "N/A"
        if text.upper() == "N/A":
            continue
        check = f"{label} {text}"
        if name == "wrong":  # a count of wrong elements; `error` is a deviation
            try:
                wrong = int(float(text))
            except ValueError:
                check = f"#wrong unreadable ({text})"
                wrong = 1
    return _Measure(time, busbw, check, wrong)


def _bogus_row(line: str, tokens: list[str], layout: _Layout) -> bool:
    """A line between the result rows that is neither a comment nor chatter: as many fields
    as a row, mostly numbers, or bytes that are no text."""
    if line.startswith("#"):
        return False
    if "\ufffd" in line or any(not c.isprintable() and c != "\t" for c in line):
        return True
    numbers = sum(_number(t) is not None or t.lstrip("-").isdigit() for t in tokens)
    return len(tokens) > len(layout.preamble) and 2 * numbers >= len(tokens)


def _parse_nccl_tests(path: Path, lines: list[str], options: ImportOptions) -> ImportedLog:
    ranks: dict[int, str] = {}
    device_names: set[str] = set()
    warmup = iters = ""
    old_style = False
    failed_checks = 0
    layout: _Layout | None = None
    raw: list[tuple[list[str], _Layout]] = []
    junk = _Junk()
    for line in lines:
        stripped = line.strip()
        rank_line = _RANK_LINE.match(stripped)
        if rank_line:
            ranks[int(rank_line.group(1))] = rank_line.group(2)
            name = stripped.split("]", 1)[-1].strip() if "]" in stripped else ""
            if name:
                device_names.add(name)
            continue
        bounds = _NCCL_BOUNDS.match(stripped)
        if bounds:
            failed_checks = int(bounds.group(1))
            continue
        params = _NCCL_PARAMS.search(stripped)
        if params and stripped.startswith("#"):
            warmup, iters = params.group(1), params.group(2)
            continue
        header = _nccl_header(stripped)
        if header is not None:
            layout = header
            old_style = old_style or "error" in stripped.split()
            continue
        tokens = stripped.split()
        if layout is None or not tokens[:1] or not tokens[0].isdigit():
            if layout is not None and _bogus_row(stripped, tokens, layout):
                junk.add(stripped)  # a row whose size is no number, binary garbage
            continue  # before the table, or MPI / NCCL chatter between its rows
        if len(tokens) < 2 or not tokens[1].isdigit():
            junk.add(stripped)
            continue
        raw.append((tokens, layout))
    if not raw:
        raise ContractError(f"{path}: an nccl-tests header but no result rows")
    notes: list[str] = []
    n = options.num_devices or len(ranks)
    if not n:
        raise NpuperfError(f"{path}: no '#  Rank N ... device' lines say how many ranks took "
                            f"part: pass --num-devices")
    if options.num_devices and ranks and options.num_devices != len(ranks):
        notes.append(f"--num-devices {options.num_devices} given; the log lists {len(ranks)} "
                     f"rank(s)")
    op = _op_of(path, lines, options, _NCCL_BINARY, "nccl-tests",
                table=lambda: _op_from_table(path, raw, n), notes=notes)
    tier = _tier(n, options, list(ranks.values()), notes)
    log = ImportedLog(path, NCCL_TESTS, op, n, tier, notes=notes)
    base = {"num_devices": str(n), "topology_tier": str(tier), "backend": "nccl",
            "device": "; ".join(sorted(device_names)), "ranks": ranks_cell(range(n)),
            "source": f"nccl-tests:{path.name}", "run_id": options.run_id, "time": _now(),
            "statistic": f"mean of {iters or '?'} iterations per op",
            "samples": "1", "ops_per_sample": iters, "warmup": warmup}
    by_key: dict[tuple[int, str], dict[str, str]] = {}
    skipped: dict[str, int] = {}

    def skip(reason: str) -> None:
        skipped[reason] = skipped.get(reason, 0) + 1

    for tokens, lay in raw:
        row = _nccl_row(tokens, lay, op, n, skip)
        if row is None:
            continue
        key = (int(row["message_bytes"]), row["dtype"])
        if key in by_key:
            skip("a size and type measured again later in the log: the later kept")
        by_key[key] = {**base, **row}
    log.rows = list(by_key.values())
    log.notes += [f"{count} row(s): {reason}" for reason, count in skipped.items()]
    log.notes += junk.note()
    if old_style:
        log.notes.append("old nccl-tests table (an 'error' column: the largest deviation, kept "
                         "in check)")
    if failed_checks:
        log.notes.append(f"nccl-tests reported {failed_checks} out-of-bounds value(s) (FAILED): "
                         f"look at the check column of the imported rows")
    return log


def _nccl_row(tokens: list[str], lay: _Layout, op: str, n: int, skip) -> dict[str, str] | None:
    pre = lay.preamble
    first = len(pre)
    measures: list[_Measure | None] = []
    offset = first
    for names, width in zip(lay.groups, lay.width):
        if offset + width > len(tokens):
            break
        measures.append(_group_values(tokens, offset, names))
        offset += width
    if not measures:
        skip("too few columns for the header")
        return None
    if len(measures) == 1 and len(lay.groups) == 2:
        outplace, inplace = None, measures[0]  # an in-place-only line (trace replay)
    else:
        outplace, inplace = measures[0], measures[1] if len(measures) > 1 else None
    main = outplace or inplace
    if main is None:
        skip("no valid time")
        return None
    if any(m is not None and m.wrong > 0 for m in (outplace, inplace)):
        skip("nccl-tests found wrong elements (#wrong > 0): not imported")
        return None
    redop = tokens[pre["redop"]].lower() if "redop" in pre else "none"
    if OPS[op].reduces and redop not in ("sum", "none"):
        skip(f"reduction {redop} (the tables hold sums)")
        return None
    type_name = tokens[pre["type"]] if "type" in pre else ""
    dtype = _NCCL_TYPES.get(type_name.lower(), normalize_dtype(type_name))
    if not is_known_dtype(dtype):
        skip(f"unknown data type {type_name!r}")
        return None
    size = int(tokens[pre["size"]])
    message = size // n if op in ("all_gather", "reduce_scatter") else size
    if op in ("all_gather", "reduce_scatter") and size % n:
        skip(f"size not divisible by {n} ranks")
        return None
    if message < 1:
        skip("an empty message")
        return None
    row = {"message_bytes": str(message), "dtype": dtype,
           "Duration(us)": cell(main.time_us, 3),
           "bandwidth_gbps": cell(message / main.time_us / 1e3),
           "busbw_gbps": cell(main.busbw),
           "method": f"nccl-tests {'out-of-place' if main is outplace else 'in-place'}",
           "check": main.check if main.check == "not checked" else f"nccl-tests {main.check}"}
    if inplace is not None and main is outplace:
        row["inplace_duration_us"] = cell(inplace.time_us, 3)
        row["inplace_busbw_gbps"] = cell(inplace.busbw)
    return row


# -- HCCL Test --------------------------------------------------------------------------------

def _hccl_columns(line: str) -> dict[str, int] | None:
    names = [c.strip().rstrip(":").strip().lower() for c in line.split("|")]
    found = {}
    for i, name in enumerate(names):
        for key, prefixes in (("size", ("data_size",)), ("time", ("avg_time", "aveg_time")),
                              ("check", ("check_result",))):
            if name.startswith(prefixes):
                found[key] = i
    return found if {"size", "time"} <= set(found) else None


def _parse_hccl_test(path: Path, lines: list[str], options: ImportOptions) -> ImportedLog:
    notes: list[str] = []
    op = _op_of(path, lines, options, _HCCL_BINARY, "HCCL Test", notes=notes)
    text = "\n".join(lines)
    n = options.num_devices
    if n is None:
        match = _MPI_NP.search(text)
        if not match:
            raise NpuperfError(f"{path}: HCCL Test output does not say how many NPUs took part "
                                f"(no 'mpirun -n N' line): pass --num-devices")
        n = int(match.group(1))
    if options.dtype:
        dtype = normalize_dtype(options.dtype)
    else:
        match = _HCCL_DTYPE.search(text)
        dtype = normalize_dtype(match.group(1)) if match else "DT_FLOAT"
        if not match:
            notes.append("no '-d TYPE' on a command line: HCCL Test's default fp32 assumed "
                         "(pass --dtype)")
    if not is_known_dtype(dtype):
        raise ContractError(f"{path}: unknown data type {dtype}")
    params = _HCCL_PARAMS.search(text)
    iters, warmup = (params.group(1), params.group(2)) if params else ("", "")
    tier = _tier(n, options, [], notes)
    log = ImportedLog(path, HCCL_TEST, op, n, tier, notes=notes)
    columns: dict[str, int] | None = None
    skipped: dict[str, int] = {}
    by_size: dict[int, dict[str, str]] = {}
    junk = _Junk()
    for line in lines:
        if "|" not in line:
            continue
        header = _hccl_columns(line)
        if header is not None:
            columns = header
            continue
        fields = [f.strip() for f in line.split("|")]
        if columns is None or not any(fields) or set("".join(fields)) <= set("-=+: "):
            continue  # before the table, or a rule under its header
        if len(fields) <= max(columns.values()) or not fields[columns["size"]].isdigit():
            junk.add(line)
            continue
        message = int(fields[columns["size"]])
        time = _positive(fields[columns["time"]])
        check = fields[columns["check"]].lower() if "check" in columns else "null"
        reason = ("no valid time" if time is None else "an empty message" if message < 1
                  else "HCCL Test's check failed: not imported" if check == "failed" else None)
        if reason:
            skipped[reason] = skipped.get(reason, 0) + 1
            continue
        if message in by_size:
            skipped["a size measured again later: the later kept"] = skipped.get(
                "a size measured again later: the later kept", 0) + 1
        by_size[message] = {
            "message_bytes": str(message), "num_devices": str(n), "dtype": dtype,
            "topology_tier": str(tier), "Duration(us)": cell(time, 3),
            "bandwidth_gbps": cell(message / time / 1e3),
            "busbw_gbps": cell(message / time / 1e3 * OPS[op].busbw_factor(n)),
            "statistic": f"mean of {iters or '?'} iterations per op (avg_time)",
            "samples": "1", "ops_per_sample": iters, "warmup": warmup,
            "method": "HCCL Test", "check": "check_result " + (check if check != "null"
                                                               else "NULL (not checked)"),
            "ranks": ranks_cell(range(n)), "backend": "hccl",
            "source": f"hccl-test:{path.name}", "run_id": options.run_id, "time": _now()}
    if not by_size and columns is None:
        raise ContractError(f"{path}: no HCCL Test header (data_size | avg_time | ...)")
    log.rows = list(by_size.values())
    log.notes += [f"{count} row(s): {reason}" for reason, count in skipped.items()]
    log.notes += junk.note()
    log.notes.append("data_size read as the per-NPU message_bytes (HCCL Test documentation)")
    return log
