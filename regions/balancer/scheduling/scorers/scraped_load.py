# SPDX-License-Identifier: Apache-2.0
"""``scraped-load`` scorer: prefer backends whose own metrics report a freer KV cache and a
shorter queue.

For each candidate ``b``::

    cache_b = 1 - clamp(kv_usage_b, 0, 1)                   1: empty KV cache, 0: full
    queue_b = queue_scale / (queue_scale + waiting_b)       1: nothing waiting, 0.5 at scale
    score_b = (kv_weight * cache_b + queue_weight * queue_b) / (kv_weight + queue_weight)

Reads ``BackendSnapshot.kv_usage`` and ``waiting``: what the GPU server's ``/metrics`` said
(``vllm:kv_cache_usage_perc``, ``vllm:num_requests_waiting``), scraped by the workers into
the shared state and followed by ``shared_state``; they lag by a few seconds, so this scorer
is meant beside the in-band ones (``outstanding-work``, ``queue-depth``), with a lower
weight. A full KV cache makes a server queue or preempt new sequences whatever its free
batch slots say.

Unknown values (no scrape yet, stale, or an engine without a cache metric) are neutral: a
missing term takes the median of that term over the candidates that have it (1 when none
has), so a backend is neither favoured nor avoided for not being scraped. Parameters:
``kv_weight`` (1.0), ``queue_weight`` (1.0), ``queue_scale`` (4.0 waiting requests).
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from regions.balancer.errors import BalancerConfigError
from regions.balancer.types import BackendSnapshot, RequestInfo
from routing.params import Param, validate

PARAMS = (
    Param("kv_weight", 1.0, low=0.0),
    Param("queue_weight", 1.0, low=0.0),
    Param("queue_scale", 4.0, low=0.0, above_low=True),
)


def _neutral_filled(values: list[float | None]) -> list[float]:
    """Unknown values replaced by the median of the known ones (1.0 if none is known)."""
    known = [v for v in values if v is not None]
    neutral = statistics.median(known) if known else 1.0
    return [neutral if v is None else v for v in values]


@dataclass(frozen=True)
class ScrapedLoadScorer:
    name: str = "scraped-load"
    kv_weight: float = 1.0
    queue_weight: float = 1.0
    queue_scale: float = 4.0

    def __post_init__(self) -> None:
        validate(self.name, PARAMS, self)
        if self.kv_weight + self.queue_weight <= 0:
            raise BalancerConfigError(
                f"{self.name}: kv_weight, queue_weight: must not both be 0"
            )

    def score(self, request: RequestInfo, candidates: Sequence[BackendSnapshot]) -> list[float]:
        cache = _neutral_filled(
            [
                None if b.kv_usage is None else 1.0 - min(1.0, max(0.0, b.kv_usage))
                for b in candidates
            ]
        )
        scale = self.queue_scale
        queue = _neutral_filled(
            [
                None if b.waiting is None else scale / (scale + max(0.0, b.waiting))
                for b in candidates
            ]
        )
        total = self.kv_weight + self.queue_weight
        return [
            (self.kv_weight * c + self.queue_weight * q) / total
            for c, q in zip(cache, queue, strict=True)
        ]
