# SPDX-License-Identifier: Apache-2.0
"""The answers of each declared revision, counted for a rollout's analysis.

The proxy counts every answer of a backend that declares a revision of the requested model
(``state.outcomes.Outcomes``: requests, errors, time to first token, inter-token latency,
finish reason, output tokens), by model and revision; the shared-state link publishes the
cumulative counts under this run's ``epoch`` (``Keys.outcomes``), and the rollout controller
takes their difference over its windows. Nothing is counted for undeclared revisions.
"""

from __future__ import annotations

import uuid

from state.outcomes import Outcomes, outcome_field


class RevisionOutcomes:
    """Cumulative ``Outcomes`` by (model, revision) since this balancer started."""

    def __init__(self) -> None:
        self.epoch = uuid.uuid4().hex[:12]
        self.by_revision: dict[tuple[str, str], Outcomes] = {}
        self.changed = False

    def record(self, model: str, revision: str, *, ok: bool, ttft_s: float | None = None,
               itl_s: float | None = None, finish: str | None = None,
               output_tokens: int | None = None) -> None:
        outcomes = self.by_revision.get((model, revision))
        if outcomes is None:
            outcomes = self.by_revision[(model, revision)] = Outcomes()
        outcomes.record(ok=ok, ttft_s=ttft_s, itl_s=itl_s, finish=finish,
                        output_tokens=output_tokens)
        self.changed = True

    def fields(self) -> dict[str, str]:
        """The hash fields to publish: one per revision seen, under this run's epoch."""
        return {outcome_field(m, r, self.epoch): o.to_json()
                for (m, r), o in self.by_revision.items()}
