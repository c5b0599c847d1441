"""Which profiled kernel launches belong to which case.

With markers: every case's measured calls ran inside one mstx range whose text is the case id
(cut to msprof's 156 bytes). A range is matched to its case by (pid, text), in run order when
several cases share a cut text. A kernel belongs to the case whose range contains its start
time: msprof puts marker and kernel times on one clock (see ingest/msprof_tx.py), device-side
range times when the range was opened on a stream, host times otherwise. Host times are safe
because the runner synchronises the device before a range opens and before it closes (the
case's kernels start after the host opened the range and before it closed it) — the
remaining error is msprof's host/device clock conversion, microseconds against ranges that
last milliseconds.

Cross-checks against what the harness knows (the hand-off): inside its range a case must have
exactly `calls` (warmup + timed) kernels of the types its spec launches (`KernelEntry.launches`);
the first `warmup` of them (by start time) are dropped, the rest are its samples. Other kernels
inside the range (casts, format conversions, an L2 flush) are counted per case and reported,
never added. A case without a range, without a kernel of its types, with another count, with
several of its types at once, or whose range overlaps another case's on the same device gets
the reason instead of samples.

Without markers (older CANN, or markers not exported): order and kernel type, checked by the
row's signature — per device, cases in run order take the next `calls` kernels of their types
whose shapes give the row's signature.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from typing import NamedTuple

import numpy as np

from ..db.errors import CellError
from ..db.signature import short_hash, signature, signature_text
from ..devices.mstx import MSTX_MESSAGE_LIMIT
from ..ingest.msprof_tx import MarkerTable
from ..ingest.op_summary import KernelTable


class CaseSpec(NamedTuple):  # immutable, and built twice as fast as a frozen dataclass
    """What attribution needs to know about one case."""

    message: str  # its marker text (already cut as the marker was)
    launches: tuple[str, ...]  # device kernel types one call launches
    calls: int | None = None  # kernels of those types inside its range; None: unknown
    warmup: int = 0  # how many of them were warmup calls
    pid: int = -1
    device: int = -1
    signature: str = ""  # short hash of its row's signature (order matching)


@dataclass
class CaseAttribution:
    problem: str = ""  # why the case got no samples ("" when it did)
    measured_type: str = ""  # the kernel type the device ran for it
    extra: dict[str, int] = field(default_factory=dict)  # other kernels inside its range
    kernels: int = 0  # kernels of its own types found for it


@dataclass
class Attribution:
    cases: list[CaseAttribution]
    sample_case: np.ndarray  # per sample: the case index
    sample_kernel: np.ndarray  # per sample: the kernel index in the KernelTable
    by_markers: bool
    notes: list[str] = field(default_factory=list)


# -- markers -> cases -----------------------------------------------------------------------

def match_markers(markers: MarkerTable, specs: list[CaseSpec]) -> np.ndarray:
    """Per case, the index of its marker (-1 when none): same pid and text, in start order
    among markers and run order among cases sharing a text. A marker text msprof stored one
    byte shorter than the cut (a terminating NUL) still matches by prefix."""
    found = np.full(len(specs), -1, np.int64)
    waiting: dict[tuple[int, str], list[int]] = defaultdict(list)
    for index, spec in enumerate(specs):
        waiting[(spec.pid, spec.message)].append(index)
    order = np.argsort(markers.start, kind="stable")
    unmatched = []
    pids, messages = markers.pid.tolist(), markers.message
    for m in order.tolist():
        key = (pids[m], messages[m])
        queue = waiting.get(key) or waiting.get((-1, messages[m]))
        if queue:
            found[queue.pop(0)] = m
        else:
            unmatched.append(m)
    long_specs = [i for i, s in enumerate(specs)
                  if found[i] < 0 and len(s.message.encode()) >= MSTX_MESSAGE_LIMIT - 1]
    for m in unmatched:
        text = markers.message[m]
        if len(text.encode()) < MSTX_MESSAGE_LIMIT - 1:
            continue
        hit = next((i for i in long_specs if specs[i].message.startswith(text)
                    and specs[i].pid in (-1, int(markers.pid[m]))), None)
        if hit is not None:
            found[hit] = m
            long_specs.remove(hit)
    return found


_UNKNOWN = object()


def _pairs(first: np.ndarray, second: np.ndarray) -> set[tuple[int, int]]:
    """The distinct (first[i], second[i]) of two int32 arrays (10^6 kernels: no tuple each)."""
    if not len(first):
        return set()
    if (first == first[0]).all() and (second == second[0]).all():  # one run, one device
        return {(int(first[0]), int(second[0]))}
    codes = np.unique(first.astype(np.int64) * 2**32 + (second.astype(np.int64) + 2**31))
    return set(zip((codes >> 32).tolist(), ((codes & 0xFFFFFFFF) - 2**31).tolist()))


def _kernel_keys(kernels: KernelTable) -> np.ndarray:
    """A stream key per kernel: its device, or -(source + 2) when no device is known."""
    return np.where(kernels.device >= 0, kernels.device, -(kernels.source.astype(np.int64) + 2))


def _marker_key(source: int, marker_device: int, spec_device: int,
                devices_of_source: dict[int, set[int]]) -> int | None:
    """The stream key of a case's range: its marker's source and device (the case's own
    device where the marker names none)."""
    device = marker_device if marker_device >= 0 else spec_device
    devices = devices_of_source.get(source)
    if devices is None:  # this run directory holds no kernels: use the device alone
        return device if device >= 0 else None
    if devices == {-1}:
        return -(source + 2)
    if device >= 0:
        return device
    known = devices - {-1}
    return next(iter(known)) if len(known) == 1 else None


def attribute_by_markers(kernels: KernelTable, markers: MarkerTable, specs: list[CaseSpec],
                         marker_of: np.ndarray | None = None) -> Attribution:
    if marker_of is None:
        marker_of = match_markers(markers, specs)
    cases = [CaseAttribution() for _ in specs]
    kernel_key = _kernel_keys(kernels)
    devices_of_source: dict[int, set[int]] = {}
    for source, device in _pairs(kernels.source, kernels.device):
        devices_of_source.setdefault(source, set()).add(device)
    by_key: dict[int, list[int]] = defaultdict(list)
    marker_source, marker_device = markers.source.tolist(), markers.device.tolist()
    keys: dict = {}  # (source, marker device, case device) -> key: a few distinct ones
    for index, (marker, spec) in enumerate(zip(marker_of.tolist(), specs)):
        if marker < 0:
            cases[index].problem = "no mstx marker for this case in the profile"
            continue
        where = (marker_source[marker], marker_device[marker], spec.device)
        key = keys.get(where, _UNKNOWN)
        if key is _UNKNOWN:
            key = keys[where] = _marker_key(*where, devices_of_source)
        if key is None:
            cases[index].problem = ("its marker has no device and the profile holds several: "
                                    "which device ran it cannot be told")
            continue
        by_key[key].append(index)
    kernel_case = np.full(len(kernels), -1, np.int64)
    for key, members in by_key.items():
        _assign(kernel_key, kernels.start, markers, marker_of, members, key, kernel_case, cases)
    inside = kernel_case >= 0
    outside = int((~inside).sum())
    notes = []
    if outside and len(kernels):
        notes.append(f"{outside:,} of {len(kernels):,} kernel launch(es) fell outside every "
                     f"case's marker (input building, verification, other processes)")
    return _collect(kernels, specs, cases, kernel_case, by_markers=True, notes=notes)


def _assign(kernel_key: np.ndarray, start: np.ndarray, markers: MarkerTable,
            marker_of: np.ndarray, members: list[int], key: int, kernel_case: np.ndarray,
            cases: list[CaseAttribution]) -> None:
    """Kernels of one device to the case whose range holds their start; overlapping ranges
    make both cases unattributable (their kernels cannot be told apart)."""
    rows = np.array([marker_of[i] for i in members], np.int64)
    order = np.argsort(markers.start[rows], kind="stable")
    members_sorted = np.asarray(members, np.int64)[order]
    begin, end = markers.start[rows][order], markers.end[rows][order]
    running = np.maximum.accumulate(end)
    holder = np.zeros(len(end), np.int64)  # position of the range holding `running`
    for i in range(1, len(end)):
        holder[i] = i if end[i] >= running[i - 1] else holder[i - 1]
    overlapping = np.zeros(len(end), bool)
    clash = np.flatnonzero(begin[1:] < running[:-1]) + 1
    overlapping[clash] = True
    overlapping[holder[clash - 1]] = True
    for position in np.flatnonzero(overlapping).tolist():
        cases[int(members_sorted[position])].problem = (
            "its marker overlaps another case's marker on the same device (cases measured at "
            "once on one device cannot be told apart)")
    mine = np.flatnonzero(kernel_key == key)
    slot = np.searchsorted(begin, start[mine], side="right") - 1
    hit = slot >= 0
    hit[hit] &= start[mine][hit] <= end[slot[hit]]
    hit[hit] &= ~overlapping[slot[hit]]
    kernel_case[mine[hit]] = members_sorted[slot[hit]]


def lexsort_pairs(minor: np.ndarray, major: np.ndarray) -> np.ndarray | None:
    """`np.lexsort((minor, major))`, or None where that is the order the arrays are in
    already (kernels in launch order, cases one after another: sorting 10^6 of them
    found nothing to move)."""
    if len(major) > 1:
        step = np.diff(major)
        if not ((step > 0) | ((step == 0) & (np.diff(minor) >= 0))).all():
            return np.lexsort((minor, major))
    return None


def _counted(codes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """`np.unique(codes, return_counts=True)`; sorted codes (the usual case) are counted
    by their runs, without sorting them again."""
    if len(codes) > 1 and not (codes[1:] >= codes[:-1]).all():
        return np.unique(codes, return_counts=True)
    starts = np.flatnonzero(np.concatenate(([True], codes[1:] != codes[:-1]))) if len(codes) \
        else np.empty(0, np.intp)
    return codes[starts], np.diff(np.append(starts, len(codes)))


def _launch_table(specs: list[CaseSpec], types: list[str]) -> tuple[np.ndarray, np.ndarray]:
    """(per case: its launch-set id, per launch set and kernel type: whether it is expected)."""
    index = {name: i for i, name in enumerate(types)}
    sets: dict[tuple[str, ...], int] = {}
    case_set = np.empty(len(specs), np.int64)
    for i, spec in enumerate(specs):
        case_set[i] = sets.setdefault(spec.launches, len(sets))
    table = np.zeros((max(len(sets), 1), max(len(types), 1)), bool)
    for launches, set_id in sets.items():
        for name in launches:
            if name in index:
                table[set_id, index[name]] = True
    return case_set, table


def _collect(kernels: KernelTable, specs: list[CaseSpec], cases: list[CaseAttribution],
             kernel_case: np.ndarray, *, by_markers: bool, notes: list[str],
             taken: np.ndarray | None = None) -> Attribution:
    """From kernel -> case: extras per case, the expected kernels checked against the calls,
    the samples (expected kernels after the warmups)."""
    n_types = max(len(kernels.types), 1)
    case_set, table = _launch_table(specs, kernels.types)
    assigned = np.flatnonzero(kernel_case >= 0)
    owner = kernel_case[assigned]
    type_code = kernels.type_code[assigned].astype(np.int64)
    expected = table[case_set[owner], type_code] if taken is None else taken[assigned]
    extra_codes, extra_counts = np.unique(owner[~expected] * n_types + type_code[~expected],
                                          return_counts=True)
    for code, count in zip(extra_codes.tolist(), extra_counts.tolist()):
        cases[code // n_types].extra[kernels.types[code % n_types]] = count
    exp_kernel = assigned[expected]
    exp_case = owner[expected]
    order = lexsort_pairs(kernels.start[exp_kernel], exp_case)
    if order is not None:
        exp_kernel, exp_case = exp_kernel[order], exp_case[order]
    count = np.bincount(exp_case, minlength=len(specs))
    first = np.concatenate(([0], np.cumsum(count)[:-1]))
    rank = np.arange(len(exp_case)) - first[exp_case]
    # Per case, the kernel types of its own that ran: one for every case but a broken one.
    type_codes, type_counts = _counted(exp_case * n_types + kernels.type_code[exp_kernel])
    kinds = np.bincount(type_codes // n_types, minlength=len(specs)).tolist()
    ran_type = np.zeros(len(specs), np.int64)
    ran_type[type_codes // n_types] = type_codes % n_types  # the type of a one-type case
    several: dict[int, dict[str, int]] = defaultdict(dict)
    for code, n in zip(type_codes.tolist(), type_counts.tolist()):
        if kinds[code // n_types] > 1:
            several[code // n_types][kernels.types[code % n_types]] = n
    ran_types = ran_type.tolist()
    usable = np.zeros(len(specs), bool)
    warmup = np.array([s.warmup for s in specs], np.int64) if specs else np.empty(0, np.int64)
    counts = count.tolist()
    for index, (spec, case) in enumerate(zip(specs, cases)):
        case.kernels = counts[index]
        if case.problem:
            continue
        if not kinds[index]:
            names = " or ".join(spec.launches)
            others = ", ".join(f"{k} x{v}" for k, v in sorted(case.extra.items()))
            where = "inside its marker" if by_markers else "with its shapes after the previous case"
            case.problem = f"no {names} kernel {where}" + (f" (saw {others})" if others else "")
            continue
        if kinds[index] > 1:
            case.problem = ("several of its kernel types ran: "
                            + ", ".join(f"{k} x{v}" for k, v in sorted(several[index].items())))
            continue
        case.measured_type = kernels.types[ran_types[index]]
        if spec.calls is not None and counts[index] != spec.calls:
            case.problem = (f"count mismatch: {counts[index]} {case.measured_type} kernel(s) "
                            f"{'inside its marker' if by_markers else 'matched'}, {spec.calls} "
                            f"call(s) made ({spec.warmup} warmup + {spec.calls - spec.warmup} "
                            f"timed)")
            continue
        usable[index] = True
    keep = usable[exp_case] & (rank >= warmup[exp_case])
    return Attribution(cases, exp_case[keep], exp_kernel[keep], by_markers, notes)


# -- without markers: order, type and signature -----------------------------------------------

def kernel_signature_hashes(kernels: KernelTable) -> np.ndarray:
    """Per kernel, the short hash of the signature its type and shapes give ("" when the
    cells cannot be parsed). Computed once per distinct (type, identity)."""
    if kernels.identity is None:
        raise ValueError("kernel table read without identity columns")
    combo = kernels.type_code.astype(np.int64) * max(len(kernels.identities), 1) + kernels.identity
    uniques, inverse = np.unique(combo, return_inverse=True)
    width = max(len(kernels.identities), 1)
    hashes = []
    for code in uniques.tolist():
        cells = kernels.identities[code % width]
        try:
            hashes.append(short_hash(signature_text(signature(kernels.types[code // width],
                                                              *cells))))
        except CellError:
            hashes.append("")
    return np.asarray(hashes, dtype=object)[inverse]


def attribute_by_order(kernels: KernelTable, specs: list[CaseSpec]) -> Attribution:
    cases = [CaseAttribution() for _ in specs]
    hashes = kernel_signature_hashes(kernels)
    kernel_key = _kernel_keys(kernels)
    keys = set(kernel_key.tolist())
    kernel_case = np.full(len(kernels), -1, np.int64)
    taken = np.zeros(len(kernels), bool)
    type_index = kernels.type_index()
    groups: dict[int, list[int]] = defaultdict(list)
    for index, spec in enumerate(specs):
        key = spec.device if spec.device in keys else (next(iter(keys)) if len(keys) == 1 else None)
        if key is None:
            cases[index].problem = "no kernel table of its device in the profile"
            continue
        groups[key].append(index)
    for key, members in groups.items():
        mine = np.flatnonzero(kernel_key == key)
        mine = mine[np.argsort(kernels.start[mine], kind="stable")]
        candidates: dict[tuple[int, str], list[int]] = defaultdict(list)
        for position, kernel in enumerate(mine.tolist()):
            candidates[(int(kernels.type_code[kernel]), hashes[kernel])].append(position)
        arrays = {k: np.asarray(v, np.int64) for k, v in candidates.items()}
        cursor = 0
        for index in members:
            spec = specs[index]
            parts = [arrays.get((type_index[t], spec.signature)) for t in spec.launches
                     if t in type_index]
            pool = np.sort(np.concatenate([p for p in parts if p is not None])) \
                if any(p is not None for p in parts) else np.empty(0, np.int64)
            start = np.searchsorted(pool, cursor)
            want = spec.calls if spec.calls is not None else len(pool) - start
            chosen = pool[start:start + want]
            if not len(chosen):
                continue
            span = mine[chosen[0]:chosen[-1] + 1]
            kernel_case[span] = np.where(kernel_case[span] < 0, index, kernel_case[span])
            taken[mine[chosen]] = True
            kernel_case[mine[chosen]] = index
            cursor = int(chosen[-1]) + 1
    return _collect(kernels, specs, cases, kernel_case, by_markers=False,
                    notes=["no marker output in the profile: kernels matched to cases by launch "
                           "order, kernel type and shapes"], taken=taken)
