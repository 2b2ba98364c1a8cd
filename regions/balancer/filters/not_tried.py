# SPDX-License-Identifier: Apache-2.0
"""``not-tried`` filter: on a retry, drop the backends this request already failed on.

Reads ``RequestInfo.exclude``. No parameters.
"""

from __future__ import annotations

from dataclasses import dataclass

from regions.balancer.types import BackendSnapshot, RequestInfo


@dataclass(frozen=True)
class NotTriedFilter:
    name: str = "not-tried"

    def check(self, request: RequestInfo, backend: BackendSnapshot) -> str | None:
        if backend.name in request.exclude:
            return "already failed this request"
        return None
