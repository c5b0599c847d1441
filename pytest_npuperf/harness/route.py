"""The route of a case's result, from the measuring call to the database write, in one place.

    measurer --keep--> item.stash --pack--> report.user_properties --(xdist: a dict)-->
    receiver --unpack--> owner (journal) --hand_over--> finish_run --> target.write
    --> replay/write.py `write_results`

1. `keep`: the `npuperf_replay` fixture's function (harness/measurer.py) keeps each result it
   measures on the test's item, its final verdict included; a case pytest skipped before it
   ran gets a skipped result kept the same way (harness/parametrize.py);
2. `pack` (pytest_runtest_makereport, in the measuring process): the item's report carries
   the kept result in its `user_properties`: the object itself where the owner is this
   process, its dictionary where the report crosses to the xdist controller (the only
   crossing of processes);
3. `unpack` (pytest_runtest_logreport, on the owner's side, harness/receiver.py): the result
   back off the report (a dictionary is read once, then kept on the report); the owner
   (harness/owner.py) judges it late when its worker could not, journals it and keeps it;
4. `hand_over`: at the run's end the owner hands every result (with those a resumed run took
   from its journal) to `finish_run` (run/finish.py) with the run's target
   (`Destination.run_target`, run/target.py), whose `write` imports the write
   (replay/write.py `write_results`) only then.

Light on purpose, as stash.py: the plugin loads this in every pytest run; the result's class
and the run's end are imported only when a result travels.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from .stash import roles

if TYPE_CHECKING:
    from ..db.lock import DatabaseLock
    from ..measure.result import CaseResult
    from ..run.finish import RunEnd, RunFacts
    from .destination import Destination

RESULT_PROPERTY = "npuperf_result"
RESULT_KEY = pytest.StashKey["CaseResult"]()  # on an item: the result of its case


def keep(item: pytest.Item, result: CaseResult) -> None:
    """1. The result of the item's case, kept on the item until its report is made."""
    item.stash[RESULT_KEY] = result


def kept(item: pytest.Item) -> CaseResult | None:
    """The result kept on an item (in the measuring process), or None."""
    return item.stash.get(RESULT_KEY, None)


def pack(item: pytest.Item, report: pytest.TestReport, result: CaseResult) -> None:
    """2. A case's result onto its report (and kept on its item): the object itself where the
    owner is this process, its dictionary where it crosses to the xdist controller."""
    keep(item, result)
    value = result.to_dict() if roles(item.config).crosses else result
    report.user_properties.append((RESULT_PROPERTY, value))


def carries(report: pytest.TestReport) -> bool:
    """Whether a report carries a case's result (without reading it)."""
    return any(name == RESULT_PROPERTY for name, _ in report.user_properties)


def unpack(report: pytest.TestReport, *, in_place: bool = True) -> CaseResult | None:
    """3. The result a report carries (a dictionary from a worker is read once, then kept in
    its place with `in_place`). A process whose reports still cross to the controller (an
    xdist worker, `-v` asking for its status word) must not keep it: execnet sends
    dictionaries, not objects."""
    properties = getattr(report, "user_properties", None) or []
    for index, (name, value) in enumerate(properties):
        if name != RESULT_PROPERTY:
            continue
        if isinstance(value, dict):
            from ..measure.result import CaseResult

            value = CaseResult.from_dict(value)
            if in_place:
                properties[index] = (name, value)
        return value
    return None


def hand_over(facts: RunFacts, results: list, destination: Destination,
              lock: DatabaseLock | None, **end) -> RunEnd:
    """4. Every result of the run to its end (run/finish.py), with the run's target: the
    destination's database (or none, for grid points), written through `write_results`.
    `end`: how the run ends (`finish_run`'s options)."""
    from ..run.finish import finish_run

    return finish_run(facts, results, destination.run_target(lock), **end)
