"""Weighted scorer: split clients across regions in proportion to region ``weight``.

Weighted rendezvous hashing: each region gets -weight / ln(u), u = hash(client key, region)
in (0, 1); the highest wins, so region r wins for a share weight(r) / sum(weights) of client
keys, and a client key keeps its region while the candidate set does not change. Scores are
normalised by the maximum. Reads: region weights, the client key (affinity). Parameters: none.
"""

from __future__ import annotations

import math

from director.engine.context import DecisionContext, unit_hash
from director.engine.scorers import Scores


def weighted_scores(ctx: DecisionContext, candidates: tuple[str, ...]) -> Scores | None:
    raw: dict[str, float] = {}
    for name in candidates:
        weight = ctx.policy.region(name).weight
        u = max(unit_hash(ctx.client_key, ctx.service.name, name), 1e-12)
        raw[name] = -weight / math.log(u) if weight > 0 else 0.0
    top = max(raw.values(), default=0.0)
    if top <= 0:
        return None
    values = {name: value / top for name, value in raw.items()}
    note = "weights " + ", ".join(f"{n} {ctx.policy.region(n).weight:g}" for n in candidates)
    return Scores(values, note, ctx.client.bucket.prefixlen if ctx.key_is_client else 0)
