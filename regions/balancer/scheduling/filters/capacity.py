# SPDX-License-Identifier: Apache-2.0
"""``capacity`` filter: keep backends that may take one more request (late binding).

A backend is full when ``in_flight >= limit``, ``limit = cap + prefetch``: its learned
capacity (``cap``, reduced by slow start; see ``regions.balancer.scheduling.capacity``) plus the few
requests allowed to wait at the server so that its batch refills the moment a sequence
ends. While its capacity is unknown the limit is unbounded: this filter never holds a
request for a backend that may have room. When it drops the last candidate the request
waits in the region queue, in the balancer, until a slot frees: it is bound to a backend
only when that backend can start it soon, rather than queued behind a slow GPU. No
parameters.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from regions.balancer.types import BackendSnapshot, RequestInfo
from routing.plugins import FilterBase

NAME = "capacity"


@dataclass(frozen=True)
class CapacityFilter(FilterBase[RequestInfo, BackendSnapshot]):
    name: str = NAME

    def check(self, request: RequestInfo, backend: BackendSnapshot) -> str | None:
        if backend.in_flight < backend.limit:
            return None
        return f"full ({backend.in_flight}/{backend.limit} in flight)"

    def keep(
        self, request: RequestInfo, candidates: Sequence[BackendSnapshot]
    ) -> Sequence[BackendSnapshot]:
        return [b for b in candidates if b.in_flight < b.cap + b.prefetch]  # b.limit, inlined
