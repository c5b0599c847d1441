"""Where a pytest run keeps its roles and their objects, and how a case's result travels on
its test report.

The roles are chosen once, at configure time (`choose_roles`), the way pytest-xdist splits
its controller from its workers: the process that *owns* the run (the serial process, or the
xdist controller) receives every result and writes at the end; a process that *measures*
(the serial process, or an xdist worker) runs cases. Their objects (`Owner`, `Measurer`,
over one `RunContext`) are created with the run's first replay case (roles.py).

Light on purpose: the plugin loads this in every pytest run, and a run without replay cases
must cost nothing. The role modules, and torch, pandas and the database behind them, are
imported only when a run has a replay case.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

import pytest

from ..comm.launch import xdist_in_use
from ..measure.clock import run_origin

if TYPE_CHECKING:
    from ..measure.result import CaseResult

RESULT_PROPERTY = "npuperf_result"
# The role objects (roles.py creates them; their modules import this one, not the reverse).
CONTEXT_KEY = pytest.StashKey[object]()
OWNER_KEY = pytest.StashKey[object]()
MEASURER_KEY = pytest.StashKey[object]()
COMM_KEY = pytest.StashKey[object]()
RESULT_KEY = pytest.StashKey["CaseResult"]()  # on an item: the result of its case
_ROLES = pytest.StashKey["Roles"]()
_STARTED = pytest.StashKey[float]()
_ORIGIN = pytest.StashKey["tuple[float, str]"]()


@dataclass(frozen=True)
class Roles:
    owns: bool  # receives every result, writes the database, the history and the reports
    measures: bool  # runs cases

    @property
    def crosses(self) -> bool:
        """Whether results cross to another process (an xdist worker's go to the controller)."""
        return not self.owns


def choose_roles(config: pytest.Config) -> Roles:
    worker = hasattr(config, "workerinput")
    controller = not worker and xdist_in_use(config.option)
    roles = config.stash[_ROLES] = Roles(owns=not worker, measures=not controller)
    return roles


def roles(config: pytest.Config) -> Roles:
    roles = config.stash.get(_ROLES, None)
    return roles if roles is not None else choose_roles(config)


def mark_start(config: pytest.Config) -> None:
    """Remember when the run started (pytest_configure): a session created later counts from
    it; and where its wall time starts, taken here so that every run of a process, replay
    cases or not, claims the process's pytest start in the order the runs came."""
    config.stash[_STARTED] = time.time()
    config.stash[_ORIGIN] = run_origin()


def started_at(config: pytest.Config) -> float:
    return config.stash.get(_STARTED, time.time())


def wall_origin(config: pytest.Config) -> tuple[float, str]:
    """(epoch seconds, what they are) where the run's wall time and duty cycle start."""
    origin = config.stash.get(_ORIGIN, None)
    return origin if origin is not None else run_origin()


# -- a case's result on its report ------------------------------------------------------------
def attach_result(item: pytest.Item, report: pytest.TestReport, result: CaseResult) -> None:
    """Put a case's result on its report: the object itself where the owner is this process,
    its dictionary where it crosses to the xdist controller (the only crossing)."""
    item.stash[RESULT_KEY] = result
    value = result.to_dict() if roles(item.config).crosses else result
    report.user_properties.append((RESULT_PROPERTY, value))


def result_of(report: pytest.TestReport, *, keep: bool = True) -> CaseResult | None:
    """The result a report carries (a dictionary from a worker is read once, then kept in
    its place with `keep`). A process whose reports still cross to the controller (an xdist
    worker, `-v` asking for its status word) must not keep it: execnet sends dictionaries,
    not objects."""
    properties = getattr(report, "user_properties", None) or []
    for index, (name, value) in enumerate(properties):
        if name != RESULT_PROPERTY:
            continue
        if isinstance(value, dict):
            from ..measure.result import CaseResult

            value = CaseResult.from_dict(value)
            if keep:
                properties[index] = (name, value)
        return value
    return None


def teststatus(report: pytest.TestReport, config: pytest.Config):
    """A case that ended without a trusted value has an outcome of its own, `no value` (letter
    `n`), whatever the verbosity. `-v`: a measured case's line says its value (`PASSED
    312.5 us ±0.2 %`, `NO VALUE 1.2 ms (noisy)`, `FAILED 31.9 ms SLOWER 1.222x`). None leaves
    the line to pytest."""
    if report.when != "call" or hasattr(report, "wasxfail") \
            or not any(name == RESULT_PROPERTY for name, _ in report.user_properties):
        return None
    result = result_of(report, keep=roles(config).owns)
    if result is None:
        return None
    from ..measure.result import NO_VALUE

    no_value = report.skipped and result.without_value
    if config.option.verbose <= 0 or result.value is None:
        return (NO_VALUE, "n", NO_VALUE.upper()) if no_value else None
    from ..measure.units import fmt_duration

    outcome = NO_VALUE if no_value else report.outcome
    word = f"{outcome.upper()} {fmt_duration(result.value)}"
    if result.precision is not None:
        word += f" ±{100 * result.precision:.1f} %"
    if result.status != "ok":
        word += f" ({result.status})"
    verdict = (result.regression or {}).get("verdict")
    ratio = (result.regression or {}).get("ratio")
    if verdict and verdict not in ("SAME", "NEW"):
        word += f" {verdict}" + (f" {ratio:.3f}x" if ratio else "")
    letter = {"passed": ".", "failed": "F", "skipped": "s", NO_VALUE: "n"}.get(outcome, "?")
    return outcome, letter, word
