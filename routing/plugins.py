# SPDX-License-Identifier: Apache-2.0
"""The plugin kinds both routing tiers are built from, generic over the request ``R`` a
tier decides for and the candidate ``C`` it chooses among (a regional backend view, a
global region name).

A profile runs them in this order: nominators widen a sample, filters drop candidates,
scorers value every candidate that is left, the picker orders them. The regional tier's
request path has three more extension points around a profile run, declared by the plugin
that fills them (``PluginSpec.roles``) rather than discovered: a request refiner (sizes a
request before it is routed), a hold policy (may keep a request waiting for a better
candidate than the pick) and a bind observer (told where a request went).

Plugins are pure over their inputs: they read the request and candidate values, never a
tier's mutable state, and never await.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from typing import Generic, Protocol, TypeVar

R = TypeVar("R", contravariant=True)
C = TypeVar("C")  # invariant: a filter hands candidates back
C_in = TypeVar("C_in", contravariant=True)
RequestT = TypeVar("RequestT")
CandidateT = TypeVar("CandidateT")

Column = tuple[Sequence[float] | None, float]  # a scorer's values (None: no data), its weight


class Kind(enum.Enum):
    """The kinds a plugin is registered under."""

    FILTER = "filter"
    SCORER = "scorer"
    PICKER = "picker"


class Role(enum.Enum):
    """What a plugin does beyond its kind, declared with it (``PluginSpec.roles``)."""

    NOMINATOR = "nominator"  # names candidates to consider whatever their load
    REFINER = "refiner"  # sizes a request before it is routed
    HOLD_POLICY = "hold policy"  # may hold a request for a better candidate than the pick
    BIND_OBSERVER = "bind observer"  # told which candidate each request was bound to
    WAITABLE = "waitable"  # a filter whose drops mean "not now" (wait), not "never"


class Filter(Protocol[R, C]):
    """Drops candidates. ``check`` returns None to keep ``candidate`` or the reason to drop
    it; ``keep`` is the same verdict over many candidates without reasons (what every
    request runs): the candidates ``check`` keeps, in order. ``note`` is what explain says
    about the filter as a whole for ``request`` ("" for nothing)."""

    name: str

    def check(self, request: R, candidate: C) -> str | None: ...

    def keep(self, request: R, candidates: Sequence[C]) -> Sequence[C]: ...

    def note(self, request: R) -> str: ...


class Scorer(Protocol[R, C_in]):
    """Values every candidate, higher is better, one value per candidate in order; None
    when it has no data for this request (the picker then goes without it)."""

    name: str

    def score(self, request: R, candidates: Sequence[C_in]) -> Sequence[float] | None: ...


class Picker(Protocol[C_in]):
    """Orders candidates by the scorers' columns: indices, best first. It may return only
    the first (the pick) when nothing needs the rest of the order. Never called empty."""

    name: str

    def order(self, candidates: Sequence[C_in], columns: Sequence[Column]) -> Sequence[int]: ...


class Nominator(Protocol[R, C_in]):
    """Names candidates that must join a sampled run whatever their load (affinity)."""

    def preferred(self, request: R, candidates: Sequence[C_in]) -> list[int]: ...


class Refiner(Protocol[RequestT]):
    """Sizes a request before it is routed (learning from it when ``learn``)."""

    def refine(self, request: RequestT, *, learn: bool = True) -> RequestT: ...

    def precedence_s(self, request: RequestT) -> float:
        """Seconds earlier than its arrival the request counts in a queue's order."""
        ...


class HoldPolicy(Protocol[R, C_in]):
    """May ask to hold a request rather than bind it to the pick now."""

    def acceptable(self, request: R, chosen: C_in) -> bool:
        """Cheap: True means bind now (``hold_s`` is not asked)."""
        ...

    def hold_s(self, request: R, chosen: C_in, eligible: Sequence[C_in]) -> float:
        """Seconds the request may wait for a better candidate (0: bind now)."""
        ...


class BindObserver(Protocol[R, C_in]):
    """Told, synchronously, each time a request is bound to a candidate."""

    def on_bind(self, request: R, candidate: C_in) -> None: ...


class FilterBase(Generic[RequestT, CandidateT]):
    """What most filters share: ``keep`` through ``check``, and no note."""

    name: str

    def check(self, request: RequestT, candidate: CandidateT) -> str | None:
        raise NotImplementedError

    def keep(self, request: RequestT, candidates: Sequence[CandidateT]) -> Sequence[CandidateT]:
        check = self.check
        return [c for c in candidates if check(request, c) is None]

    def note(self, request: RequestT) -> str:
        return ""
