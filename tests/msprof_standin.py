"""A stand-in for CANN's `msprof` command line, for tests only (never part of the product).

`msprof --output=RUN <switches> <app...>` runs the application as msprof would, then lays
down one PROF directory in the real layout (docs/format.md §6, realdata/op_summary/) from what
the application recorded: the hand-off file the npuperf child wrote (named by the
NPUPERF_MSPROF_CHILD environment variable) gives every case's pid, device, wall-clock range,
calls and warmups; the database rows give the shapes. Per case it writes one kernel per call
(warmups included) inside the case's range, an mstx range with the case id, and the kernels'
counters. `msprof --export=on --output=DIR` writes the summaries of a PROF directory whose
export was deferred.

Durations are a formula of the case's position and the call's (`kernel_duration`), so a test
can compute what the database must hold. Behaviour switches (environment):
- MSPROF_STANDIN_RAN="MatMulV2=MatMulV3,...": the kernel type the device "ran" for a row type
- MSPROF_STANDIN_EXTRA="RmsNorm=Cast": one more kernel of that type per call
- MSPROF_STANDIN_TX= cann8 (default) | new | none: marker summary form (none: no markers)
- MSPROF_STANDIN_DROP=<text>: no marker for cases whose id contains it
- MSPROF_STANDIN_EXPORT=deferred: summaries only on `msprof --export=on`
- MSPROF_STANDIN_EXIT=<n>: exit with n after writing everything
Standard library and the project's hand-off reader only: the executable runs under whatever
python3 is on PATH (the tests put their interpreter's first).
"""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
import time
from pathlib import Path

COUNTERS = (
    "aicore_time(us)", "aic_total_cycles", "aic_mac_time(us)", "aic_mac_ratio",
    "aic_scalar_time(us)", "aic_scalar_ratio", "aic_mte1_time(us)", "aic_mte1_ratio",
    "aic_mte2_time(us)", "aic_mte2_ratio", "aic_fixpipe_time(us)", "aic_fixpipe_ratio",
    "aic_icache_miss_rate", "aiv_time(us)", "aiv_total_cycles", "aiv_vec_time(us)",
    "aiv_vec_ratio", "aiv_scalar_time(us)", "aiv_scalar_ratio", "aiv_mte2_time(us)",
    "aiv_mte2_ratio", "aiv_mte3_time(us)", "aiv_mte3_ratio", "aiv_icache_miss_rate",
    "cube_utilization(%)",
)
# The CANN 8.3 op_summary header, as in realdata/op_summary/.
OP_SUMMARY_HEADER = (
    "Device_id", "Model ID", "Task ID", "Stream ID", "Op Name", "OP Type", "OP State",
    "Task Type", "Task Start Time(us)", "Task Duration(us)", "Task Wait Time(us)", "Block Dim",
    "Mix Block Dim", "HF32 Eligible", "Input Shapes", "Input Data Types", "Input Formats",
    "Output Shapes", "Output Data Types", "Output Formats", "Context ID", *COUNTERS,
)
TX_CANN8 = ("Device_id", "pid", "tid", "category", "event_type", "payload_type",
            "payload_value", "Start_time(us)", "End_time(us)", "message_type", "message")
TX_NEW = (*TX_CANN8, "domain", "Device Start_time(us)", "Device End_time(us)")
MESSAGE_LIMIT = 156
PENDING = ".standin_pending.json"


def kernel_duration(case: int, call: int) -> float:
    """Duration (us) of call `call` (warmups first) of the `case`-th case of the hand-off."""
    return round(10.0 * (case + 1) + 0.25 * call, 3)


def counter_value(duration: float, counter: int) -> float:
    return round(duration * (counter + 1) / 100.0, 6)


def _mapping(name: str) -> dict[str, str]:
    text = os.environ.get(name, "")
    return dict(item.split("=", 1) for item in text.split(",") if "=" in item)


def _row_cells(source: Path, file: str, row: int | None) -> dict[str, str]:
    try:
        with open(source / file, encoding="utf-8-sig", newline="") as handle:
            rows = list(csv.DictReader(handle))
        return rows[row - 1] if row else {}
    except (OSError, IndexError):
        return {}


def _cases(handoff: Path) -> tuple[dict, list[dict]]:
    from pytest_npuperf.profiling.handoff import read_handoff  # the format is the product's

    read = read_handoff(handoff)
    return read.session, [r.to_dict() for r in read.results]


def lay_down(handoff: Path, prof: Path) -> dict:
    """Kernel rows and ranges for every measured case of the hand-off."""
    session, results = _cases(handoff)
    ran, extra = _mapping("MSPROF_STANDIN_RAN"), _mapping("MSPROF_STANDIN_EXTRA")
    drop = os.environ.get("MSPROF_STANDIN_DROP", "")
    kernels, ranges = [], []
    task = 0
    for ordinal, result in enumerate(r for r in results if r.get("profile")):
        profile = result["profile"]
        begin, end = profile["range_us"]
        calls = int(profile["calls"])
        cells = _row_cells(Path(session["source"]), result["file"], result.get("row"))
        kind = ran.get(result["kernel_type"], profile["launches"][0])
        per_call = [kind] + ([extra[result["kernel_type"]]] if result["kernel_type"] in extra
                             else [])
        slots = calls * len(per_call)
        for call in range(calls):
            for position, name in enumerate(per_call):
                step = call * len(per_call) + position
                duration = (kernel_duration(ordinal, call) if position == 0 else 1.5)
                start = begin + (end - begin) * (step + 1) / (slots + 1)
                kernels.append((profile["device"], task, name, start, duration, cells))
                task += 1
        if not drop or drop not in result["case_id"]:
            message = result["case_id"].encode()[:MESSAGE_LIMIT].decode(errors="ignore")
            ranges.append((profile["device"], profile["pid"], begin, end, message))
    return {"kernels": kernels, "ranges": ranges}


def _fmt(value: float) -> str:
    return f"{value:.3f}"


def write_summaries(prof: Path, data: dict, stamp: str) -> None:
    output = prof / "mindstudio_profiler_output"
    output.mkdir(parents=True, exist_ok=True)
    with open(output / f"op_summary_{stamp}.csv", "w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle, lineterminator="\n")
        writer.writerow(OP_SUMMARY_HEADER)
        for device, task, name, start, duration, cells in sorted(data["kernels"],
                                                                  key=lambda k: k[3]):
            row = [device, 4294967295, task, 2, f"aclnn{name}_{name}", name, "dynamic",
                   "AI_CORE", f"{_fmt(start)}\t", _fmt(duration), "1.0", 24, 0, "NO",
                   cells.get("Input Shapes", "N/A"), cells.get("Input Data Types", "N/A"),
                   cells.get("Input Formats", "N/A"), cells.get("Output Shapes", "N/A"),
                   cells.get("Output Data Types", "N/A"), cells.get("Output Formats", "N/A"),
                   "N/A"]
            row += [counter_value(duration, c) for c in range(len(COUNTERS))]
            writer.writerow(row)
    form = os.environ.get("MSPROF_STANDIN_TX", "cann8")
    if form == "none":
        return
    header = TX_NEW if form == "new" else TX_CANN8
    with open(output / f"msprof_tx_{stamp}.csv", "w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle, lineterminator="\n")
        writer.writerow(header)
        for device, pid, begin, end, message in data["ranges"]:
            host = "host" if form == "new" else device
            row = [host, pid, pid, "N/A", "start/end", "N/A", "N/A", _fmt(begin), _fmt(end),
                   "N/A", message]
            if form == "new":
                row += ["default", "N/A", "N/A"]
            writer.writerow(row)


def collect(output: Path, app: list[str]) -> int:
    code = subprocess.run(app, check=False).returncode
    stamp = time.strftime("%Y%m%d%H%M%S")
    prof = output / f"PROF_000001_{stamp}000_STANDIN"
    (prof / "device_0" / "data").mkdir(parents=True, exist_ok=True)
    (prof / "host" / "data").mkdir(parents=True, exist_ok=True)
    handoff = os.environ.get("NPUPERF_MSPROF_CHILD")
    data = lay_down(Path(handoff), prof) if handoff and Path(handoff).is_file() else \
        {"kernels": [], "ranges": []}
    if os.environ.get("MSPROF_STANDIN_EXPORT") == "deferred":
        (prof / PENDING).write_text(json.dumps({"stamp": stamp, "data": data}))
    else:
        write_summaries(prof, data, stamp)
    return int(os.environ.get("MSPROF_STANDIN_EXIT", code))


def export(output: Path) -> int:
    for pending in sorted(output.rglob(PENDING)):
        saved = json.loads(pending.read_text())
        write_summaries(pending.parent, saved["data"], saved["stamp"])
        pending.unlink()
    return 0


def main(argv: list[str]) -> int:
    options, app = {}, []
    for i, arg in enumerate(argv):
        if arg.startswith("--") and not app:
            key, _, value = arg[2:].partition("=")
            options[key] = value
        else:
            app = argv[i:]
            break
    output = Path(options.get("output", "."))
    log = output / "standin_calls.jsonl"
    output.mkdir(parents=True, exist_ok=True)
    with open(log, "a", encoding="utf-8") as handle:
        handle.write(json.dumps({"options": options, "app": app}) + "\n")
    if options.get("export") == "on":
        return export(output)
    return collect(output, app)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
