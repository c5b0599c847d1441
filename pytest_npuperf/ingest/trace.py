"""A profiler trace as operator calls: each call of an operator the database maps, with its
inputs and the device time it took inside the model.

- torch.profiler / kineto traces (CPU, CUDA): `cpu_op` events carry `Input Dims` and `Input
  type` (profiled with `record_shapes=True`); device activities (`kernel`, `gpu_memcpy`,
  `gpu_memset`) name the operator that launched them by its `External id`, else by the
  `correlation` of their runtime call (`cuda_runtime`), found inside an operator by time.
- torch_npu's `trace_view.json`: device tasks are the events of the process named "Ascend
  Hardware"; an `async_npu` flow leads from the host operator that launched each one.

A call's device time is the time of the device activities it launched, its nested operators'
included, less what a nested mapped operator launched (that call is a sample of its own). In a
CPU trace (no device activity at all) a call's time is its own duration, less its nested
mapped calls. What maps to nothing is kept too, per operator name, with its device time: the
share of the model a database does not cover is said, never dropped silently.
"""

from __future__ import annotations

import bisect
from array import array
from collections import Counter, defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from ..db.errors import ContractError
from .chrome_trace import read_events
from .trace_fields import checked_events

KIND_CPU, KIND_CUDA, KIND_NPU = "cpu", "cuda", "npu"
DEVICE_CATEGORIES = ("kernel", "gpu_memcpy", "gpu_memset")
RUNTIME_CATEGORIES = ("cuda_runtime", "cuda_driver")
NPU_DEVICE_PROCESS = "Ascend Hardware"
NPU_FLOW = "async_npu"
NO_OPERATOR = "(launched outside any operator)"
# Two operator calls name the same External id (or correlation, or flow): which one launched
# the activity cannot be told, and giving it to the first would make the second vanish.
UNTOLD = "(launcher not told: an id shared by two operator calls)"
AMBIGUOUS = -2  # a launcher that cannot be told
MAX_EVENTS = 50_000_000  # a bound on what one trace may hold in memory (about 5 GB of events)
_EPS_US = 1e-3


@dataclass(frozen=True)
class TraceDevice:
    kind: str  # cpu, cuda or npu
    name: str = ""  # the device's own name where the trace says it (cuda)


@dataclass
class OpCall:
    name: str
    dims: list
    types: list
    strides: list
    device_us: float
    activities: int  # device activities launched (0 in a CPU trace)


@dataclass
class TraceProfile:
    path: Path
    device: TraceDevice
    calls: list[OpCall] = field(default_factory=list)  # calls of mapped operators
    unmapped: Counter = field(default_factory=Counter)  # operator name -> device time (us)
    total_us: float = 0.0  # the trace's device time (CPU: its top-level operators' time)
    operators: int = 0  # operator events read
    shaped: int = 0  # of which carry input dims
    left_out: Counter = field(default_factory=Counter)  # events with a bad field, by reason

    @property
    def mapped_us(self) -> float:
        return sum(c.device_us for c in self.calls)


def _ts(value) -> float:
    return float(value)  # torch_npu writes timestamps as strings


class _Ops:
    """Every operator event, as columns: a trace may hold tens of millions of them. Only the
    calls of mapped operators keep their inputs."""

    def __init__(self) -> None:
        self.names: list[str] = []  # distinct operator names
        self.name_ids: dict[str, int] = {}
        self.mapped_names: list[bool] = []
        self.name = array("i")
        self.start = array("d")
        self.dur = array("d")
        self.external = array("q")  # -1: none
        self.parent = array("q")  # -1: a top-level operator
        self.inputs: dict[int, tuple] = {}  # mapped calls: (dims, types, strides)

    def add(self, name: str, start: float, dur: float, external: int, inputs: tuple | None,
            is_mapped: Callable[[str], bool]) -> int:
        name_id = self.name_ids.get(name)
        if name_id is None:
            name_id = self.name_ids[name] = len(self.names)
            self.names.append(name)
            self.mapped_names.append(bool(is_mapped(name)))
        index = len(self.name)
        self.name.append(name_id)
        self.start.append(start)
        self.dur.append(dur)
        self.external.append(external)
        self.parent.append(-1)
        if self.mapped_names[name_id] and inputs is not None:
            self.inputs[index] = inputs
        return index

    def __len__(self) -> int:
        return len(self.name)

    def name_of(self, index: int) -> str:
        return self.names[self.name[index]]

    def mapped(self, index: int) -> bool:
        return self.mapped_names[self.name[index]]

    def by_external(self, wanted: set[int]) -> dict[int, int]:
        """External id -> operator, for the ids device activities name (AMBIGUOUS: held by
        two operator calls)."""
        found: dict[int, int] = {}
        for index, external in enumerate(self.external):
            if external in wanted:
                found[external] = index if external not in found else AMBIGUOUS
        return found


class _Thread:
    """The operators of one thread, nested by time."""

    def __init__(self) -> None:
        self.index = array("q")
        self.begin = array("d")

    def nest(self, ops: _Ops) -> None:
        """Sort by start (longer first on ties) and set each operator's parent."""
        start, dur = ops.start, ops.dur
        order = sorted(self.index, key=lambda i: (start[i], -dur[i]))
        self.index = array("q", order)
        self.begin = array("d", (start[i] for i in order))
        stack: list[int] = []
        for op in order:
            end = start[op] + dur[op]
            while stack and start[stack[-1]] + dur[stack[-1]] < end - _EPS_US:
                stack.pop()
            if stack and start[op] < start[stack[-1]] + dur[stack[-1]] + _EPS_US:
                ops.parent[op] = stack[-1]
            stack.append(op)

    def innermost(self, ts: float, ops: _Ops) -> int | None:
        """The innermost operator running at `ts` on this thread."""
        position = bisect.bisect_right(self.begin, ts + _EPS_US) - 1
        candidate = self.index[position] if position >= 0 else -1
        while candidate >= 0:
            if ops.start[candidate] - _EPS_US <= ts <= (ops.start[candidate] + ops.dur[candidate]
                                                        + _EPS_US):
                return candidate
            candidate = ops.parent[candidate]
        return None


def read_trace(path: str | Path, is_mapped: Callable[[str], bool]) -> TraceProfile:
    """Read a trace; `is_mapped(operator name)` says which operators are samples."""
    path = Path(path)
    meta: dict = {}
    ops = _Ops()
    threads: dict[tuple, _Thread] = defaultdict(_Thread)
    places: dict[tuple, int] = {}  # (pid, tid) -> a number, for the runtime columns
    activity = {"ts": array("d"), "dur": array("d"), "external": array("q"),
                "correlation": array("q")}
    runtime = {"correlation": array("q"), "place": array("q"), "ts": array("d")}
    untyped: list[tuple] = []  # X events without a category (torch_npu's device tasks)
    process_names: dict = {}
    flow_start: dict = {}
    flow_end: dict[tuple, object] = {}
    profile = TraceProfile(path, TraceDevice(KIND_CPU))
    for count, event in enumerate(checked_events(read_events(path, meta), profile.left_out)):
        if count >= MAX_EVENTS:
            raise ContractError(f"{path}: more than {MAX_EVENTS:,} events: profile fewer steps "
                                f"(a schedule with active=1)")
        phase = event["ph"]
        category = event.get("cat")
        if phase == "X":
            args = event.get("args") or {}
            if category == "cpu_op":
                dims = args.get("Input Dims")
                profile.operators += 1
                profile.shaped += dims is not None
                place = (event.get("pid"), event.get("tid"))
                external = args.get("External id")
                index = ops.add(str(event.get("name", "")), _ts(event["ts"]),
                                float(event.get("dur", 0.0)),
                                -1 if external is None else int(external),
                                None if dims is None else (dims, args.get("Input type"),
                                                           args.get("Input Strides")),
                                is_mapped)
                threads[place].index.append(index)
            elif category in DEVICE_CATEGORIES:
                external, correlation = args.get("External id"), args.get("correlation")
                activity["ts"].append(_ts(event["ts"]))
                activity["dur"].append(float(event.get("dur", 0.0)))
                activity["external"].append(-1 if external is None else int(external))
                activity["correlation"].append(-1 if correlation is None else int(correlation))
            elif category in RUNTIME_CATEGORIES:
                correlation = args.get("correlation")
                if correlation is not None:
                    place = (event.get("pid"), event.get("tid"))
                    runtime["correlation"].append(int(correlation))
                    runtime["place"].append(places.setdefault(place, len(places)))
                    runtime["ts"].append(_ts(event["ts"]))
            elif category is None:
                untyped.append((event.get("pid"), event.get("tid"), _ts(event["ts"]),
                                float(event.get("dur", 0.0))))
        elif phase == "M" and event.get("name") == "process_name":
            process_names[event.get("pid")] = str((event.get("args") or {}).get("name", ""))
        elif phase in ("s", "f") and category == NPU_FLOW:
            place = (event.get("pid"), event.get("tid"))
            if phase == "s":  # a flow id started at two places tells no launcher
                begun = (place, _ts(event["ts"]))
                if flow_start.setdefault(event.get("id"), begun) != begun:
                    flow_start[event.get("id")] = AMBIGUOUS
            else:
                flow_end[(*place, _ts(event["ts"]))] = event.get("id")
    if not len(ops):
        raise ContractError(f"{path}: no operator events (cpu_op): not a torch.profiler or "
                            f"torch_npu trace")
    if not profile.shaped:
        raise ContractError(f"{path}: none of its {profile.operators:,} operators carries input "
                            f"shapes: profile with record_shapes=True")
    for thread in threads.values():
        thread.nest(ops)
    devices = [p for p, name in process_names.items() if name == NPU_DEVICE_PROCESS]
    launched: list[tuple[int | None, float]] = []  # (operator, device time) per activity
    if devices:
        profile.device = TraceDevice(KIND_NPU)
        for pid, tid, ts, dur in untyped:
            if pid not in devices:
                continue  # host API calls, overlap analysis: not device time
            launcher = None
            flow = flow_end.get((pid, tid, ts))
            if flow_start.get(flow) == AMBIGUOUS:
                launcher = AMBIGUOUS
            elif flow is not None and flow in flow_start:
                place, start = flow_start[flow]
                launcher = threads[place].innermost(start, ops) if place in threads else None
            launched.append((launcher, dur))
    elif len(activity["ts"]):
        properties = meta.get("deviceProperties") or []
        name = str(properties[0].get("name", "")) if properties and isinstance(
            properties[0], dict) else ""
        profile.device = TraceDevice(KIND_CUDA, name)
        launched = _launchers(activity, runtime, places, threads, ops)
    if launched:
        _device_calls(profile, ops, launched)
    else:
        _cpu_calls(profile, ops)
    return profile


def _launchers(activity: dict, runtime: dict, places: dict, threads: dict, ops: _Ops
               ) -> list[tuple[int | None, float]]:
    """Each device activity's operator: by its External id, else by the runtime call that
    shares its correlation, found inside an operator by time."""
    by_external = ops.by_external({e for e in activity["external"] if e >= 0})
    orphans = {c for e, c in zip(activity["external"], activity["correlation"])
               if by_external.get(e, AMBIGUOUS) == AMBIGUOUS and c >= 0}
    thread_of = {number: threads.get(place) for place, number in places.items()}
    calls: dict[int, int | None] = {}  # correlation -> the operator its runtime call ran in
    for correlation, place, ts in zip(runtime["correlation"], runtime["place"], runtime["ts"]):
        if correlation in orphans:
            thread = thread_of.get(place)
            inside = thread.innermost(ts, ops) if thread is not None else None
            if calls.setdefault(correlation, inside) != inside:  # launches in two operators
                calls[correlation] = AMBIGUOUS
    launched = []
    for dur, external, correlation in zip(activity["dur"], activity["external"],
                                          activity["correlation"]):
        launcher = by_external.get(external)
        if launcher is None or launcher == AMBIGUOUS:
            launcher = calls.get(correlation, launcher)
        launched.append((launcher, dur))
    return launched


def _mapped_ancestor(ops: _Ops, index: int | None) -> int | None:
    while index is not None and index >= 0 and not ops.mapped(index):
        index = ops.parent[index]
    return index if index is not None and index >= 0 else None


def _call(ops: _Ops, index: int, device_us: float, activities: int) -> OpCall:
    dims, types, strides = ops.inputs[index]
    return OpCall(ops.name_of(index), dims or [], types or [], strides or [], device_us,
                  activities)


def _device_calls(profile: TraceProfile, ops: _Ops, launched: list) -> None:
    time: dict[int, float] = defaultdict(float)
    count: Counter = Counter()
    for launcher, dur in launched:
        profile.total_us += dur
        if launcher == AMBIGUOUS:
            profile.unmapped[UNTOLD] += dur
            continue
        owner = _mapped_ancestor(ops, launcher)
        if owner is None:
            profile.unmapped[ops.name_of(launcher) if launcher is not None else NO_OPERATOR] += dur
            continue
        time[owner] += dur
        count[owner] += 1
    for owner in sorted(time):
        if owner in ops.inputs:
            profile.calls.append(_call(ops, owner, time[owner], count[owner]))
        else:
            profile.unmapped[f"{ops.name_of(owner)} (no shapes)"] += time[owner]


def _cpu_calls(profile: TraceProfile, ops: _Ops) -> None:
    """CPU: an operator's time is its duration; nested mapped calls are samples of their own,
    and unmapped time is each operator's own time outside any mapped call."""
    children: dict[int, list[int]] = defaultdict(list)
    for index, parent in enumerate(ops.parent):
        if parent >= 0:
            children[parent].append(index)
        else:
            profile.total_us += ops.dur[index]
    for index in range(len(ops)):
        if ops.mapped(index):
            nested = sum(ops.dur[c] for c in _mapped_below(ops, children, index))
            own = max(ops.dur[index] - nested, 0.0)
            if index in ops.inputs:
                profile.calls.append(_call(ops, index, own, 0))
            else:
                profile.unmapped[f"{ops.name_of(index)} (no shapes)"] += own
        elif _mapped_ancestor(ops, ops.parent[index]) is None:
            self_time = ops.dur[index] - sum(ops.dur[c] for c in children[index])
            profile.unmapped[ops.name_of(index)] += max(self_time, 0.0)


def _mapped_below(ops: _Ops, children: dict[int, list[int]], index: int) -> list[int]:
    """The outermost mapped operators nested in `index`."""
    found, todo = [], list(children[index])
    while todo:
        child = todo.pop()
        if ops.mapped(child):
            found.append(child)
        else:
            todo.extend(children[child])
    return found
