# SPDX-License-Identifier: Apache-2.0
"""``session-affinity`` scorer: keep a session on one backend, within a load bound.

Rendezvous (highest random weight) hashing over backend names: for the request's session
``s`` (``RequestInfo.session``: header ``x-director-session``, else the body's ``user``)
each candidate ``b`` gets ``w_b = mix64(H(s) xor H(b.name))`` (``H``: 64-bit BLAKE2b,
stable across processes and restarts; ``mix64``: the SplitMix64 finalizer). The chosen
backend is the highest ``w_b`` among candidates within the load bound (``load_bound``)::

    in_flight_b + 1 <= ceil(c * (total + 1) / n)         (c default 1.25)

    score_b = 1 for the chosen backend, 0 for the others, 0 for all without a session

When a backend leaves the candidates only the sessions it held move (each to its next
highest weight); an overloaded backend's sessions spill to their next choice until it is
back within the bound. Reads ``in_flight`` and ``name``. Parameter: ``c`` (default 1.25,
at least 1).
"""

from __future__ import annotations

import functools
import hashlib
from collections.abc import Sequence
from dataclasses import dataclass, field

from regions.balancer.scheduling.load_bound import load_cap, within_bound
from regions.balancer.scheduling.name_positions import NamePositions
from regions.balancer.types import BackendSnapshot, RequestInfo
from routing.params import Param, validate

_MASK = (1 << 64) - 1
PREFERRED = 3  # a session's top backends offered to a sampling pipeline (spill included)
_PREFERRED_MEMO = 65_536
PARAMS = (Param("c", 1.25, low=1.0),)


def _h64(text: str) -> int:
    return int.from_bytes(hashlib.blake2b(text.encode(), digest_size=8).digest(), "big")


_name_hash = functools.lru_cache(maxsize=4096)(_h64)


def _mix64(x: int) -> int:
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & _MASK
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & _MASK
    return x ^ (x >> 31)


def rendezvous_weight(session: str, backend: str) -> int:
    """The weight of ``backend`` for ``session`` (higher wins)."""
    return _mix64(_h64(session) ^ _name_hash(backend))


@dataclass(frozen=True)
class SessionAffinityScorer:
    c: float = 1.25
    name: str = "session-affinity"
    _positions: NamePositions = field(default_factory=NamePositions, repr=False, compare=False)
    _top: dict[str, tuple[int, list[str]]] = field(
        default_factory=dict, repr=False, compare=False
    )  # session -> (positions generation, its highest-weight backend names)

    def __post_init__(self) -> None:
        validate(self.name, PARAMS, self)

    def preferred(self, request: RequestInfo, backends: Sequence[BackendSnapshot]) -> list[int]:
        """The positions of the session's ``PREFERRED`` highest-weight backends of the
        whole region (for the pipeline's sample in a large region); a walk over every
        backend once per session and region layout, then a memo."""
        session = request.session
        if not session:
            return []
        positions = self._positions
        positions.sync(backends)
        memo = self._top.get(session)
        if memo is None or memo[0] != positions.generation:
            key = _h64(session)
            ranked = sorted(backends, key=lambda b: _mix64(key ^ _name_hash(b.name)),
                            reverse=True)
            if len(self._top) >= _PREFERRED_MEMO:
                self._top.clear()
            memo = self._top[session] = (positions.generation,
                                         [b.name for b in ranked[:PREFERRED]])
        return positions.of(backends, memo[1])

    def score(self, request: RequestInfo, candidates: Sequence[BackendSnapshot]) -> list[float]:
        scores = [0.0] * len(candidates)
        if not request.session or not candidates:
            return scores
        key = _h64(request.session)
        cap = load_cap(candidates, self.c)
        best, best_weight = -1, -1
        for i, b in enumerate(candidates):
            if within_bound(b, cap):
                weight = _mix64(key ^ _name_hash(b.name))
                if weight > best_weight:
                    best, best_weight = i, weight
        scores[best] = 1.0  # some candidate is always within the bound when c >= 1
        return scores
