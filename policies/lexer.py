"""Tokens of the policy language.

A word is any run of characters other than white space and ``{ } ; # "``, so host names,
addresses (``::1``), URLs, paths and numbers with units (``30s``, ``85%``) are single words.
Strings are double-quoted with ``\\"`` and ``\\\\`` escapes. ``#`` starts a comment to the end
of the line. Newlines end directives, as ``;`` does.
"""

from __future__ import annotations

import enum
from collections.abc import Iterator
from dataclasses import dataclass

from policies.errors import Diagnostic
from policies.model import SourcePos


class Kind(enum.Enum):
    WORD = "word"
    STRING = "string"
    LBRACE = "'{'"
    RBRACE = "'}'"
    SEMI = "';'"
    NEWLINE = "end of line"
    COMMENT = "comment"
    EOF = "end of file"


@dataclass(frozen=True)
class Token:
    kind: Kind
    text: str  # for strings: the unescaped value
    pos: SourcePos
    width: int  # columns spanned in the source

    def describe(self) -> str:
        if self.kind in (Kind.WORD, Kind.STRING):
            return f"'{self.text}'"
        return self.kind.value


_SPECIAL = set('{};#"')
_PUNCT = {"{": Kind.LBRACE, "}": Kind.RBRACE, ";": Kind.SEMI}


def tokenize(text: str, filename: str, diagnostics: list[Diagnostic]) -> Iterator[Token]:
    """Yield the tokens of ``text``; lexical errors go to ``diagnostics`` and are skipped."""
    line_no = 0
    for line_no, line in enumerate(text.split("\n"), start=1):
        i = 0
        n = len(line)
        while i < n:
            ch = line[i]
            if ch.isspace():  # any white space, also U+00A0 or U+2028 pasted from elsewhere
                i += 1
                continue
            pos = SourcePos(filename, line_no, i + 1)
            if ch == "#":
                yield Token(Kind.COMMENT, line[i:].rstrip(), pos, n - i)
                break
            if ch in _PUNCT:
                yield Token(_PUNCT[ch], ch, pos, 1)
                i += 1
                continue
            if ch == '"':
                value, end, closed = _read_string(line, i)
                if not closed:
                    diagnostics.append(
                        Diagnostic(
                            pos,
                            "unterminated string",
                            length=n - i,
                            expected="a closing '\"' on the same line",
                        )
                    )
                yield Token(Kind.STRING, value, pos, end - i)
                i = end
                continue
            start = i
            while i < n and line[i] not in _SPECIAL and not line[i].isspace():
                i += 1
            yield Token(Kind.WORD, line[start:i], pos, i - start)
        yield Token(Kind.NEWLINE, "\n", SourcePos(filename, line_no, len(line) + 1), 1)
    yield Token(Kind.EOF, "", SourcePos(filename, max(line_no, 1), 1), 1)


def _read_string(line: str, start: int) -> tuple[str, int, bool]:
    out: list[str] = []
    i = start + 1
    while i < len(line):
        ch = line[i]
        if ch == "\\" and i + 1 < len(line):
            out.append(line[i + 1])
            i += 2
            continue
        if ch == '"':
            return "".join(out), i + 1, True
        out.append(ch)
        i += 1
    return "".join(out), len(line), False


def quote(value: str) -> str:
    """The source form of a string value."""
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
