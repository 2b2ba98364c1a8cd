# SPDX-License-Identifier: Apache-2.0
"""``prefix-affinity`` scorer: prefer the backend that holds this prompt's KV cache.

For each candidate ``b``, with ``share_b`` the share of the request's prompt blocks that
``b`` holds from the first block on (``held``)::

    score_b = share_b      if b is within the load bound and has a free slot
            = 0            otherwise, or when the request has no whole block

Where ``share_b`` comes from:

- **precise**, for backends whose KV-event stream is intact (``precise``, a
  ``kv_event_index.KvEventIndex`` fed by their publishers): the blocks the server says it
  holds, keyed by the prompt's tokens (``RequestInfo.token_prefix``);
- **approximate**, for every other backend: the blocks the balancer sent it
  (``affinity_index.AffinityIndex``, aged out within its KV capacity), keyed by 64-character
  text blocks (``RequestInfo.prefix``). A backend whose stream breaks falls back to this at
  once.

Load bound (``load_bound``): ``in_flight_b + 1 <= ceil((1 + epsilon) * (total + 1) / n)``
over the ``n`` candidates, so affinity buys at most ``epsilon`` above the mean load; a
free slot means ``in_flight_b < cap_b`` (affinity never buys a wait at the server).

Reads the request's prefix keys, each candidate's ``in_flight``, ``cap`` and
``kv_tokens``, and the indexes; the approximate one is updated when a request is bound
(``on_bind``), the precise one by the event subscribers; scoring itself never writes.
Parameters: ``epsilon`` (default 0.25); ``free_slot`` (default 1; 0: the load bound alone,
even toward a backend whose slots are all taken).
"""

from __future__ import annotations

from collections.abc import Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field

from regions.balancer.scheduling.affinity_index import AffinityIndex
from regions.balancer.scheduling.kv_event_index import KvEventIndex
from regions.balancer.scheduling.load_bound import load_cap, within_bound
from regions.balancer.scheduling.name_positions import NamePositions
from regions.balancer.scheduling.prefix_blocks import PREFIX_BLOCK_IDS as PREFIX_BLOCK_TOKENS
from regions.balancer.types import BackendSnapshot, RequestInfo
from routing.params import Param, validate

PARAMS = (Param("epsilon", 0.25, low=0.0),
          Param("free_slot", 1.0, low=0.0, high=1.0, integer=True))


@dataclass
class PrefixAffinityScorer:
    epsilon: float = 0.25
    index: AffinityIndex = field(default_factory=AffinityIndex)
    precise: KvEventIndex | None = None  # set when the backends publish KV events
    free_slot: float = 1.0  # 1: affinity only toward a backend with a free slot
    name: str = "prefix-affinity"
    _positions: NamePositions = field(default_factory=NamePositions, repr=False, compare=False)

    def __post_init__(self) -> None:
        validate(self.name, PARAMS, self)

    def score(self, request: RequestInfo, candidates: Sequence[BackendSnapshot]) -> list[float]:
        held = self.held(request)
        if not held:
            return [0.0] * len(candidates)
        cap = load_cap(candidates, 1.0 + self.epsilon)
        return [held.get(b.name, 0.0) if self._eligible(b, cap) else 0.0 for b in candidates]

    def _eligible(self, b: BackendSnapshot, cap: int) -> bool:
        """Affinity may send ``b`` one more request: within the load bound and, unless
        ``free_slot`` is 0, with a slot free."""
        return (self.free_slot < 1 or b.in_flight < b.cap) and within_bound(b, cap)

    def held(self, request: RequestInfo) -> dict[str, float]:
        """Per backend, the share of the request's prompt blocks it holds from the first:
        from the KV-event index for backends whose event stream is intact, else from what
        the balancer sent where."""
        shares: dict[str, float] = {}
        if request.prefix:
            blocks = len(request.prefix)
            shares = {name: n / blocks for name, n in self.index.match(request.prefix).items()}
        precise = self.precise
        if precise is not None and (exact := precise.exact_backends):
            for name in exact:
                shares.pop(name, None)
            if request.token_prefix:
                blocks = len(request.token_prefix)
                for name, n in precise.match(request.token_prefix).items():
                    if name in exact:
                        shares[name] = n / blocks
        return shares

    def describe(self, request: RequestInfo,
                 candidates: Sequence[BackendSnapshot]) -> dict[str, dict[str, object]]:
        """Why each candidate scores what it does (for ``explain``): where its share of the
        prompt comes from, the blocks matched, its load and the bound."""
        held = self.held(request)
        cap = load_cap(candidates, 1.0 + self.epsilon)
        exact: AbstractSet[str] = (self.precise.exact_backends if self.precise is not None
                                   else frozenset())
        out: dict[str, dict[str, object]] = {}
        for b in candidates:
            precise = b.name in exact
            blocks = len(request.token_prefix if precise else request.prefix)
            share = held.get(b.name, 0.0)
            out[b.name] = {
                "index": "precise" if precise else "approximate",
                "matched_blocks": round(share * blocks),
                "prompt_blocks": blocks,
                "in_flight": b.in_flight,
                "load_bound": cap,
                "within_bound": within_bound(b, cap),
                "free_slot": b.in_flight < b.cap,
                "eligible": self._eligible(b, cap),
            }
        return out

    def preferred(self, request: RequestInfo, backends: Sequence[BackendSnapshot]) -> list[int]:
        """The positions of the backends holding some of the request's prefix (for the
        pipeline's sample in a large region)."""
        held = self.held(request)
        return self._positions.of(backends, held) if held else []

    def on_bind(self, request: RequestInfo, backend: BackendSnapshot) -> None:
        """The request was bound to ``backend``: it now holds the request's prefix (within
        its KV capacity, where its metrics publish it)."""
        if request.prefix:
            if backend.kv_tokens:
                self.index.set_capacity(backend.name, backend.kv_tokens // PREFIX_BLOCK_TOKENS)
            self.index.record(request.prefix, backend.name)
