"""Weighted scorer: split clients across regions in proportion to region ``weight``.

Weighted rendezvous hashing: each region gets -weight / ln(u), u = hash(client key, region)
in (0, 1); the highest wins, so region r wins for a share weight(r) / sum(weights) of client
keys, and a client key keeps its region while the candidate set does not change. Scores are
normalised by the maximum; None when every candidate weighs 0. Reads: region weights, the
client key (affinity). Scope: the client's bucket when the key is the client's network.
Parameters: none.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from director.engine.context import DecisionContext, unit_hash
from director.engine.inputs import Input
from director.engine.scorers import Scores


class RegionWeightScorer:
    name = "weighted"
    reads = frozenset({Input.CLIENT_HASH})

    def score(self, request: DecisionContext, candidates: Sequence[str]) -> Scores | None:
        policy, key, service = request.policy, request.client_key, request.service.name
        raw: list[float] = []
        for name in candidates:
            weight = policy.region(name).weight
            u = max(unit_hash(key, service, name), 1e-12)
            raw.append(-weight / math.log(u) if weight > 0 else 0.0)
        top = max(raw, default=0.0)
        if top <= 0:
            return None
        note = "weights " + ", ".join(f"{n} {policy.region(n).weight:g}" for n in candidates)
        scope = request.client.bucket.prefixlen if request.key_is_client else 0
        return Scores([value / top for value in raw], note, scope)
