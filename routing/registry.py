# SPDX-License-Identifier: Apache-2.0
"""The plugin registry: one ``PluginSpec`` per (kind, name), filled once at start-up, then
frozen.

A spec says what a plugin is (its kind and the roles it also fills), how to build it (its
factory) and what it may be given (its declared ``Param``s). ``create`` checks the given
parameters against the declaration, clamps them, and returns the plugin with its spec, so
the profile knows its roles without inspecting the object.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from routing.errors import RegistryError
from routing.params import Param, resolve_params
from routing.plugins import Kind, Role


@dataclass(frozen=True)
class PluginSpec:
    """A plugin as registered: ``factory(**params, **context)`` builds it."""

    kind: Kind
    name: str
    factory: Callable[..., Any]
    params: tuple[Param, ...] = ()
    roles: frozenset[Role] = frozenset()


@dataclass(frozen=True)
class Built:
    """A plugin built from its spec, with notes on the parameters clamped at load."""

    plugin: Any
    spec: PluginSpec
    notes: tuple[str, ...] = ()

    def has(self, role: Role) -> bool:
        return role in self.spec.roles


class Registry:
    """Specs by ``(kind, name)``; read-only once frozen."""

    def __init__(self) -> None:
        self._specs: dict[tuple[Kind, str], PluginSpec] = {}
        self._frozen = False

    def register(self, spec: PluginSpec) -> None:
        if self._frozen:
            raise RegistryError(f"frozen; cannot register {spec.kind.value} {spec.name!r}")
        if (spec.kind, spec.name) in self._specs:
            raise RegistryError(f"{spec.kind.value} {spec.name!r} is already registered")
        self._specs[(spec.kind, spec.name)] = spec

    def freeze(self) -> None:
        self._frozen = True

    @property
    def frozen(self) -> bool:
        return self._frozen

    def spec(self, kind: Kind, name: str) -> PluginSpec:
        try:
            return self._specs[(kind, name)]
        except KeyError:
            known = self.names(kind)
            near = difflib.get_close_matches(name, known, n=1)
            hint = f"; did you mean {near[0]!r}?" if near else ""
            raise RegistryError(
                f"unknown {kind.value} {name!r} (known: {', '.join(known)}){hint}"
            ) from None

    def create(self, kind: Kind, name: str, params: Mapping[str, object] | None = None,
               **context: Any) -> Built:
        """The plugin ``name`` built with ``params`` (checked against its declaration and
        clamped) and ``context`` (what the tier hands every plugin of the kind, e.g. a
        picker's random generator)."""
        spec = self.spec(kind, name)
        try:
            values, notes = resolve_params(spec.params, params or {})
        except RegistryError as exc:
            raise RegistryError(f"{kind.value} {name!r}: {exc}") from None
        try:
            plugin = spec.factory(**values, **context)
        except (TypeError, ValueError) as exc:  # a combination the declaration cannot state
            raise RegistryError(f"{kind.value} {name!r}: {exc}") from None
        return Built(plugin, spec, notes)

    def names(self, kind: Kind) -> list[str]:
        return sorted(n for k, n in self._specs if k is kind)

    def specs(self) -> list[PluginSpec]:
        return list(self._specs.values())
