"""Residency filter (hard): keep only regions every applicable residency rule allows.

Reads: the residency-allowed regions of the decision context (``DecisionContext.allowed``,
computed once when the context is built, from the client's matched rules and whether it was
located):
- located client under rules R (those that surely or may hold it,
  ``policies.matching.coverage``): allowed = intersection of r.allowed over R;
- located client under no rule: unrestricted (nothing dropped);
- unlocated client (not in the database, no location at all, a code nobody knows, or a
  partial location under ``partial-location unknown``): allowed = what the service's
  ``unknown-location`` answers, intersected with every rule's allowed set, since such a
  client may be any rule's client. This is the run-time twin of the policy proof.
Explain note: the rules that applied ("rules: eu-gdpr"), or that none covers the client.
Parameters: none.
"""

from __future__ import annotations

from collections.abc import Sequence

from director.engine.context import DecisionContext
from routing import FilterBase


class ResidencyFilter(FilterBase[DecisionContext, str]):
    name = "residency"

    def check(self, request: DecisionContext, candidate: str) -> str | None:
        allowed = request.allowed_set
        if allowed is None or candidate in allowed:
            return None
        if not request.located:
            return "client location unknown: only regions every rule allows (unknown-location)"
        return "not allowed by residency " + ", ".join(r.name for r in request.rules)

    def keep(self, request: DecisionContext, candidates: Sequence[str]) -> Sequence[str]:
        allowed = request.allowed_set
        if allowed is None:
            return candidates
        return [c for c in candidates if c in allowed]

    def note(self, request: DecisionContext) -> str:
        if request.allowed is None:
            return "no residency rule covers this client"
        if not request.located:
            return "rules: unknown-location"
        names = [r.name + (" (may hold)" if r in request.partial else "")
                 for r in request.rules]
        return "rules: " + ", ".join(names)
