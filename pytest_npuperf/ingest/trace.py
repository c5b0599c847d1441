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

Composite calls (kernels/module_kinds.py): a range `npuperf:<kind>:...` that `npuperf profile`
recorded around a module or function of a known kind, or an operator of a kind (attention),
is one call of the kind's kernel type with all the time inside it: operators nested in it are
its parts, not rows of their own (the `+ eps` of an RMS norm is not an `Add`), except those
the kind keeps (a gated MLP's GEMMs). In what no range covers, the decompositions eager
PyTorch runs for the kinds are found by their sequence (trace_patterns.py). Steps: where the
workload marked them (ranges `npuperf.step#N`), only what ran inside a step counts; the rest
is told apart as outside the steps. Unmapped time is listed per operator with its input
shapes, or as the composite call it is part of when that call could not become a row.
"""

from __future__ import annotations

import ast
import bisect
import functools
from array import array
from collections import Counter, defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from itertools import chain
from pathlib import Path

from ..db.errors import ContractError
from ..kernels.module_kinds import STEP_RANGE, ModuleKind, ModuleKinds, parse_range
from .chrome_trace import read_events
from .trace_fields import checked_events, shown
from .trace_patterns import PART_OPERATORS, find_groups

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
RANGE_CATEGORY = "user_annotation"
PATTERN_LABEL = "eager decomposition"
# Operators that fill tensors with random values: the weight initialisation of a model built
# in the profiled script (what an unmarked script's trace holds besides its steps).
INIT_OPERATORS = frozenset({"aten::normal_", "aten::uniform_", "aten::random_",
                            "aten::bernoulli_", "aten::exponential_", "aten::randn",
                            "aten::rand", "aten::randint", "aten::randperm",
                            "aten::kaiming_uniform_", "aten::trunc_normal_", "aten::erfinv_"})
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
    kind: ModuleKind | None = None  # a composite call: its kind (None: an operator's call)
    label: str = ""  # the composite's module, function or operator
    recorded: list = field(default_factory=list)  # the tensors its range recorded
    parts: list = field(default_factory=list)  # (name, dims, types, strides, concrete)


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
    meta: dict = field(default_factory=dict)  # the trace's top-level values (npuperf's too)
    steps: int = 0  # steps the workload marked (0: none; the whole trace counts)
    outside_steps_us: float = 0.0  # time outside the marked steps (left out of total_us)
    init_us: float = 0.0  # of total_us: random fills (weight initialisation)
    ranges: int = 0  # composite ranges recorded by npuperf
    patterns: int = 0  # composite calls found by their eager decomposition

    @property
    def mapped_us(self) -> float:
        return sum(c.device_us for c in self.calls)

    def unmapped_operators(self) -> Counter:
        """Unmapped time per operator name, whatever its shapes."""
        found: Counter = Counter()
        for label, us in self.unmapped.items():
            found[label.split(" (", 1)[0]] += us
        return found


def _ts(value) -> float:
    return float(value)  # torch_npu writes timestamps as strings


class _Ops:
    """Every operator event (and npuperf's ranges), as columns: a trace may hold tens of
    millions of them. Only calls that may become rows, or parts of one, keep their inputs."""

    def __init__(self, kinds: ModuleKinds | None = None) -> None:
        self.kinds = kinds
        self.names: list[str] = []  # distinct operator names
        self.name_ids: dict[str, int] = {}
        self.mapped_names: list[bool] = []  # a call of its own (operator, kind, kind range)
        self.kind_names: list[ModuleKind | None] = []  # the kind a name is a call of
        self.range_names: list[bool] = []
        self.step_names: list[bool] = []
        self.kept_names: list[bool] = []  # inputs kept (mapped, kinds, pattern parts)
        self.name = array("i")
        self.start = array("d")
        self.dur = array("d")
        self.external = array("q")  # -1: none
        self.parent = array("q")  # -1: a top-level operator
        self.shape = array("i")  # the operator's input shapes as text (an index of `shapes`)
        self.shapes: list[str] = []
        self.shape_ids: dict[str, int] = {}
        self.inputs: dict[int, tuple] = {}  # (dims, types, strides, concrete)
        self.recorded: dict[int, tuple[str, list]] = {}  # kind ranges: (label, tensors)

    def _classify(self, name: str, is_range: bool, is_mapped: Callable[[str], bool]) -> int:
        name_id = self.name_ids[name] = len(self.names)
        self.names.append(name)
        kind = None
        step = is_range and name.startswith(STEP_RANGE)
        if is_range and not step and self.kinds is not None:
            parsed = parse_range(name)
            kind = self.kinds.get(parsed[0]) if parsed else None
        elif not is_range and self.kinds is not None:
            kind = self.kinds.of_operator(name)
        mapped = kind is not None or (not is_range and bool(is_mapped(name)))
        self.mapped_names.append(mapped)
        self.kind_names.append(kind)
        self.range_names.append(is_range)
        self.step_names.append(step)
        self.kept_names.append(mapped or name in PART_OPERATORS)
        return name_id

    def add(self, name: str, start: float, dur: float, external: int, inputs: tuple | None,
            is_mapped: Callable[[str], bool], is_range: bool = False) -> int:
        name_id = self.name_ids.get(name)
        if name_id is None:
            name_id = self._classify(name, is_range, is_mapped)
        index = len(self.name)
        self.name.append(name_id)
        self.start.append(start)
        self.dur.append(dur)
        self.external.append(external)
        self.parent.append(-1)
        self.shape.append(self._shape_id(inputs[0] if inputs is not None else None))
        if self.kept_names[name_id] and inputs is not None:
            self.inputs[index] = inputs
        if is_range and self.kind_names[name_id] is not None:
            parsed = parse_range(name)
            if parsed is not None:
                self.recorded[index] = (parsed[1], parsed[2])
        return index

    def _shape_id(self, dims) -> int:
        """The input dims as an index of `shapes` (their repr: made in C, read back only for
        the operators the unmapped list names)."""
        text = repr(dims) if dims else ""
        found = self.shape_ids.get(text)
        if found is None:
            found = self.shape_ids[text] = len(self.shapes)
            self.shapes.append(text)
        return found

    def __len__(self) -> int:
        return len(self.name)

    def name_of(self, index: int) -> str:
        return self.names[self.name[index]]

    def mapped(self, index: int) -> bool:
        return self.mapped_names[self.name[index]]

    def kind(self, index: int) -> ModuleKind | None:
        return self.kind_names[self.name[index]]

    def is_range(self, index: int) -> bool:
        return self.range_names[self.name[index]]

    def is_step(self, index: int) -> bool:
        return self.step_names[self.name[index]]

    def labelled(self, index: int) -> str:
        """An operator with its input shapes, as the unmapped list names it."""
        shapes = _shape_text(self.shapes[self.shape[index]])
        name = shown(self.name_of(index))  # a trace's names may hold escapes, megabytes
        return f"{name} ({shapes})" if shapes else name

    def by_external(self, wanted: set[int]) -> dict[int, int]:
        """External id -> operator, for the ids device activities name (AMBIGUOUS: held by
        two operator calls)."""
        found: dict[int, int] = {}
        for index, external in enumerate(self.external):
            if external in wanted:
                found[external] = index if external not in found else AMBIGUOUS
        return found


@functools.lru_cache(maxsize=4096)
def _shape_text(text: str) -> str:
    """`[[1, 16, 64], [], [64]]` -> `1x16x64, 64`: the tensors' dims."""
    if not text:
        return ""
    try:
        dims = ast.literal_eval(text)
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        return ""
    if not isinstance(dims, list):
        return ""
    return ", ".join("x".join(str(v) for v in d) for d in dims
                     if isinstance(d, list) and d and all(isinstance(v, int) for v in d))


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


def read_trace(path: str | Path, is_mapped: Callable[[str], bool],
               kinds: ModuleKinds | None = None) -> TraceProfile:
    """Read a trace; `is_mapped(operator name)` says which operators are samples, `kinds`
    which ranges, operators and decompositions are composite calls (None: none are)."""
    path = Path(path)
    meta: dict = {}
    ops = _Ops(kinds)
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
                                                           args.get("Input Strides"),
                                                           args.get("Concrete Inputs")),
                                is_mapped)
                threads[place].index.append(index)
            elif category == RANGE_CATEGORY and str(event.get("name", "")).startswith("npuperf"):
                place = (event.get("pid"), event.get("tid"))
                index = ops.add(str(event["name"]), _ts(event["ts"]), float(event.get("dur", 0.0)),
                                -1, None, is_mapped, is_range=True)
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
    profile.meta = meta
    if not profile.operators:
        raise ContractError(f"{path}: no operator events (cpu_op): not a torch.profiler or "
                            f"torch_npu trace")
    if not profile.shaped:
        raise ContractError(f"{path}: none of its {profile.operators:,} operators carries input "
                            f"shapes: profile with record_shapes=True")
    for thread in threads.values():
        thread.nest(ops)
    calls = _Ownership(ops, threads)
    profile.steps = calls.steps
    profile.ranges = len(ops.recorded)
    profile.patterns = len(calls.groups)
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
        calls.device_time(profile, launched)
    else:
        calls.cpu_time(profile)
    calls.emit(profile)
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


@dataclass
class _Group:
    """A composite call found by its eager decomposition."""

    kind: ModuleKind
    members: list[int]


class _Ownership:
    """Which call each operator's time belongs to: the innermost call around it (an operator
    that maps, a composite range or operator, a decomposition found by its sequence), where a
    composite absorbs what it ran except what its kind keeps."""

    def __init__(self, ops: _Ops, threads: dict[tuple, _Thread]) -> None:
        self.ops = ops
        # Every operator, each thread's in start order (a parent before its children).
        self.order = array("q", chain.from_iterable(t.index for t in threads.values()))
        n = len(ops)
        self.base = n  # group g is the node n + g
        self.in_step = array("b", bytes(n))
        self.init = array("b", bytes(n))
        self.steps = 0
        for op in self.order:
            parent = ops.parent[op]
            step = ops.is_step(op)
            self.steps += step
            self.in_step[op] = step or (parent >= 0 and self.in_step[parent])
            self.init[op] = ops.name_of(op) in INIT_OPERATORS or (parent >= 0
                                                                 and self.init[parent])
        self.groups: list[_Group] = []
        self.owner = self._resolve({})
        if ops.kinds is not None:
            group_of = self._find_groups(threads)
            if group_of:
                self.owner = self._resolve(group_of)
        self.time: dict[int, float] = defaultdict(float)
        self.count: Counter = Counter()

    def kind_of(self, node: int) -> ModuleKind | None:
        return self.groups[node - self.base].kind if node >= self.base else self.ops.kind(node)

    def _resolve(self, group_of: dict[int, int]) -> array:
        ops = self.ops
        owner = array("q", [-1]) * len(ops)
        for op in self.order:
            parent = ops.parent[op]
            up = owner[parent] if parent >= 0 else -1
            if op in group_of:
                owner[op] = group_of[op]
                continue
            call = ops.mapped(op)
            kind = self.kind_of(up) if up >= 0 else None
            if kind is not None:
                if ops.name_of(op) in kind.keeps:
                    owner[op] = op if call else -1
                else:
                    owner[op] = up
                continue
            owner[op] = op if call else up
        return owner

    def _find_groups(self, threads: dict[tuple, _Thread]) -> dict[int, int]:
        """Decompositions among the operators no call owns, sibling by sibling."""
        ops, owner = self.ops, self.owner
        siblings: dict[int, list[int]] = defaultdict(list)
        for op in self.order:
            parent = ops.parent[op]
            if ops.is_range(op) or (parent >= 0 and not ops.is_range(parent)):
                continue
            if owner[op] == -1 or (owner[op] == op and ops.kind(op) is None):
                siblings[parent].append(op)
        group_of: dict[int, int] = {}
        for members in siblings.values():
            names = [ops.name_of(i) for i in members]

            def dims(position: int, members=members) -> list:
                found = ops.inputs.get(members[position])
                return found[0] or [] if found else []
            for kind_name, positions in find_groups(names, dims):
                kind = ops.kinds.get(kind_name) if ops.kinds is not None else None
                if kind is None:
                    continue
                node = self.base + len(self.groups)
                self.groups.append(_Group(kind, [members[p] for p in positions]))
                group_of.update({members[p]: node for p in positions})
        return group_of

    def _account(self, profile: TraceProfile, op: int | None, us: float, activity: bool
                 ) -> None:
        if op == AMBIGUOUS:
            profile.total_us += us
            profile.unmapped[UNTOLD] += us
            return
        if op is not None and self.steps and not self.in_step[op]:
            profile.outside_steps_us += us
            return
        profile.total_us += us
        if op is None:
            profile.unmapped[NO_OPERATOR] += us
            return
        if self.init[op]:
            profile.init_us += us
        node = self.owner[op]
        if node < 0:
            profile.unmapped[self.ops.labelled(op)] += us
            return
        self.time[node] += us
        self.count[node] += activity

    def device_time(self, profile: TraceProfile, launched: list) -> None:
        for launcher, dur in launched:
            self._account(profile, launcher, dur, True)

    def cpu_time(self, profile: TraceProfile) -> None:
        """CPU: each operator's own time (its duration less its children's) goes to its
        call; ranges hold no time of their own (what runs between operators is Python)."""
        ops = self.ops
        nested = array("d", bytes(8 * len(ops)))
        for index, parent in enumerate(ops.parent):
            if parent >= 0:
                nested[parent] += ops.dur[index]
        for index in range(len(ops)):
            if not ops.is_range(index):
                self._account(profile, index, max(ops.dur[index] - nested[index], 0.0), False)

    def emit(self, profile: TraceProfile) -> None:
        ops = self.ops
        parts: dict[int, list[int]] = defaultdict(list)
        for op in self.order:
            node = self.owner[op]
            parent = ops.parent[op]
            if node >= 0 and (node >= self.base or ops.kind(node) is not None) and \
                    not ops.is_range(op) and (parent < 0 or parent == node
                                              or self.owner[parent] != node):
                parts[node].append(op)
        for node in sorted(self.time):
            us, activities = self.time[node], self.count[node]
            kind = self.kind_of(node)
            if kind is None:
                if node in ops.inputs:
                    dims, types, strides, _ = ops.inputs[node]
                    profile.calls.append(OpCall(ops.name_of(node), dims or [], types or [],
                                                strides or [], us, activities))
                else:
                    profile.unmapped[f"{shown(ops.name_of(node))} (no shapes)"] += us
                continue
            if node >= self.base:
                label = PATTERN_LABEL
                recorded: list = []
            elif node in ops.recorded:
                label, recorded = ops.recorded[node]
            else:
                label, recorded = ops.name_of(node), []
            profile.calls.append(OpCall(kind.kernel_type, [], [], [], us, activities, kind,
                                        label, recorded, [self._part(i) for i in parts[node]]))

    def _part(self, op: int) -> tuple:
        found = self.ops.inputs.get(op)
        if found is None:
            return self.ops.name_of(op), [], [], [], []
        dims, types, strides, concrete = found
        return self.ops.name_of(op), dims or [], types or [], strides or [], concrete or []
