"""How kept samples are stored outside memory (history, run JSON): zlib of little-endian
float32 microseconds (float32 keeps 7 significant digits, far beyond any timer's), base64 in
JSON text."""

from __future__ import annotations

import array
import base64
import binascii
import sys
import zlib

SAMPLES_ENCODING = "zlib-f32le"


# Inputs shorter than this many bytes (31 float32 values) are compressed with a smaller hash
# table (memory level 3): `zlib.compress` sets up and clears hundreds of KB of state for every
# call, most of the cost of a case's few samples (10^5 cases at a large run's end: seconds,
# twice, history and run JSON). Such an input fits one block either way, and the bytes are
# those `zlib.compress(data, 6)` writes (tests/test_samples_encoding.py tries thousands of
# sample sets; levels 1 and 2 are not: their hash drops bits that tell matches apart).
_SMALL = 128
_SMALL_LEVEL = 3


def encode_samples(samples: list[float]) -> bytes:
    data = array.array("f", samples)
    if sys.byteorder != "little":
        data.byteswap()
    raw = data.tobytes()
    if len(raw) < _SMALL:
        packer = zlib.compressobj(6, zlib.DEFLATED, zlib.MAX_WBITS, _SMALL_LEVEL)
        return packer.compress(raw) + packer.flush()
    return zlib.compress(raw, 6)


def decode_samples(blob: bytes, encoding: str = SAMPLES_ENCODING) -> list[float]:
    """The samples of `blob`; ValueError when it is not what `encoding` says."""
    if encoding != SAMPLES_ENCODING:
        raise ValueError(f"unknown samples encoding {encoding!r}")
    try:
        raw = zlib.decompress(blob)
    except zlib.error as exc:
        raise ValueError(f"not zlib data ({exc})") from None
    if len(raw) % 4:
        raise ValueError("not a whole number of float32 values")
    data = array.array("f")
    data.frombytes(raw)
    if sys.byteorder != "little":
        data.byteswap()
    return data.tolist()


def samples_text(samples: list[float]) -> str:
    """For a JSON file: base64 of `encode_samples` ("" for no samples)."""
    return base64.b64encode(encode_samples(samples)).decode("ascii") if samples else ""


def samples_from_text(text: str) -> list[float]:
    if not text:
        return []
    try:
        blob = base64.b64decode(text.encode("ascii"), validate=True)
    except (binascii.Error, UnicodeEncodeError) as exc:
        raise ValueError(f"not base64 ({exc})") from None
    return decode_samples(blob)
