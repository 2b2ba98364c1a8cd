# SPDX-License-Identifier: Apache-2.0
"""``least-requests`` scorer: prefer backends with fewer requests in flight, in absolute
numbers (HAProxy's ``leastconn``, Envoy's ``LEAST_REQUEST``).

For each candidate ``b``: ``score_b = 1 - in_flight_b / (max_c in_flight_c + 1)``, in
(0, 1]: the fewest in flight scores highest, and equal counts tie (the picker breaks ties
at random). Unlike ``queue-depth`` it does not divide by the backend's capacity: a server
with 256 sequence slots does not decode 16 times faster than one with 16 (each decode step
slows as its batch grows), so filling each in proportion to its slots overloads the large
ones (measured on the routing matrix: ``docs/research/balancer-results.md``). Reads the
balancer's own in-band count. No parameters.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from regions.balancer.types import BackendSnapshot, RequestInfo


@dataclass(frozen=True)
class LeastRequestsScorer:
    name: str = "least-requests"

    def score(self, request: RequestInfo, candidates: Sequence[BackendSnapshot]) -> list[float]:
        if not candidates:
            return []
        scale = 1.0 + max(b.in_flight for b in candidates)
        return [1.0 - max(0, b.in_flight) / scale for b in candidates]
