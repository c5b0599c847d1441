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


def encode_samples(samples: list[float]) -> bytes:
    data = array.array("f", samples)
    if sys.byteorder != "little":
        data.byteswap()
    return zlib.compress(data.tobytes(), 6)


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
