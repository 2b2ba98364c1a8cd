"""Spillover: move a deterministic share of a hot region's clients to the next allowed region.

When the top-ranked region's live utilization ``u`` (load / capacity, from its balancer)
exceeds the service's spill threshold ``t``, the share of its clients moved is

    share = min(max_share, 1 - t / u)

which is the share that brings the region back to its threshold if clients load it evenly
(at 120% of a threshold of 100%: 1 - 1/1.2 = 16.7%). A client moves when
hash(client key, service, region) < share, so a given subnet keeps its answer while the load
band is unchanged, and subnets move in a stable order as load grows. The target is the first
allowed, healthy spill target (in ranking order) that is itself under the threshold.
Reads: utilization from the snapshot, the service's spillover block and the rules' overrides.
"""

from __future__ import annotations

from director.engine.context import DecisionContext, unit_hash
from director.engine.types import Step
from policies.residency import spill_targets


def spill_share(utilization: float, threshold: float, max_share: float) -> float:
    """The share of a region's clients that spills at this utilization."""
    if utilization <= threshold or utilization <= 0:
        return 0.0
    return min(max_share, 1.0 - threshold / utilization)


def spill_point(ctx: DecisionContext, ranked: tuple[str, ...]) -> tuple[str, float] | None:
    """(the hot primary region, the share of its clients that spills) for a client whose
    ranking is ``ranked``, or None when nothing spills; a client spills when
    ``spills(client key, service, point)``."""
    config = ctx.service.spillover
    if config is None or not ranked:
        return None
    utilization = ctx.snapshot.region(ranked[0]).utilization
    if utilization is None:
        return None
    share = spill_share(utilization, config.threshold, config.max_share)
    return (ranked[0], share) if share > 0 else None


def spill_hash(key: bytes, service: str, primary: str) -> float:
    """The client's hash that decides whether it spills from ``primary`` (< share)."""
    return unit_hash(key, service, primary, "spill")


def spillover(ctx: DecisionContext, ranked: tuple[str, ...], explain: bool = True
              ) -> tuple[tuple[str, ...], Step | None, bool]:
    """The ranking after spillover, its explain step (None unless ``explain``), and whether
    this client spilled."""
    moved, spilled, note, values = _spill(ctx, ranked)
    step = Step("spillover", "spillover", moved, note=note.format(**values)) if explain \
        else None
    return moved, step, spilled


_HEAD = "{primary} at {utilization:.0%} > {threshold:.0%}: spilling {share:.1%}"


def _spill(ctx: DecisionContext, ranked: tuple[str, ...]
           ) -> tuple[tuple[str, ...], bool, str, dict[str, object]]:
    """(ranking, spilled, the explain note's template and its values): the note is only
    formatted when explaining."""
    config = ctx.service.spillover
    if config is None or not ranked:
        return ranked, False, "no spillover configured", {}
    primary = ranked[0]
    utilization = ctx.snapshot.region(primary).utilization
    if utilization is None:
        return ranked, False, "{primary}: no live load reported", {"primary": primary}
    values: dict[str, object] = {"primary": primary, "utilization": utilization,
                                 "threshold": config.threshold}
    point = spill_point(ctx, ranked)
    if point is None:
        return ranked, False, "{primary} at {utilization:.0%} of capacity, under " \
                              "{threshold:.0%}", values
    share = values["share"] = point[1]
    h = values["hash"] = spill_hash(ctx.client_key, ctx.service.name, primary)
    if h >= share:
        return ranked, False, _HEAD + "; this client's hash {hash:.3f} stays", values
    allowed_targets = set(_targets(ctx, ranked))
    for target in ranked[1:]:
        if target not in allowed_targets:
            continue
        load = ctx.snapshot.region(target).utilization
        if load is not None and load >= config.threshold:
            continue
        values["target"] = target
        moved = (target, *[r for r in ranked if r != target])
        return moved, True, _HEAD + "; this client's hash {hash:.3f} moves to {target}", values
    return ranked, False, _HEAD + "; no allowed target under threshold, stays", values


def _targets(ctx: DecisionContext, ranked: tuple[str, ...]) -> set[str]:
    rules = ctx.rules
    if not rules:
        return set(spill_targets(ctx.service, None, ranked))
    allowed: set[str] | None = None
    for rule in rules:
        targets = set(spill_targets(ctx.service, rule, ranked))
        allowed = targets if allowed is None else allowed & targets
    return allowed or set()
