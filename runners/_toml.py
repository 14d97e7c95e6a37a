"""TOML reading: `tomllib` where it exists (Python 3.11+), else a small reader.

The runner supports Python 3.10, which has no `tomllib`, and may install nothing. The
fallback reads the TOML that task files use: tables and arrays of tables, bare, quoted
and dotted keys, all four string forms, integers, floats, booleans, arrays and inline
tables. Dates and times are refused with a clear error. Tests check that it gives the
same result as `tomllib` on every task file.
"""

from __future__ import annotations

import re
import sys
from typing import Any


class TOMLError(ValueError):
    """The file is not TOML (or uses what the fallback reader does not support)."""


def loads(text: str) -> dict[str, Any]:
    if sys.version_info >= (3, 11):  # noqa: UP036 - the runner supports Python 3.10
        import tomllib

        try:
            return tomllib.loads(text)
        except tomllib.TOMLDecodeError as exc:
            raise TOMLError(str(exc)) from exc
    return fallback_loads(text)


def fallback_loads(text: str) -> dict[str, Any]:
    return _Reader(text).document()


_BARE = re.compile(r"[A-Za-z0-9_-]+")
_NUMBER = re.compile(
    r"[+-]?(?:0x[0-9A-Fa-f_]+|0o[0-7_]+|0b[01_]+|inf|nan|"
    r"(?:\d[\d_]*)(?:\.\d[\d_]*)?(?:[eE][+-]?\d[\d_]*)?)"
)
_DATE = re.compile(r"\d{4}-\d{2}-\d{2}|\d{2}:\d{2}")
_ESCAPES = {"b": "\b", "t": "\t", "n": "\n", "f": "\f", "r": "\r", '"': '"', "\\": "\\"}


class _Reader:
    def __init__(self, text: str) -> None:
        self.s = text.replace("\r\n", "\n")
        self.i = 0
        self.root: dict[str, Any] = {}
        self.defined: set[tuple[str, ...]] = set()
        self.inline: set[int] = set()  # ids of inline tables and arrays: closed for edits

    # ----------------------------------------------------------------- errors

    def fail(self, msg: str) -> TOMLError:
        line = self.s.count("\n", 0, self.i) + 1
        col = self.i - (self.s.rfind("\n", 0, self.i) + 1) + 1
        return TOMLError(f"{msg} (at line {line}, column {col})")

    # ----------------------------------------------------------------- lexing

    def peek(self, n: int = 1) -> str:
        return self.s[self.i : self.i + n]

    def skip_ws(self) -> None:
        while self.i < len(self.s) and self.s[self.i] in " \t":
            self.i += 1

    def skip_comment(self) -> None:
        if self.peek() == "#":
            end = self.s.find("\n", self.i)
            self.i = len(self.s) if end < 0 else end

    def skip_blank(self) -> None:
        """Whitespace, newlines and comments (inside arrays)."""
        while True:
            self.skip_ws()
            self.skip_comment()
            if self.peek() == "\n":
                self.i += 1
                continue
            return

    def end_of_line(self) -> None:
        self.skip_ws()
        self.skip_comment()
        if self.i < len(self.s) and self.s[self.i] != "\n":
            raise self.fail("expected the end of the line")
        self.i += 1

    # ----------------------------------------------------------------- document

    def document(self) -> dict[str, Any]:
        current = self.root
        while True:
            self.skip_blank()
            if self.i >= len(self.s):
                return self.root
            if self.peek(2) == "[[":
                self.i += 2
                path = self.key_path("]]")
                current = self.array_table(path)
                self.end_of_line()
            elif self.peek() == "[":
                self.i += 1
                path = self.key_path("]")
                current = self.table(path)
                self.end_of_line()
            else:
                self.key_value(current)
                self.end_of_line()

    def key_path(self, close: str) -> tuple[str, ...]:
        self.skip_ws()
        keys = self.dotted_key()
        self.skip_ws()
        if self.peek(len(close)) != close:
            raise self.fail(f"expected {close!r} after a table name")
        self.i += len(close)
        return keys

    def descend(self, table: dict[str, Any], keys: tuple[str, ...]) -> dict[str, Any]:
        for k in keys:
            nxt = table.setdefault(k, {})
            if isinstance(nxt, list) and id(nxt) not in self.inline and nxt:
                nxt = nxt[-1]
            if not isinstance(nxt, dict) or id(nxt) in self.inline:
                raise self.fail(f"key {k!r} is already defined as a value")
            table = nxt
        return table

    def table(self, path: tuple[str, ...]) -> dict[str, Any]:
        if path in self.defined:
            raise self.fail(f"table [{'.'.join(path)}] is defined twice")
        self.defined.add(path)
        return self.descend(self.root, path)

    def array_table(self, path: tuple[str, ...]) -> dict[str, Any]:
        parent = self.descend(self.root, path[:-1])
        arr = parent.setdefault(path[-1], [])
        if not isinstance(arr, list) or id(arr) in self.inline:
            raise self.fail(f"key {path[-1]!r} is not an array of tables")
        new: dict[str, Any] = {}
        arr.append(new)
        return new

    def dotted_key(self) -> tuple[str, ...]:
        keys = [self.simple_key()]
        while True:
            self.skip_ws()
            if self.peek() != ".":
                return tuple(keys)
            self.i += 1
            self.skip_ws()
            keys.append(self.simple_key())

    def simple_key(self) -> str:
        c = self.peek()
        if c == '"':
            return self.basic_string()
        if c == "'":
            return self.literal_string()
        m = _BARE.match(self.s, self.i)
        if not m:
            raise self.fail("expected a key")
        self.i = m.end()
        return m.group()

    def key_value(self, table: dict[str, Any]) -> None:
        keys = self.dotted_key()
        self.skip_ws()
        if self.peek() != "=":
            raise self.fail("expected '=' after a key")
        self.i += 1
        self.skip_ws()
        value = self.value()
        target = self.descend(table, keys[:-1])
        if keys[-1] in target:
            raise self.fail(f"key {keys[-1]!r} is defined twice")
        target[keys[-1]] = value

    # ----------------------------------------------------------------- values

    def value(self) -> Any:
        c = self.peek()
        if self.peek(3) in ('"""', "'''"):
            return self.multiline_string(self.peek(3))
        if c == '"':
            return self.basic_string()
        if c == "'":
            return self.literal_string()
        if c == "[":
            return self.array()
        if c == "{":
            return self.inline_table()
        for word, val in (("true", True), ("false", False)):
            if self.s.startswith(word, self.i):
                self.i += len(word)
                return val
        if _DATE.match(self.s, self.i):
            raise self.fail("dates and times are not supported by this reader")
        m = _NUMBER.match(self.s, self.i)
        if not m or not m.group():
            raise self.fail("expected a value")
        self.i = m.end()
        return self.number(m.group())

    def number(self, tok: str) -> int | float:
        t = tok.replace("_", "")
        sign = -1 if t.startswith("-") else 1
        body = t.lstrip("+-")
        if body in ("inf", "nan"):
            return sign * float(body)
        for prefix, base in (("0x", 16), ("0o", 8), ("0b", 2)):
            if body.startswith(prefix):
                return int(body[2:], base)
        if any(ch in body for ch in ".eE"):
            return float(t)
        return int(t)

    def basic_string(self) -> str:
        self.i += 1
        out: list[str] = []
        while True:
            if self.i >= len(self.s) or self.s[self.i] == "\n":
                raise self.fail("unterminated string")
            c = self.s[self.i]
            if c == '"':
                self.i += 1
                return "".join(out)
            if c == "\\":
                out.append(self.escape())
                continue
            out.append(c)
            self.i += 1

    def escape(self) -> str:
        c = self.s[self.i + 1 : self.i + 2]
        if c in _ESCAPES:
            self.i += 2
            return _ESCAPES[c]
        if c in ("u", "U"):
            n = 4 if c == "u" else 8
            digits = self.s[self.i + 2 : self.i + 2 + n]
            if len(digits) != n or not all(d in "0123456789abcdefABCDEF" for d in digits):
                raise self.fail("bad unicode escape")
            self.i += 2 + n
            return chr(int(digits, 16))
        raise self.fail(f"unknown escape \\{c}")

    def literal_string(self) -> str:
        end = self.s.find("'", self.i + 1)
        nl = self.s.find("\n", self.i + 1)
        if end < 0 or (0 <= nl < end):
            raise self.fail("unterminated string")
        out = self.s[self.i + 1 : end]
        self.i = end + 1
        return out

    def multiline_string(self, quote: str) -> str:
        self.i += 3
        if self.peek() == "\n":
            self.i += 1
        end = self.s.find(quote, self.i)
        if end < 0:
            raise self.fail("unterminated multi-line string")
        extra = 0  # up to two quote characters may end the content itself
        while extra < 2 and self.s[end + 3 + extra : end + 4 + extra] == quote[0]:
            extra += 1
        end += extra
        raw = self.s[self.i : end]
        self.i = end + 3
        if quote == "'''":
            return raw
        out: list[str] = []
        j = 0
        while j < len(raw):
            c = raw[j]
            if c != "\\":
                out.append(c)
                j += 1
                continue
            rest = raw[j + 1 :]
            stripped = rest.lstrip(" \t")
            if stripped.startswith("\n"):
                # line-ending backslash: drop the newline and the whitespace after it
                k = len(raw) - len(stripped)
                while k < len(raw) and raw[k] in " \t\n":
                    k += 1
                j = k
                continue
            saved = self.i
            self.s, self.i, whole = raw, j, self.s
            try:
                out.append(self.escape())
                j = self.i
            finally:
                self.s, self.i = whole, saved
        return "".join(out)

    def array(self) -> list[Any]:
        self.i += 1
        out: list[Any] = []
        self.inline.add(id(out))
        while True:
            self.skip_blank()
            if self.peek() == "]":
                self.i += 1
                return out
            out.append(self.value())
            self.skip_blank()
            if self.peek() == ",":
                self.i += 1
                continue
            self.skip_blank()
            if self.peek() != "]":
                raise self.fail("expected ',' or ']' in an array")

    def inline_table(self) -> dict[str, Any]:
        self.i += 1
        out: dict[str, Any] = {}
        self.skip_ws()
        if self.peek() == "}":
            self.i += 1
            self.inline.add(id(out))
            return out
        while True:
            self.skip_ws()
            self.key_value(out)
            self.skip_ws()
            c = self.peek()
            self.i += 1
            if c == "}":
                self.inline.add(id(out))
                return out
            if c != ",":
                raise self.fail("expected ',' or '}' in an inline table")
