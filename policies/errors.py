"""Diagnostics for policy files, rendered like a compiler's.

Exception tree::

    PolicyError            a policy could not be loaded; carries every Diagnostic found
    DeadlineExceeded       checking a policy ran past its deadline (``policies.deadline``);
                           the loader and the gate turn it into a Diagnostic

A ``Diagnostic`` (an error, or a warning from ``policies.lint``) renders as::

    global.dp:12:11: error: unknown region 'eu-wst'
       12 |     allow eu-wst eu-central
          |           ^^^^^^
      = expected: a region declared in this policy
      = hint: did you mean 'eu-west'?
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from policies.model import SourcePos

TAB = 4  # columns a tab takes when a source line is shown


@dataclass(frozen=True)
class Diagnostic:
    pos: SourcePos
    message: str
    length: int = 1  # how many columns the caret underlines
    expected: str | None = None
    hint: str | None = None
    severity: str = "error"  # or "warning": reported, never blocks loading

    def render(self, sources: Mapping[str, str]) -> str:
        """The diagnostic with its source line and a caret, given file name -> text."""
        text = sources.get(self.pos.file)
        return self.render_lines(None if text is None else text.split("\n"))

    def render_lines(self, source_lines: Sequence[str] | None) -> str:
        """``render``, given the lines of its file (split on "\\n", as the lexer counts
        them), so that many diagnostics of one file split it once."""
        where = str(self.pos) if self.pos.line > 0 else self.pos.file  # 0: the whole file
        head = f"{where}: {self.severity}: {self.message}"
        lines = [head]
        if source_lines is not None and 0 < self.pos.line <= len(source_lines):
            raw = source_lines[self.pos.line - 1].rstrip("\r")
            # tabs are shown as 4 columns; the caret follows them
            before = raw[: self.pos.col - 1]
            span = raw[self.pos.col - 1: self.pos.col - 1 + max(1, self.length)]
            start = len(before.expandtabs(TAB))
            width = max(1, len((before + span).expandtabs(TAB)) - start)
            number = str(self.pos.line)
            gutter = " " * len(number)
            lines.append(f" {number} | {raw.expandtabs(TAB)}")
            caret = " " * start + "^" * width
            lines.append(f" {gutter} | {caret}")
        if self.expected:
            lines.append(f"  = expected: {self.expected}")
        if self.hint:
            lines.append(f"  = hint: {self.hint}")
        return "\n".join(lines)

    def as_dict(self) -> dict[str, object]:
        return {
            "file": self.pos.file,
            "line": self.pos.line,
            "column": self.pos.col,
            "severity": self.severity,
            "message": self.message,
            "expected": self.expected,
            "hint": self.hint,
        }


class PolicyError(Exception):
    """A policy failed to parse, compile or validate. ``diagnostics`` holds all problems."""

    def __init__(self, diagnostics: Sequence[Diagnostic], sources: Mapping[str, str]):
        self.diagnostics = tuple(sorted(diagnostics, key=lambda d: d.pos))
        self.sources = dict(sources)
        super().__init__(self.render())

    def render(self) -> str:
        split: dict[str, list[str] | None] = {}
        for d in self.diagnostics:
            if d.pos.file not in split:
                text = self.sources.get(d.pos.file)
                split[d.pos.file] = None if text is None else text.split("\n")
        return "\n\n".join(d.render_lines(split[d.pos.file]) for d in self.diagnostics)


class DeadlineExceeded(Exception):
    """Checking a policy took longer than ``seconds``; ``doing``: what was under way, at
    ``pos`` when it is one directive's work."""

    def __init__(self, seconds: float, doing: str, pos: SourcePos | None = None) -> None:
        self.seconds = seconds
        self.doing = doing
        self.pos = pos
        super().__init__(f"checking the policy took longer than its deadline of "
                         f"{seconds:g} s (while {doing})")


def did_you_mean(word: str, choices: Iterable[str]) -> str | None:
    """A hint naming the closest choice, if one is close enough to be a likely typo."""
    by_folded = {choice.casefold(): choice for choice in choices}
    close = difflib.get_close_matches(word.casefold(), list(by_folded), n=1, cutoff=0.6)
    return f"did you mean '{by_folded[close[0]]}'?" if close else None


def one_of(choices: Iterable[str]) -> str:
    listed = [f"'{c}'" for c in choices]
    if len(listed) == 1:
        return listed[0]
    return "one of " + ", ".join(listed)
