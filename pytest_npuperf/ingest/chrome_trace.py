"""Reading Chrome trace JSON (torch.profiler / kineto exports, torch_npu's `trace_view.json`)
event by event, in bounded memory.

A trace is either an object whose `traceEvents` array holds the events (kineto: `schemaVersion`
and `deviceProperties` come first) or a bare array of events (torch_npu). The file is read in
chunks and each event decoded on its own, so a trace of several GB never sits in memory whole;
any other top-level value is read whole, up to `MAX_VALUE_CHARS`. A gzip-compressed trace
(`*.pt.trace.json.gz`) is decompressed as it is read. What is not valid JSON, or not a trace,
is a one-line error naming the place.
"""

from __future__ import annotations

import contextlib
import gzip
import io
import json
import re
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from ..db.errors import ContractError, NpuperfError, os_error
from ..db.files import open_binary

CHUNK_CHARS = 1 << 20
MAX_VALUE_CHARS = 64 << 20  # one event, or one top-level value other than the events
EVENTS_KEY = "traceEvents"
GZIP_MAGIC = b"\x1f\x8b"
_BLANKS = re.compile(r"[ \t\r\n]*")


class _Reader:
    """A growing window over the file: what is decoded is dropped from the front.

    Linear in the size of the file whatever its shape: a value the window cuts is decoded
    again only once the window has at least doubled (one event of 60 MB is decoded a few
    times, not once per chunk), chunks are joined once per read, and blanks are skipped by a
    regular expression, not one character at a time."""

    def __init__(self, path: Path, handle) -> None:
        self.path = path
        self.handle = handle
        self.buf = ""
        self.pos = 0
        self.offset = 0  # characters of the file before `buf`
        self.eof = False
        self.decoder = json.JSONDecoder()

    def _more(self, at_least: int = 1) -> bool:
        """Read at least `at_least` more characters (fewer at the end of the file)."""
        if self.eof:
            return False
        pieces: list[str] = []
        wanted = max(at_least, 1)
        while wanted > 0:
            try:
                text = self.handle.read(CHUNK_CHARS)
            except UnicodeDecodeError as exc:
                raise ContractError(f"{self.path}: not UTF-8 text near byte {exc.start}: not "
                                    f"a JSON trace") from None
            except (OSError, EOFError, zlib.error) as exc:
                raise _read_error(self.path, exc) from None
            if not text:
                self.eof = True
                break
            pieces.append(text)
            wanted -= len(text)
        if not pieces:
            return False
        if self.pos > CHUNK_CHARS:
            self.offset += self.pos
            self.buf, self.pos = self.buf[self.pos:], 0
        self.buf = "".join([self.buf, *pieces])
        return True

    def peek(self) -> str:
        """The next character that is not white space ("" at the end of the file)."""
        while True:
            self.pos = _BLANKS.match(self.buf, self.pos).end()
            if self.pos < len(self.buf):
                return self.buf[self.pos]
            if not self._more():
                return ""

    def expect(self, char: str, what: str) -> None:
        found = self.peek()
        if found != char:
            self.fail(f"expected {what}, found {found!r}" if found else
                      f"the file ends where {what} was expected (truncated?)")
        self.pos += 1

    def value(self) -> Any:
        """Decode the next JSON value, reading more of the file until it is complete."""
        self.peek()
        while True:
            try:
                value, end = self.decoder.raw_decode(self.buf, self.pos)
            except json.JSONDecodeError as exc:
                pending = len(self.buf) - self.pos
                if pending > MAX_VALUE_CHARS:
                    self.fail(f"one value is longer than {MAX_VALUE_CHARS >> 20} Mi characters "
                              f"or is not JSON ({exc.msg})")
                # Twice the window, up to one character past the limit on a value.
                if not self._more(min(max(pending, CHUNK_CHARS), MAX_VALUE_CHARS + 1 - pending)):
                    self.fail(f"not JSON here ({exc.msg}), or the file is truncated",
                              at=exc.pos)
                continue
            # A number at the end of the window may go on in the next chunk.
            if end == len(self.buf) and not isinstance(value, dict | list | str) and self._more():
                continue
            self.pos = end
            return value

    def fail(self, problem: str, at: int | None = None) -> None:
        position = self.offset + (self.pos if at is None else at)
        raise ContractError(f"{self.path}: character {position:,}: {problem}")


def _array(reader: _Reader) -> Iterator[Any]:
    reader.expect("[", "an array of events")
    if reader.peek() == "]":
        reader.pos += 1
        return
    while True:
        yield reader.value()
        found = reader.peek()
        if found == ",":
            reader.pos += 1
            continue
        if found == "]":
            reader.pos += 1
            return
        reader.fail("expected ',' or ']' between events" if found else
                    "the file ends inside the event array (truncated?)")


def read_events(path: str | Path, meta: dict[str, Any]) -> Iterator[dict]:
    """The trace's events, one by one; the other top-level values go into `meta` as they are
    read (those after the events are there once the iterator is exhausted)."""
    path = Path(path)
    with _opened(path) as handle:
        reader = _Reader(path, handle)
        first = reader.peek()
        if first == "[":
            yield from _checked(reader, _array(reader))
            return
        if first != "{":
            reader.fail("not a JSON trace (a Chrome trace is an object with traceEvents, or an "
                        "array of events)" if first else "empty file")
        reader.pos += 1
        seen_events = False
        while True:
            found = reader.peek()
            if found == "}":
                break
            if found != '"':
                reader.fail("expected a key" if found else "the file ends inside the trace "
                                                           "object (truncated?)")
            key = reader.value()
            reader.expect(":", "':' after a key")
            if key == EVENTS_KEY:
                seen_events = True
                yield from _checked(reader, _array(reader))
            else:
                meta[key] = reader.value()
            found = reader.peek()
            if found == ",":
                reader.pos += 1
            elif found != "}":
                reader.fail("expected ',' or '}' after a value" if found else
                            "the file ends inside the trace object (truncated?)")
        if not seen_events:
            raise ContractError(f"{path}: a JSON object without {EVENTS_KEY}: not a Chrome "
                                f"trace (torch.profiler's export_chrome_trace writes one)")


@contextlib.contextmanager
def _opened(path: Path) -> Iterator:
    """The trace as text: plain, or gzip-compressed (torch's tensorboard handler writes
    `*.pt.trace.json.gz`), told by its first bytes, not its name."""
    raw = open_binary(path, "a trace file")
    with raw:
        try:
            compressed = raw.peek(len(GZIP_MAGIC))[:len(GZIP_MAGIC)] == GZIP_MAGIC
        except OSError as exc:
            raise os_error(path, exc) from None
        binary = gzip.GzipFile(fileobj=raw, mode="rb") if compressed else raw
        with io.TextIOWrapper(binary, encoding="utf-8-sig") as handle:
            yield handle


def _read_error(path: Path, exc: BaseException) -> ContractError | NpuperfError:
    if isinstance(exc, gzip.BadGzipFile | EOFError | zlib.error):
        return ContractError(f"{path}: a damaged or cut gzip file ({exc}): not a readable "
                             f"trace")
    return os_error(path, exc)


def _checked(reader: _Reader, events: Iterator[Any]) -> Iterator[dict]:
    for index, event in enumerate(events):
        if not isinstance(event, dict) or "ph" not in event:
            reader.fail(f"event {index:,} is not a trace event (an object with \"ph\"): not a "
                        f"Chrome trace")
        yield event
