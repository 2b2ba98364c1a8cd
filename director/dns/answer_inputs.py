"""What of a state snapshot the DNS answers read, so that a new snapshot drops the caches
only when it changes an answer.

Under traffic the state changes every second (each region's utilization, each latency
sample), and every change makes a new ``Snapshot``. An answer (regions, TTL, ECS scope,
reason) reads only:

- per region: whether it is down, draining, stale or degraded (health, failover, TTL),
  and which of its endpoints are down (the addresses answered);
- per region and spillover threshold of the policy: whether its utilization is unknown
  (the ECS scope narrows when spillover could hash the client), under, at or over the
  threshold, and over it the utilization itself (the share that spills is
  ``1 - threshold / utilization``, exact);
- the measured RTTs, only when a service steers by a method that reads them.

``AnswerInputs.of(snapshot)`` is that, as a value: equal values, equal answers. A
utilization change that crosses no threshold and flips no health changes nothing.
Memoised decisions carry no explain chain; ``explain`` queries never come from the memo.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping

from director.engine.registry import Input
from director.engine.snapshot import Snapshot
from policies.model import Policy


class AnswerInputs:
    """The answer-relevant part of snapshots, for one policy."""

    def __init__(self, policy: Policy, reads: Mapping[str, frozenset[Input]]) -> None:
        self.regions = tuple(sorted({r for s in policy.services for r in s.regions}))
        self.thresholds = tuple(sorted({s.spillover.threshold for s in policy.services
                                        if s.spillover is not None}))
        self.reads_rtt = any(Input.RTT_NETWORK in r for r in reads.values())

    def of(self, snapshot: Snapshot) -> Hashable:
        """What answers read of ``snapshot``; equal for snapshots that answer alike."""
        regions = []
        for name in self.regions:
            state = snapshot.region(name)
            regions.append((state.healthy is False, state.draining, state.stale,
                            state.degraded, _bands(state.utilization, self.thresholds),
                            state.down_endpoints))
        latency = _frozen(snapshot.latency) if self.reads_rtt else None
        return tuple(regions), latency


def _bands(utilization: float | None, thresholds: tuple[float, ...]) -> Hashable:
    if utilization is None:
        return None
    return tuple(
        utilization if utilization > t else (utilization == t) for t in thresholds)


def _frozen(latency: Mapping[str, Mapping[str, float]]) -> Hashable:
    return frozenset((cidr, frozenset(rtts.items())) for cidr, rtts in latency.items())
