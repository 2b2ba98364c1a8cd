# SPDX-License-Identifier: Apache-2.0
"""``not-tried`` filter: on a retry, drop the backends this request already failed on.

Reads ``RequestInfo.exclude``. No parameters.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from regions.balancer.types import BackendSnapshot, RequestInfo
from routing.plugins import FilterBase


@dataclass(frozen=True)
class NotTriedFilter(FilterBase[RequestInfo, BackendSnapshot]):
    name: str = "not-tried"

    def check(self, request: RequestInfo, backend: BackendSnapshot) -> str | None:
        if backend.name in request.exclude:
            return "already failed this request"
        return None

    def keep(
        self, request: RequestInfo, candidates: Sequence[BackendSnapshot]
    ) -> Sequence[BackendSnapshot]:
        exclude = request.exclude
        if not exclude:  # a first attempt: nothing to drop
            return candidates
        return [b for b in candidates if b.name not in exclude]
