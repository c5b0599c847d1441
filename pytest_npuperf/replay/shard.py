"""`--npuperf-shard I/N`: a deterministic split of the cases over N hosts.

A case belongs to shard `1 + hash(case id) mod N`, with a hash that is the same in every
process and on every host (Python's own `hash` of a string is salted per process): the N hosts
of a nightly job together run every case exactly once, whatever order they collect in, and a
case stays on its shard from night to night (its history is one host's).
"""

from __future__ import annotations

import hashlib


def shard_of(case_id: str, count: int) -> int:
    """The 1-based shard of a case among `count`."""
    digest = hashlib.blake2b(case_id.encode("utf-8"), digest_size=8).digest()
    return 1 + int.from_bytes(digest, "big") % count


def in_shard(case_id: str, shard: tuple[int, int] | None) -> bool:
    return shard is None or shard_of(case_id, shard[1]) == shard[0]
