"""Text from a dump, escaped reversibly wherever it leaves the program (CSV cells, messages, the terminal, the
markdown report), so that a hostile name can neither drive a terminal (ESC, BEL), nor break a line, nor start
a spreadsheet formula, nor become markdown or HTML, and the original can still be recovered exactly.

Imports nothing heavy: the commands that only read CSVs use it.

Characters that are not printable (control characters, line and paragraph separators, bidirectional overrides,
lone surrogates) become ``\\xNN``, ``\\uNNNN`` or ``\\UNNNNNNNN``. A backslash is doubled only where it would
otherwise read as the start of such an escape (before ``x``, ``u``, ``U``, another backslash or an escaped
character), so ordinary names and Windows paths are written as they are. :func:`unescape` inverts it.
"""

from __future__ import annotations

import os
import re
import shlex

__all__ = ["clip", "escape", "unescape", "formula_safe", "unformula", "markdown", "markdown_code", "shell_command"]

MAX_PROBLEM = 500  # characters of a problem quoting a recorded value (a message quoting a huge one is cut)

# OWASP's CSV injection list (a spreadsheet starts a formula at =, +, -, @, tab or carriage return), and the
# full-width forms that CJK spreadsheets also take as a formula.
_FORMULA_START = frozenset("=+-@\t\r\uff1d\uff0b\uff0d\uff20")
_NUMBER = re.compile(r"[+-]?(?:(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?|inf|infinity|nan)", re.IGNORECASE)
_ESCAPE = re.compile(r"\\(?:\\|x[0-9a-f]{2}|u[0-9a-f]{4}|U[0-9a-f]{8})")
_MARKDOWN = re.compile(r"[\\`*_\[\]|~#!<>&]")
_ENTITIES = {"<": "&lt;", ">": "&gt;", "&": "&amp;"}


def clip(text: str, limit: int = MAX_PROBLEM) -> str:
    """``text`` cut to ``limit`` characters, saying how many more there were: a message that quotes a recorded
    value stays one readable line however large the value."""
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text) - limit} more characters)"


def _escaped(char: str) -> str:
    code = ord(char)
    if code < 0x100:
        return f"\\x{code:02x}"
    return f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}"


def escape(text: str) -> str:
    """``text`` as one printable line, reversibly (see the module docstring)."""
    if text.isprintable() and "\\" not in text:
        return text
    out = []
    for i, char in enumerate(text):
        if char == "\\":
            after = text[i + 1 : i + 2]
            ambiguous = after in ("x", "u", "U", "\\") or (after != "" and not after.isprintable())
            out.append("\\\\" if ambiguous else "\\")
        elif char.isprintable():
            out.append(char)
        else:
            out.append(_escaped(char))
    return "".join(out)


def unescape(text: str) -> str:
    """The text :func:`escape` was given."""
    if "\\" not in text:
        return text

    def original(m: re.Match[str]) -> str:
        code = m.group(0)[2:]
        return "\\" if not code else chr(int(code, 16))

    return _ESCAPE.sub(original, text)


def formula_safe(value: str) -> str:
    """A cell a spreadsheet never runs as a formula: a quote in front of text that starts one (OWASP), and in front
    of text that already starts with quotes before such a character, so ``=cmd`` and ``'=cmd`` stay two cells.
    A number written as text (``-0.5``, ``-inf``) is left as it is, for msprobe's readers parse it."""
    if value.lstrip("'")[:1] in _FORMULA_START and not _NUMBER.fullmatch(value):
        return "'" + value
    return value


def unformula(cell: str) -> str:
    """The text :func:`formula_safe` was given."""
    if cell.startswith("'") and cell[1:].lstrip("'")[:1] in _FORMULA_START:
        return cell[1:]
    return cell


def markdown(text: str) -> str:
    """Text for a markdown table cell or line, rendered as exactly this text: escaped to one line, markdown's
    punctuation backslash-escaped and HTML's characters as entities, so no heading, link, table column or tag
    comes from it."""
    return _MARKDOWN.sub(lambda m: _ENTITIES.get(m.group(0), "\\" + m.group(0)), escape(text))


def markdown_code(text: str) -> str:
    """Text as a markdown code span (outside tables), rendered literally: escaped to one line, fenced with more
    backticks than it holds in a row."""
    line = escape(text)
    fence = "`" * (max(map(len, re.findall("`+", line)), default=0) + 1)
    pad = " " if line.startswith("`") or line.endswith("`") else ""
    return f"{fence}{pad}{line}{pad}{fence}"


def shell_command(*words: str | os.PathLike) -> str:
    """A command line that a POSIX shell splits back into exactly ``words``, for a user to paste: a record key or
    a folder named ``x$(touch f)`` is one quoted word, never a command. Words are single-quoted (shlex.quote); one
    holding a backslash or a character that is not printable is ANSI-C quoted (``$'...'``, bash, zsh, ksh) with
    those characters as octal escapes of their UTF-8 bytes, so the line stays one printable line that
    :func:`escape` leaves as it is (the console escapes what it prints)."""
    return " ".join(_shell_word(os.fspath(word)) for word in words)


def _shell_word(word: str) -> str:
    if word.isprintable() and "\\" not in word:
        return shlex.quote(word)
    out = []
    for char in word:
        if char.isprintable() and char not in "\\'":
            out.append(char)
        else:
            out.extend(f"\\{byte:03o}" for byte in _utf8(char))
    return "$'" + "".join(out) + "'"


def _utf8(char: str) -> bytes:
    """A character's bytes as the system's argv holds them: a byte Python decoded to a surrogate is that byte
    again; a lone surrogate read from JSON is written as its UTF-8 form, as near as bytes get."""
    try:
        return os.fsencode(char)
    except UnicodeEncodeError:
        return char.encode("utf-8", "surrogatepass")
