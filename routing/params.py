# SPDX-License-Identifier: Apache-2.0
"""A plugin's declared parameters: each one's default, the values it refuses and the range
it is clamped into, checked once when a profile is built (never per request)."""

from __future__ import annotations

import difflib
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from routing.errors import RegistryError


@dataclass(frozen=True)
class Param:
    """One numeric parameter. Values outside ``[low, high]`` are refused, except ``off``
    (the value that switches the mechanism off, when it lies outside); accepted values are
    then clamped into ``clamp`` (a setting past the bound does no more than the bound and
    would only hurt), with a note saying so."""

    name: str
    default: float
    low: float = -math.inf
    high: float = math.inf
    off: float | None = None
    clamp: tuple[float, float] | None = None
    integer: bool = False
    above_low: bool = False  # ``low`` itself refused

    def describe_range(self) -> str:
        parts = []
        if self.off is not None:
            parts.append(f"{self.off:g} (off) or")
        if math.isinf(self.low) and math.isinf(self.high):
            parts.append("any number")
        elif math.isinf(self.high):
            parts.append(f"{'above' if self.above_low else 'at least'} {self.low:g}")
        elif math.isinf(self.low):
            parts.append(f"at most {self.high:g}")
        else:
            parts.append(f"from {self.low:g} to {self.high:g}")
        return " ".join(parts)

    def resolve(self, value: object) -> tuple[float, str | None]:
        """The value to use and a note if it was clamped; RegistryError if refused."""
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise RegistryError(f"{self.name}: a number, got {value!r}")
        number = float(value)
        if math.isnan(number):
            raise RegistryError(f"{self.name}: a number, got NaN")
        if self.integer and number != int(number):
            raise RegistryError(f"{self.name}: a whole number, got {value!r}")
        if number == self.off:
            return number, None
        if not self.low <= number <= self.high or (self.above_low and number == self.low):
            raise RegistryError(f"{self.name}: {self.describe_range()}, got {value!r}")
        if self.clamp is not None:
            lo, hi = self.clamp
            clamped = min(hi, max(lo, number))
            if clamped != number:
                return clamped, f"{self.name} {number:g} clamped to {clamped:g}"
        return number, None


def validate(owner: str, declared: Sequence[Param], plugin: object) -> None:
    """Refuse a plugin built directly (as tests and benchmarks do) whose attributes named by
    ``declared`` the declaration refuses: the plugin's own guard, from the same declaration
    the registry checks at load."""
    for param in declared:
        try:
            param.resolve(getattr(plugin, param.name))
        except RegistryError as exc:
            raise RegistryError(f"{owner}: {exc}") from None


def resolve_params(
    declared: Sequence[Param], given: Mapping[str, object]
) -> tuple[dict[str, float], tuple[str, ...]]:
    """Keyword arguments for the factory (only those given, checked and clamped) and the
    clamping notes; RegistryError names an unknown parameter and the nearest known one."""
    by_name = {p.name: p for p in declared}
    values: dict[str, float] = {}
    notes: list[str] = []
    for name, value in given.items():
        param = by_name.get(name)
        if param is None:
            known = ", ".join(sorted(by_name)) or "none"
            near = difflib.get_close_matches(name, list(by_name), n=1)
            hint = f"; did you mean {near[0]!r}?" if near else ""
            raise RegistryError(f"unknown parameter {name!r} (known: {known}){hint}")
        resolved, note = param.resolve(value)
        values[name] = int(resolved) if param.integer else resolved
        if note:
            notes.append(note)
    return values, tuple(notes)
