# SPDX-License-Identifier: Apache-2.0
"""What a balancer says of itself: ``explain`` (why a request would go where, as data) and
``state`` (the backends, the queue, the shared state's link), for the admin listener."""

from __future__ import annotations

from typing import Any

from regions.balancer.config import BalancerConfig
from regions.balancer.degrade.ladder import DegradeLadder
from regions.balancer.http.parse import Parse
from regions.balancer.http.request_info import parse_request
from regions.balancer.http.revision_choice import ChooseRevision
from regions.balancer.scheduling.admission import Dispatcher
from regions.balancer.scheduling.backends import BackendPool
from regions.balancer.scheduling.capacity import UNBOUNDED, Capacity
from regions.balancer.scheduling.output_lengths import OutputLengths
from regions.balancer.scheduling.pipeline import Profile
from regions.balancer.scheduling.scorers.prefix_affinity import PrefixAffinityScorer
from regions.balancer.signals.overflow import SpillOver
from regions.balancer.signals.policy_follow import PolicyFollow
from regions.balancer.signals.shared_state import StateLink
from regions.balancer.types import Endpoint


class Reports:
    """``explain`` and ``state`` of a balancer (a mixin of ``Balancer``, which has the
    parts named below)."""

    region: str
    config: BalancerConfig
    pool: BackendPool
    dispatcher: Dispatcher
    profile: Profile
    parse: Parse
    output_lengths: OutputLengths
    prefix_scorer: PrefixAffinityScorer | None
    link: StateLink | None
    policy_follow: PolicyFollow
    spill: SpillOver
    revisions: ChooseRevision
    ladder: DegradeLadder

    def explain(
        self, path: str, body: Any, headers: dict[str, str] | None = None
    ) -> dict[str, Any]:
        """Why this request would go where: the pipeline's chain of steps, as data."""
        endpoint = Endpoint(path)
        info = parse_request(
            endpoint,
            body,
            headers or {},
            prefill_ratio=self.config.prefill_ratio,
            lengths=self.output_lengths,
            with_prefix=self.parse.settings.prefix_hashes,
            token_block_size=self.parse.token_block_size(),
            tokenizer=(tokenizer := self.parse.tokenizer(body)),
        )
        if "revision" in self.config.stages:  # as the request's own stage would
            info = self.revisions.choose(info)
        decision = self.dispatcher.explain(info)
        return {
            "region": self.region,
            "profile": self.profile.name,
            "capacity": {b.name: describe_capacity(b.cap_now, b.in_flight) for b in self.pool},
            "request": {
                "model": info.model,
                "prompt_tokens": info.prompt_tokens,
                # a path, "simulator", or "estimate" (4 characters a token, no token ids)
                "tokens_by": tokenizer.source,
                "output_tokens": info.output_tokens,
                "cost_tokens": info.cost_tokens,
                "priority": info.priority,
                "session": info.session,
                "revision": info.revision,
            },
            **decision.to_json(),
            **({"prefix": self.prefix_scorer.describe(info, self.pool.snapshot().backends)}
               if self.prefix_scorer is not None else {}),
            "queued": self.dispatcher.queued,
            # the ladder of the service the Host header names: its steps, triggers, signals
            "degrade": self.ladder.explain((headers or {}).get("host"), info.model),
        }

    def state(self) -> dict[str, Any]:
        snap = self.pool.snapshot()
        link = self.link
        return {
            "region": self.region,
            "queued": self.dispatcher.queued,
            "retry_after": self.dispatcher.retry_after(),
            "policy_version": self.policy_follow.version,
            "overflow": None if self.spill.overflow is None else self.spill.overflow.describe(),
            "shared_state": None
            if link is None
            else {
                "reachable": link.reachable,
                "published": None
                if link.published is None
                else {
                    "utilization": round(link.published.utilization, 4),
                    "capacity": round(link.published.capacity, 3),
                    "timestamp": link.published.timestamp,
                },
            },
            "backends": [
                {
                    "name": b.name,
                    "healthy": b.healthy,
                    "ejected": b.ejected,
                    "draining": b.draining,
                    "drained_by": sorted(self.pool[b.name].drains),
                    "in_flight": b.in_flight,
                    "cap": b.cap,
                    "limit": b.limit,
                    "capacity": {
                        "slots": self.pool[b.name].cap_now.slots,
                        "source": self.pool[b.name].cap_now.source,
                        "limit": self.pool[b.name].cap_now.limit,
                        "provisional": self.pool[b.name].cap_now.provisional,
                    },
                    "work_tokens": round(b.work_tokens, 3),
                    "prefill_tokens": round(b.prefill_tokens, 3),
                    "tokens_per_s": round(b.tokens_per_s, 3),
                    "rate_learned": b.rate_learned,
                    "refused": dict(b.refused),  # model -> why (the version probe)
                }
                for b in snap.backends
            ],
        }


def describe_capacity(capacity: Capacity, in_flight: int) -> str:
    """One backend's capacity in explain's words."""
    if capacity.provisional:
        return (f"capacity unknown, provisional limit {capacity.limit} in flight (from the most "
                f"it was seen running, until its metrics show it saturated); "
                f"{in_flight} in flight")
    if capacity.slots is None:
        held = "at most " + str(capacity.limit) if capacity.limit < UNBOUNDED else "nothing held"
        return (f"capacity unknown ({held}: least outstanding requests until its metrics show "
                f"it saturated); {in_flight} in flight")
    return (f"capacity {capacity.slots} ({capacity.source}), limit {capacity.limit} in flight; "
            f"{in_flight} in flight")
