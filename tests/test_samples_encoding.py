"""Kept samples as stored in the history and the run JSON (db/samples.py): a few samples are
compressed the quick way, and the bytes are still those `zlib.compress(data, 6)` writes, so
a history or run JSON written before reads and compares the same."""

from __future__ import annotations

import array
import random
import sys
import zlib

from pytest_npuperf.db.samples import (
    decode_samples,
    encode_samples,
    samples_from_text,
    samples_text,
)


def _reference(samples: list[float]) -> bytes:
    data = array.array("f", samples)
    if sys.byteorder != "little":
        data.byteswap()
    return zlib.compress(data.tobytes(), 6)


def _sample_sets(rng: random.Random, n: int) -> list[list[float]]:
    """Latencies as runs keep them: spread, rounded to a timer's tick, a few repeated values
    (ties: two or three values), all equal."""
    return [[20.0 + rng.random() for _ in range(n)],
            [round(5.0 + rng.random(), 1) for _ in range(n)],
            [float(rng.choice([10, 11, 12])) for _ in range(n)],
            [float(rng.choice([10, 11])) for _ in range(n)],
            [7.25] * n]


def test_few_samples_encode_to_the_same_bytes_as_zlib_compress():
    rng = random.Random(33)
    for n in range(1, 40):  # across the quick path's limit (31 float32 values)
        for _ in range(25):
            for samples in _sample_sets(rng, n):
                assert encode_samples(samples) == _reference(samples), (n, samples)


def test_samples_round_trip_through_bytes_and_text():
    rng = random.Random(7)
    for n in (1, 8, 31, 32, 200):
        for samples in _sample_sets(rng, n):
            expected = array.array("f", samples).tolist()  # float32, as stored
            assert decode_samples(encode_samples(samples)) == expected
            assert samples_from_text(samples_text(samples)) == expected
    assert samples_text([]) == ""
