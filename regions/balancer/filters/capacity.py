# SPDX-License-Identifier: Apache-2.0
"""``capacity`` filter: keep backends with a free concurrency slot (late binding).

A backend is full when ``in_flight >= cap`` (``cap`` already reduced by slow start).
When this filter drops the last candidate the request waits in the region queue, in the
balancer, until a slot frees: it is bound to a backend only when that backend can start
it, rather than queued behind a slow GPU. No parameters.
"""

from __future__ import annotations

from dataclasses import dataclass

from regions.balancer.types import BackendSnapshot, RequestInfo

NAME = "capacity"


@dataclass(frozen=True)
class CapacityFilter:
    name: str = NAME

    def check(self, request: RequestInfo, backend: BackendSnapshot) -> str | None:
        if backend.in_flight < backend.cap:
            return None
        return f"full ({backend.in_flight}/{backend.cap} in flight)"
