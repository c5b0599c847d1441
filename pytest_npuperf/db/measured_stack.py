"""`measured_stack.json`: which software stacks measured a device copy's rows.

A device copy (a CPU's or a GPU's database of the source's rows, written under --npuperf-out)
keeps the source's version directory name, `vllm<V>_torch<T>_cann<C>`: that name says whose
kernels the rows are (the serving stack that profiled them, whose op_mapping.yaml the copy
carries), and it is what the simulator is given to find the tables of that stack on a device
(docs/format.md §1). A CPU or a GPU has no vLLM-Ascend and no CANN, so its own stack has no
place in that name. The stack that measured the copy is recorded beside the tables instead,
in this file, one entry per stack with the runs that measured with it; every row also names
its own in `MicroBench Stack`. A second stack measuring the same copy is said in the run's
notes: the copy then mixes rows measured with either.
"""

from __future__ import annotations

import json
from pathlib import Path

MEASURED_STACK_FILE = "measured_stack.json"
SCHEMA = "npuperf-measured-stack/1"


def read_measured_stack(directory: Path) -> dict:
    """The record of a copy ({} when there is none, or it cannot be read)."""
    try:
        data = json.loads((Path(directory) / MEASURED_STACK_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) and data.get("schema") == SCHEMA else {}


def updated_measured_stack(existing: dict, *, source: str, version_dir: str, device: str,
                           stacks: list[str], run_id: str, when: str, rows: int
                           ) -> tuple[str, list[str]]:
    """The file's new text after a run that measured `rows` rows with `stacks`, and notes
    (a stack new to a copy that other stacks measured)."""
    entries = [dict(e) for e in existing.get("stacks", []) if isinstance(e, dict)]
    notes = []
    for stack in stacks:
        entry = next((e for e in entries if e.get("stack") == stack), None)
        if entry is None:
            if entries:
                others = "; ".join(str(e.get("stack")) for e in entries)
                notes.append(f"this device's copy was measured with {others} before; this run "
                             f"measured with {stack}: its rows now come from either (each "
                             f"row's MicroBench Stack says which; {MEASURED_STACK_FILE} lists "
                             f"them)")
            entry = {"stack": stack, "first_run": run_id, "first": when, "runs": 0, "rows": 0}
            entries.append(entry)
        entry.update(last_run=run_id, last=when, runs=int(entry.get("runs", 0)) + 1,
                     rows=int(entry.get("rows", 0)) + rows)
    data = {"schema": SCHEMA, "device": device, "version_dir": version_dir,
            "named_after": f"the source database's serving stack ({source}); the stacks "
                           f"below measured the rows",
            "stacks": entries}
    return json.dumps(data, indent=1, sort_keys=True) + "\n", notes
