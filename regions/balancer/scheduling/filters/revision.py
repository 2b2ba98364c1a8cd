# SPDX-License-Identifier: Apache-2.0
"""``revision`` filter: keep the backends that serve the request's revision of its model.

Reads ``RequestInfo.revision`` (set when the model has a split: ``revision_split``, by the
``revision`` request stage) and ``BackendSnapshot.revisions``. A request without one keeps
every candidate. No parameters.
"""

from __future__ import annotations

from dataclasses import dataclass

from regions.balancer.types import BackendSnapshot, RequestInfo
from routing.plugins import FilterBase


@dataclass(frozen=True)
class RevisionFilter(FilterBase[RequestInfo, BackendSnapshot]):
    name: str = "revision"

    def check(self, request: RequestInfo, backend: BackendSnapshot) -> str | None:
        if request.revision is None:
            return None
        served = backend.revision_of(request.model)
        if served == request.revision:
            return None
        return f"serves revision {served!r} of {request.model}, not {request.revision!r}"
