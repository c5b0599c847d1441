"""Which pytest node ids are replay cases, and the case id a node id ends in.

Light: the xdist controller asks this of every collected id before it reads any database.
"""

from __future__ import annotations

import re

# A replay case's node id ends in its case id, `<type>-<shape>-<dtype>-<8 hex>[-dupN]`
# (replay.cases.case_id), or `<type>-unreadable` for a file that could not be read: only
# such ids make the xdist controller read the database.
CASE_NODEID = re.compile(r"\[[^\[\]]+-(?:[0-9a-f]{8}(?:-dup\d+)?|unreadable)\]$")


def case_id_of_nodeid(nodeid: str) -> str:
    """The case id a parametrized node id ends in ("" for a node id without parameters)."""
    return nodeid.rsplit("[", 1)[-1].rstrip("]") if nodeid.endswith("]") else ""


def may_be_cases(node_ids: list[str]) -> bool:
    return any(map(CASE_NODEID.search, node_ids))
