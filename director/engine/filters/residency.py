"""Residency filter (hard): keep only regions every applicable residency rule allows.

Reads: the client's matched rules (``DecisionContext.rules``) and whether it was located.
- located client under rules R: allowed = intersection of r.allowed over R;
- located client under no rule: unrestricted (nothing dropped);
- unlocated client (not in the database, or no location at all): allowed = what the
  service's ``unknown-location`` answers, intersected with every rule's allowed set, since
  such a client may be any rule's client. This is the run-time twin of the policy proof.
Parameters: none.
"""

from __future__ import annotations

from director.engine.context import DecisionContext
from director.engine.types import Step
from policies.residency import allowed_for


def allowed_regions(ctx: DecisionContext) -> tuple[str, ...] | None:
    """The residency-allowed regions for this client, or None when unrestricted."""
    location = ctx.client.location
    return allowed_for(ctx.service, ctx.rules, location is not None and location.found)


def residency_filter(ctx: DecisionContext, candidates: tuple[str, ...],
                     allowed: tuple[str, ...] | None) -> tuple[tuple[str, ...], Step]:
    if allowed is None:
        return candidates, Step("filter", "residency", candidates,
                                note="no residency rule covers this client")
    location = ctx.client.location
    if location is None or not location.found:
        why = "client location unknown: only regions every rule allows (unknown-location)"
    else:
        why = "not allowed by residency " + ", ".join(r.name for r in ctx.rules)
    kept = tuple(r for r in candidates if r in allowed)
    dropped = {r: why for r in candidates if r not in allowed}
    rules = ", ".join(r.name for r in ctx.rules) or "unknown-location"
    return kept, Step("filter", "residency", kept, dropped, note=f"rules: {rules}")
