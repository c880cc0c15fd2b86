"""Reading one JSON document piece by piece, in time linear in its size and memory bounded by a chunk.

A dump.json can be gigabytes, hostile, or no JSON at all. What is decoded whole here is short (a record name, a
top-level field, at most ``MAX_TEXT`` bytes); a record is only delimited (its byte span), and decoded later, on
its own, so a record the parser cannot take (nested too deeply, a 5000-digit integer, broken inside) costs only
its own row. Bytes are read as Latin-1, one character per byte, so a position is a byte offset into the file;
text is decoded from UTF-8 where a value is decoded.
"""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, BinaryIO, TypeVar

from precheck.core.older_python import int_max_str_digits
from precheck.dump.safe_files import Refused, open_regular

T = TypeVar("T")

MAX_TEXT = 1 << 20  # bytes of a value decoded here (a record name, a top-level field)
MAX_TRACKED_DEPTH = 1 << 12  # nesting levels whose bracket kinds are matched; deeper ones are only counted
_WS = re.compile(r"[ \t\n\r]*")
_PLAIN = re.compile(r'[^"\\]*')  # string content up to a quote or a backslash
_SCALAR = re.compile(r"[^,\]} \t\n\r]*")
# what lies between brackets: anything but a bracket or a quote, and whole strings (possessive: no backtracking;
# Python 3.9 and 3.10 have no possessive quantifiers, and the greedy pattern matches the same: nothing follows its
# last repeat, so its first match is the longest and it never backtracks into one)
_BETWEEN = re.compile(
    r'(?:[^"\[\]{}]++|"[^"\\]*+(?:\\.[^"\\]*+)*+")*+'
    if sys.version_info >= (3, 11)
    else r'(?:[^"\[\]{}]+|"[^"\\]*(?:\\.[^"\\]*)*")*'
)
_VALUE_START = frozenset('{["-0123456789tfnNI')
_DECODER = json.JSONDecoder()


class StreamError(Exception):
    """The document cannot be read here for a reason other than its grammar (a value too long to decode)."""


class JsonStream:
    """One JSON document read from a binary file, chunk by chunk, never re-reading what it has passed."""

    CHUNK = 1 << 20

    def __init__(self, f: BinaryIO) -> None:
        self.f, self.buf, self.pos = f, "", 0
        self.base = 0  # file offset of buf[0]

    def _fill(self) -> bool:
        """Read more: at least a chunk, and as much as is held past ``pos``, so a value decoded whole is tried
        O(log n) times over a doubling buffer (linear in its size), not once per chunk (quadratic)."""
        chunk = self.f.read(max(self.CHUNK, len(self.buf) - self.pos))
        if not chunk:
            return False
        self.base += self.pos
        self.buf, self.pos = self.buf[self.pos :] + chunk.decode("latin-1"), 0
        return True

    @property
    def offset(self) -> int:
        return self.base + self.pos

    def peek(self) -> str:
        """The next character that is not white space ("" at the end of the file)."""
        while True:
            self.pos = _WS.match(self.buf, self.pos).end()
            if self.pos < len(self.buf):
                return self.buf[self.pos]
            if not self._fill():
                return ""

    def error(self, message: str, offset: int | None = None) -> json.JSONDecodeError:
        return json.JSONDecodeError(message, "", self.offset if offset is None else offset)

    def expect(self, char: str) -> None:
        if self.peek() != char:
            raise self.error(f"expected {char!r}")
        self.pos += 1

    def sniff(self) -> str:
        """The first character of the document, refusing at once what cannot start JSON (random bytes, NULs,
        a binary file): such a file is not read any further."""
        first = self.peek()
        if first == "":
            raise self.error("the file is empty")
        if first not in _VALUE_START:
            head = self.buf[self.pos : self.pos + 16].encode("latin-1")
            raise self.error(f"a JSON document cannot start with {head!r}")
        return first

    def value(self, what: str = "a value") -> Any:
        """Decode the value that starts here (at most MAX_TEXT bytes: ``what`` names it in the error)."""
        self.peek()
        start = self.offset
        while True:
            try:
                value, end = _DECODER.raw_decode(self.buf, self.pos)
            except json.JSONDecodeError as e:
                if self._cut(e) and self._more(what, start):
                    continue  # the value runs past what has been read so far
                raise self.error(e.msg, self.base + e.pos) from None
            except ValueError as e:  # an integer longer than Python converts
                raise self.error(digits_problem(e)) from None
            except RecursionError:
                raise self.error("nested too deeply") from None
            if end == len(self.buf) and self._more(what, start):
                continue  # a number cut at the chunk's end may go on
            text, self.pos = self.buf[self.pos : end], end
            return value if text.isascii() else _from_utf8(text, value)

    def _cut(self, e: json.JSONDecodeError) -> bool:
        """Whether more text could mend the error: it lies within a token's length of the buffer's end (``-Infin``
        cut short), or in a string not closed yet. An error earlier is in the text itself: reading on cannot help."""
        return e.pos >= len(self.buf) - 16 or e.msg.startswith("Unterminated string")

    def _more(self, what: str, start: int) -> bool:
        if len(self.buf) - self.pos > MAX_TEXT:
            raise StreamError(f"{what} at byte {start} is longer than {MAX_TEXT} bytes")
        return self._fill()

    def keys(self, what: str) -> Iterator[str]:
        """The keys of the object that starts here (``what`` names them in errors); the caller reads each key's
        value before the next."""
        self.expect("{")
        if self.peek() == "}":
            self.pos += 1
            return
        while True:
            key = self.value(what)
            if not isinstance(key, str):
                raise self.error("object keys must be strings")
            self.expect(":")
            yield key
            char = self.peek()
            self.pos += 1
            if char == "}":
                return
            if char != ",":
                raise self.error("expected ',' or '}'")

    def skip(self) -> tuple[int, int]:
        """Read past the value that starts here without keeping it; its (start, end) byte offsets. A value of up
        to MAX_TEXT bytes is delimited by the C decoder; a longer one, or one it cannot take (nested too deeply,
        an over-long integer, broken inside), by matching strings and brackets only: what is inside is then the
        value's own decoder's business."""
        first = self.peek()
        start = self.offset
        if first == "":
            raise self.error("expected a value")
        if self._decoded_end():
            return start, self.offset
        self.pos += 1
        if first == '"':
            self._string_end()
        elif first in "{[":
            self._container_end(first)
        else:
            self._scalar_end()
        return start, self.offset

    def _decoded_end(self) -> bool:
        """Move past the value here if the C decoder takes it within MAX_TEXT bytes (``pos`` stays otherwise)."""
        while True:
            try:
                end = _DECODER.raw_decode(self.buf, self.pos)[1]
            except json.JSONDecodeError as e:
                if self._cut(e) and len(self.buf) - self.pos <= MAX_TEXT and self._fill():
                    continue
                return False
            except (ValueError, RecursionError):
                return False
            if end == len(self.buf):  # a number cut at the chunk's end may go on
                if len(self.buf) - self.pos > MAX_TEXT:
                    return False
                if self._fill():
                    continue
            self.pos = end
            return True

    def _string_end(self) -> None:
        """Move past the closing quote of the string whose opening quote is behind ``pos``."""
        while True:
            self.pos = _PLAIN.match(self.buf, self.pos).end()
            if self.pos < len(self.buf):
                if self.buf[self.pos] == '"':
                    self.pos += 1
                    return
                if self.pos + 1 < len(self.buf):  # a backslash and the character it escapes
                    self.pos += 2
                    continue
            if not self._fill():
                raise self.error("unterminated string")

    def _container_end(self, opening: str) -> None:
        closers = ["}" if opening == "{" else "]"]  # the closing bracket expected at each tracked level
        untracked = 0  # levels below MAX_TRACKED_DEPTH: counted, not matched, so memory stays bounded
        while closers:
            self.pos = _BETWEEN.match(self.buf, self.pos).end()
            if self.pos == len(self.buf):
                if not self._fill():
                    raise self.error("unterminated array or object")
                continue
            char = self.buf[self.pos]
            self.pos += 1
            if char == '"':  # a string the buffer's end cuts
                self._string_end()
            elif char in "{[" and len(closers) < MAX_TRACKED_DEPTH:
                closers.append("}" if char == "{" else "]")
            elif char in "{[":
                untracked += 1
            elif untracked:
                untracked -= 1
            elif closers.pop() != char:
                raise self.error(f"unexpected {char!r}", self.offset - 1)

    def _scalar_end(self) -> None:
        while True:
            self.pos = _SCALAR.match(self.buf, self.pos).end()
            if self.pos < len(self.buf) or not self._fill():
                return


def _from_utf8(text: str, value: Any) -> Any:
    """The value of JSON text read as Latin-1 bytes, decoded from the UTF-8 those bytes are; decoding the bytes
    before the JSON (not after) keeps a ``\\u`` escape's text as it is. Text that is not UTF-8 is kept as read."""
    try:
        return json.loads(text.encode("latin-1").decode("utf-8"))
    except UnicodeDecodeError:
        return value


def digits_problem(e: ValueError) -> str:
    """Python's message for an over-long integer is advice to raise a limit: say what the data holds instead."""
    m = re.search(r"has (\d+) digits", str(e))
    count = f" of {m[1]} digits" if m else ""
    return f"an integer{count} (more than the {int_max_str_digits()} digits Python reads)"


def read_json(path: Path, error: type[Exception], limit: int, what: str) -> Any:
    """The JSON document in ``path``, a small file that came from anyone (a config, a sidecar, stack.json), read
    whole. FileNotFoundError passes through (absent is the caller's case); every other reason it is no document
    becomes one line in ``error`` naming the file: not a regular file (a FIFO is never waited on), unreadable,
    over ``limit`` bytes (larger than any ``what``), not UTF-8, not JSON, nested too deeply, an integer too long."""
    try:
        with open_regular(path) as f:
            data = f.read(limit + 1)
    except Refused as e:
        raise error(str(e)) from None
    except FileNotFoundError:
        raise
    except OSError as e:
        raise error(f"{path}: cannot read: {e.strerror or e}") from None
    if len(data) > limit:
        raise error(f"{path}: over {limit >> 20} MiB, larger than any {what}")
    try:
        return json.loads(data.decode("utf-8"))
    except UnicodeDecodeError as e:
        raise error(f"{path}: not UTF-8 (byte {e.start})") from None
    except RecursionError:
        raise error(f"{path}: nested too deeply") from None
    except json.JSONDecodeError as e:
        raise error(f"{path}: not JSON ({e})") from None
    except ValueError as e:
        raise error(f"{path}: {digits_problem(e)}") from None


def read_file(path: Path, read: Callable[[JsonStream], T], error: type[Exception]) -> T:
    """``read`` over the JSON stream of ``path``; every reason the file cannot be read (missing, not a regular
    file, unreadable, not JSON, a value too long) becomes one line in ``error``, naming the file."""
    try:
        with open_regular(path) as f:  # /dev/zero, a FIFO: no end, no offsets to come back to
            return read(JsonStream(f))
    except Refused as e:
        raise error(str(e)) from None
    except FileNotFoundError:
        raise error(f"{path}: no such file") from None
    except OSError as e:
        raise error(f"{path}: cannot read: {e}") from None
    except json.JSONDecodeError as e:
        raise error(f"{path}: not valid JSON: {e.msg} (byte {e.pos})") from None
    except StreamError as e:
        raise error(f"{path}: {e}") from None
