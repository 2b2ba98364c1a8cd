# SPDX-License-Identifier: Apache-2.0
"""``health`` filter: keep backends that are healthy, not ejected and not draining.

Reads ``BackendSnapshot.healthy`` (probes), ``ejected`` (outlier ejection in the data
path) and ``draining`` (operator). No parameters.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from regions.balancer.types import BackendSnapshot, RequestInfo
from routing.plugins import FilterBase


@dataclass(frozen=True)
class HealthFilter(FilterBase[RequestInfo, BackendSnapshot]):
    name: str = "health"

    def check(self, request: RequestInfo, backend: BackendSnapshot) -> str | None:
        if not backend.healthy:
            return "unhealthy"
        if backend.ejected:
            return "ejected after consecutive errors"
        if backend.draining:
            return "draining"
        return None

    def keep(
        self, request: RequestInfo, candidates: Sequence[BackendSnapshot]
    ) -> Sequence[BackendSnapshot]:
        return [b for b in candidates if b.healthy and not b.ejected and not b.draining]
