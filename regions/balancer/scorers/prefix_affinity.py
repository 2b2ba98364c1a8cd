# SPDX-License-Identifier: Apache-2.0
"""``prefix-affinity`` scorer: prefer the backend that likely holds this prompt's KV cache.

For each candidate ``b``, with ``held_b`` the leading blocks of the request's prefix that
``b`` was recently bound (``affinity_index.AffinityIndex.match``) and ``blocks`` the
request's block count (``RequestInfo.prefix``, see ``request_info``)::

    score_b = held_b / blocks       if b is within the load bound and has a free slot
            = 0                     otherwise, or when the request has no whole block

Load bound (``load_bound``): ``in_flight_b + 1 <= ceil((1 + epsilon) * (total + 1) / n)``
over the ``n`` candidates, so affinity buys at most ``epsilon`` above the mean load; a
free slot means ``in_flight_b < cap_b`` (affinity never buys a wait at the server).

Reads the request's prefix hashes, each candidate's ``in_flight`` and ``cap``, and the
index, which the engine updates when a request is bound (``on_bind``, wired by the
balancer to the dispatcher); scoring itself never writes. Parameters: ``epsilon`` (default
0.25), ``index`` (default: a fresh ``AffinityIndex``, capacity 65,536 blocks).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from regions.balancer.affinity_index import AffinityIndex
from regions.balancer.load_bound import load_cap, within_bound
from regions.balancer.name_positions import NamePositions
from regions.balancer.request_info import PREFIX_BLOCK_IDS as PREFIX_BLOCK_TOKENS
from regions.balancer.types import BackendSnapshot, RequestInfo
from routing.params import Param, validate

PARAMS = (Param("epsilon", 0.25, low=0.0),)


@dataclass
class PrefixAffinityScorer:
    epsilon: float = 0.25
    index: AffinityIndex = field(default_factory=AffinityIndex)
    name: str = "prefix-affinity"
    _positions: NamePositions = field(default_factory=NamePositions, repr=False, compare=False)

    def __post_init__(self) -> None:
        validate(self.name, PARAMS, self)

    def score(self, request: RequestInfo, candidates: Sequence[BackendSnapshot]) -> list[float]:
        prefix = request.prefix
        if not prefix:
            return [0.0] * len(candidates)
        held = self.index.match(prefix)
        if not held:
            return [0.0] * len(candidates)
        cap = load_cap(candidates, 1.0 + self.epsilon)
        blocks = len(prefix)
        return [
            held.get(b.name, 0) / blocks if b.in_flight < b.cap and within_bound(b, cap) else 0.0
            for b in candidates
        ]

    def preferred(self, request: RequestInfo, backends: Sequence[BackendSnapshot]) -> list[int]:
        """The positions of the backends holding some of the request's prefix (for the
        pipeline's sample in a large region)."""
        if not request.prefix:
            return []
        held = self.index.match(request.prefix)
        return self._positions.of(backends, held) if held else []

    def on_bind(self, request: RequestInfo, backend: BackendSnapshot) -> None:
        """The request was bound to ``backend``: it now holds the request's prefix (within
        its KV capacity, where its metrics publish it)."""
        if request.prefix:
            if backend.kv_tokens:
                self.index.set_capacity(backend.name, backend.kv_tokens // PREFIX_BLOCK_TOKENS)
            self.index.record(request.prefix, backend.name)
