# SPDX-License-Identifier: Apache-2.0
"""``model`` filter: keep backends that serve the requested model.

Reads ``RequestInfo.model`` and ``BackendSnapshot.models``. A LoRA adapter is served
where its name is listed among the backend's models; a model the version probe refuses a
backend for is not (``BackendSnapshot.refused`` says why). No parameters.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from regions.balancer.types import BackendSnapshot, RequestInfo
from routing.plugins import FilterBase


@dataclass(frozen=True)
class ModelFilter(FilterBase[RequestInfo, BackendSnapshot]):
    name: str = "model"

    def check(self, request: RequestInfo, backend: BackendSnapshot) -> str | None:
        if request.model in backend.models:
            return None
        why = dict(backend.refused).get(request.model)
        if why is not None:
            return f"refused for model {request.model!r} by the version probe: {why}"
        return f"does not serve model {request.model!r}"

    def keep(
        self, request: RequestInfo, candidates: Sequence[BackendSnapshot]
    ) -> Sequence[BackendSnapshot]:
        model = request.model
        return [b for b in candidates if model in b.models]
