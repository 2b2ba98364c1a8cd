# SPDX-License-Identifier: Apache-2.0
"""Errors of the drill runner, and positioned diagnostics for drill files.

Exception tree::

    DrillError                 anything that stops a drill from running as written (exit 3)
    ├── DrillFileError         a drill file does not parse or validate; carries Diagnostics
    ├── TargetError            a target resolves to nothing, or outside the blast radius
    ├── CohortError            a cohort's subnets cannot be found in the GeoIP database
    └── AdminApiError          the admin API refused a call or could not be reached
        └── InjectionError     a fault could not be injected

A ``Diagnostic`` renders like a compiler's::

    drills/kill.yaml:12:11: error: load.cohorts[1].share: expected a number, got 'half'
       12 |     share: half
          |            ^^^^
      = hint: a share is a fraction of the load, e.g. 0.4
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass


class DrillError(Exception):
    """A drill cannot run as written; the runner's verdict is ``error`` (exit code 3)."""


@dataclass(frozen=True)
class Diagnostic:
    """One problem in a drill file: where (1-based line and column), what, and a hint."""

    file: str
    line: int
    col: int
    message: str
    length: int = 1
    hint: str | None = None

    def render(self, text: str | None = None) -> str:
        """``file:line:col: error: message``, the source line with a caret, and the hint."""
        head = f"{self.file}:{self.line}:{self.col}: error: {self.message}"
        out = [head]
        if text is not None and self.line > 0:
            lines = text.split("\n")
            if self.line <= len(lines):
                raw = lines[self.line - 1].rstrip("\r").expandtabs(4)
                number = str(self.line)
                out.append(f" {number} | {raw}")
                width = max(1, min(self.length, max(1, len(raw) - self.col + 1)))
                out.append(f" {' ' * len(number)} | {' ' * (self.col - 1)}{'^' * width}")
        if self.hint:
            out.append(f"  = hint: {self.hint}")
        return "\n".join(out)


class DrillFileError(DrillError):
    """A drill file failed to parse or validate; ``diagnostics`` lists every problem."""

    def __init__(self, diagnostics: Sequence[Diagnostic], text: str | None = None) -> None:
        self.diagnostics = tuple(diagnostics)
        self.text = text
        first = self.diagnostics[0] if self.diagnostics else None
        super().__init__(first.render() if first else "invalid drill file")

    def render(self) -> str:
        return "\n".join(d.render(self.text) for d in self.diagnostics)


class TargetError(DrillError):
    """A fault's target matched nothing (with ``on_empty: fail``) or left the blast radius."""


class CohortError(DrillError):
    """A cohort's client subnets could not be found in the GeoIP database."""


class AdminApiError(DrillError):
    """The admin API answered an error or could not be reached."""

    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


class InjectionError(AdminApiError):
    """A fault could not be injected (never reported as passed)."""


def did_you_mean(word: str, choices: Iterable[str]) -> str | None:
    """A hint naming the closest of ``choices``, or None when nothing is close."""
    close = difflib.get_close_matches(word, list(choices), n=1, cutoff=0.6)
    return f"did you mean '{close[0]}'?" if close else None
