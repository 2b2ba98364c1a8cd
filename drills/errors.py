# SPDX-License-Identifier: Apache-2.0
"""Errors of the drill runner, and positioned diagnostics for drill files.

Exception tree::

    DrillError                 anything that stops a drill from running as written (exit 3)
    ├── DrillFileError         a drill file does not parse or validate; carries Diagnostics
    ├── TargetError            a target resolves to nothing, or outside the blast radius
    ├── CohortError            a cohort's subnets cannot be found in the GeoIP database
    └── AdminApiError          the admin API refused a call or could not be reached
        └── InjectionError     a fault could not be injected

A drill file's problems are the policy language's ``Diagnostic`` (positions, the source
line with a caret, did-you-mean hints: ``policies.errors``), rendered like a compiler's::

    drills/kill.yaml:12:11: error: load.cohorts[1].share: expected a number, got 'half'
       12 |     share: half
          |            ^^^^
      = hint: a share is a fraction of the load, e.g. 0.4
"""

from __future__ import annotations

from collections.abc import Sequence

from policies.errors import Diagnostic, did_you_mean

__all__ = ["AdminApiError", "CohortError", "Diagnostic", "DrillError", "DrillFileError",
           "InjectionError", "TargetError", "did_you_mean"]


class DrillError(Exception):
    """A drill cannot run as written; the runner's verdict is ``error`` (exit code 3)."""


class DrillFileError(DrillError):
    """A drill file failed to parse or validate; ``diagnostics`` lists every problem."""

    def __init__(self, diagnostics: Sequence[Diagnostic], text: str | None = None) -> None:
        self.diagnostics = tuple(diagnostics)
        self.text = text
        first = self.diagnostics[0] if self.diagnostics else None
        super().__init__(first.render({}) if first else "invalid drill file")

    def render(self) -> str:
        return "\n".join(d.render(self._sources(d)) for d in self.diagnostics)

    def _sources(self, diagnostic: Diagnostic) -> dict[str, str]:
        return {diagnostic.pos.file: self.text} if self.text is not None else {}


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
