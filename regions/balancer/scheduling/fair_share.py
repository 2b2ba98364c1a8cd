# SPDX-License-Identifier: Apache-2.0
"""Which tenant's queued request goes next: strict priority tiers with aging, reserved
capacity, then the Virtual Token Counter (Sheng et al., "Fairness in Serving Large Language
Models", OSDI 2024) weighted by each tenant's policy weight.

- **Tiers.** Priorities are strict tiers; a tier ranks as its priority plus one for every
  ``aging_s`` seconds its oldest queued request has waited, so a low tier is never
  starved: it rises until it is served. The best-ranked tier goes first (on a tie, the
  higher priority). Aging moves whole tiers, never requests within one, so a tenant's
  old backlog cannot overtake another tenant of the same tier.
- **Reserved capacity.** Within the tier, a tenant holding less than its ``reserve`` share
  of the region's slots (in flight) goes first, the furthest below its share first. While
  it has requests in flight, the part of its reserve it does not hold is also kept free:
  a request of a tenant holding its own reserve or more (or of none) binds only if the
  slots left free after it cover the reserves the others with requests in flight do not
  hold (``kept_free``); below its own reserve a tenant takes any free slot. A reserve is
  a guarantee, not only an order: its tenant's next request finds a free slot instead of
  waiting for one to turn over. It costs the tenants above their reserves the slots it
  keeps.
- **VTC.** Otherwise the tenant with the smallest counter goes, its oldest request first.
  A tenant's counter grows by ``(input_weight x prompt tokens + output_weight x output
  tokens) / weight`` (the paper's w_p = 1, w_q = 2 by default): the prompt and the predicted
  output when a request is bound, the difference to the real output when it ends. A tenant
  that becomes backlogged is lifted to ``credit_requests`` times U below the smallest
  counter of those queued (to the counter of the last tenant served when none is), U being
  the most one request has added to a counter: idle time banks at most that much credit.
  Two continuously backlogged tenants' weighted service stays within 3U of each other (the
  paper's 2U, and the one request by which the next rule may let a tenant go ahead).
- **Below its share.** Before the counters, a tenant holding fewer slots than its weighted
  share of the region's (among the tenants queued or in flight) goes first, by counter, as
  long as its counter is at most U above the smallest queued one.

- **Flooding.** Before all of that (reserves aside), a tenant that has had requests queued
  without a break while the region bound ``flood_turnovers`` times its slots in requests,
  and whose recent service (the cost bound to it, decayed over the same span) is at least
  ``flood_share`` of its weighted share of the active tenants', goes after every tenant
  queued more recently. When every queued tenant is such a tenant, the counters alone
  decide, so the bound above holds between continuously backlogged tenants.

Why the last three: with the paper's lift (no credit), a tenant that sends now and then
rejoins level with the flooding tenant and alternates with it, so its requests wait a turn
behind the flood's, and a short burst of them several turns (on the simulated fleet its p99
wait in the region queue doubled). Credit and first call on the slots of its share help
only while its burst stays within them; a burst past them alternates with the flood again.
A tenant that stays backlogged while being served its share is taking what the others
leave: it loses nothing by going after them, and they keep the waits they had without it.
It is never held below ``flood_share`` of its share by tenants that keep rejoining: below
that it competes by counter again. Both spans are counted in the region's own turnovers,
so they scale with its slots and its request lengths (no seconds to tune per fleet);
``bench/results/2026-11-26-tenant-fair-wait.md``.

Requests without a tenant (no ``identity`` in the policy) are never reordered: the
dispatcher keeps its plain priority-then-arrival queue for them (``active``).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

from regions.balancer.types import RequestInfo


@dataclass(frozen=True)
class FairShareConfig:
    input_weight: float = 1.0  # VTC's w_p, per prompt token
    output_weight: float = 2.0  # VTC's w_q, per output token
    aging_s: float = 10.0  # a queued request rises one priority tier per this long waited
    credit_requests: float = 8.0  # credit a rejoining tenant keeps, in largest requests
    flood_turnovers: float = 6.0  # queued this long, in the region's slots bound, ...
    flood_share: float = 0.8  # ... and served this much of its share: it goes last


class Queued(Protocol):
    """What the fair share reads of a queue entry."""

    @property
    def request(self) -> RequestInfo: ...
    @property
    def since(self) -> float: ...


class FairShare:
    """The tenants' virtual token counters and the choice of the next queued request."""

    def __init__(self, config: FairShareConfig | None = None) -> None:
        self.config = config or FairShareConfig()
        self.counters: dict[str, float] = {}
        self.weights: dict[str, float] = {}
        self.reserves: dict[str, float] = {}
        self.in_flight: dict[str, int] = {}
        self._last_served = 0.0  # counter of the tenant served last (the lift when none wait)
        self._largest_cost = 0.0  # the most one request has added to a counter (VTC's U)
        self._bound = 0  # requests bound so far, every tenant's and none's
        self._slots = 1  # the region's slots at the last ``next``
        self._queued_since: dict[str, int] = {}  # ``_bound`` when the tenant last queued anew
        # recent service: cost x a scale that grows each bind, i.e. decays older service
        # (only the tenants' ratios are read, so nothing decays in place)
        self._recent: dict[str, float] = {}
        self._scale = 1.0

    def set_tenants(self, weights: Mapping[str, float], reserves: Mapping[str, float]) -> None:
        """Tenants' weights and reserved shares (in [0, 1]) from the policy."""
        self.weights = {name: w for name, w in weights.items() if w > 0}
        self.reserves = {name: r for name, r in reserves.items() if r > 0}

    @staticmethod
    def active(entries: Iterable[Queued]) -> bool:
        return any(entry.request.tenant is not None for entry in entries)

    def arrived(self, tenant: str | None, queued: Iterable[Queued]) -> None:
        """``tenant``'s request joins the queue (``queued``: the entries already there)."""
        if tenant is None:
            return
        waiting = {e.request.tenant for e in queued if e.request.tenant is not None}
        if tenant in waiting:
            return
        self._queued_since[tenant] = self._bound
        floor = min((self.counter(t) for t in waiting), default=self._last_served)
        credit = self.config.credit_requests * self._largest_cost
        self.counters[tenant] = max(self.counter(tenant), floor - credit)

    def bound(self, request: RequestInfo) -> None:
        """``request`` got a backend: charge its prompt and predicted output."""
        self._bound += 1
        tenant = request.tenant
        if tenant is None:
            return
        cfg = self.config
        cost = cfg.input_weight * request.prompt_tokens + cfg.output_weight * request.output_tokens
        self._scale /= 1.0 - 1.0 / max(1.0, cfg.flood_turnovers * self._slots)
        if self._scale > 1e100:
            self._recent = {t: v / self._scale for t, v in self._recent.items()}
            self._scale = 1.0
        self._recent[tenant] = self._recent.get(tenant, 0.0) + cost * self._scale
        self.counters[tenant] = self.counter(tenant) + cost / self.weight(tenant)
        self._largest_cost = max(self._largest_cost, cost / self.weight(tenant))
        self._last_served = self.counters[tenant]
        self.in_flight[tenant] = self.in_flight.get(tenant, 0) + 1

    def finished(self, request: RequestInfo, output_tokens: float) -> None:
        """``request`` ended having produced ``output_tokens``: charge the difference to
        its prediction, and free its slot."""
        tenant = request.tenant
        if tenant is None:
            return
        correction = self.config.output_weight * (output_tokens - request.output_tokens)
        self.counters[tenant] = self.counter(tenant) + correction / self.weight(tenant)
        left = self.in_flight.get(tenant, 0) - 1
        if left > 0:
            self.in_flight[tenant] = left
        else:
            self.in_flight.pop(tenant, None)

    def kept_free(self, tenant: str | None, slots: float) -> float:
        """Free slots a request of ``tenant`` (None: a request of no tenant) must leave:
        none while the tenant holds less than its own reserve (a share of the region's
        ``slots``: those slots are its own), else the part of their reserves that the other
        tenants with requests in flight do not hold."""
        if tenant is not None and self.in_flight.get(tenant, 0) < self.reserves.get(
                tenant, 0.0) * slots:
            return 0.0
        kept = 0.0
        for other, share in self.reserves.items():
            held = self.in_flight.get(other, 0)
            if other != tenant and held:
                kept += max(0.0, share * slots - held)
        return kept

    def counter(self, tenant: str) -> float:
        return self.counters.get(tenant, 0.0)

    def weight(self, tenant: str) -> float:
        return self.weights.get(tenant, 1.0)

    def aged(self, entry: Queued, now: float) -> int:
        """Tiers ``entry`` has risen by waiting."""
        return math.floor(max(0.0, now - entry.since) / self.config.aging_s)

    def next(self, entries: Sequence[Queued], now: float, slots: int) -> int:
        """Index in ``entries`` (in queue order) of the request to offer a slot next;
        ``slots``: the region's request slots, for reserved and fair shares."""
        rank: dict[int, int] = {}  # priority -> its rank (priority + its oldest's aging)
        for entry in entries:
            priority = entry.request.priority
            rank[priority] = max(rank.get(priority, priority), priority + self.aged(entry, now))
        tier = max(rank, key=lambda p: (rank[p], p))
        firsts: dict[str | None, int] = {}  # a tenant's first entry in queue order: its oldest
        for i, entry in enumerate(entries):
            if entry.request.priority == tier and entry.request.tenant not in firsts:
                firsts[entry.request.tenant] = i
        tenants = [t for t in firsts if t is not None]
        floor = min((self.counter(t) for t in tenants), default=0.0)
        active = set(tenants) | set(self.in_flight)
        total = sum(self.weight(t) for t in active) or 1.0
        self._slots = max(1, slots)
        flooding = self.flooding(tenants, active, total)
        best: tuple[int, float, float, int] | None = None
        for tenant, i in firsts.items():
            if tenant is None:
                order = (0, 1.0, -math.inf, i)  # untenanted entries: before tenants over share
            else:
                held = self.in_flight.get(tenant, 0)
                reserve = self.reserves.get(tenant, 0.0) * slots
                counter = self.counter(tenant)
                after = 1 if tenant in flooding else 0
                if reserve > 0 and held < reserve:
                    order = (0, 0.0, held / reserve, i)
                elif (held < self.weight(tenant) / total * slots
                      and counter <= floor + self._largest_cost):
                    order = (after, 0.5, counter, i)  # below its share of slots, not ahead
                else:
                    order = (after, 1.0, counter, i)
            if best is None or order < best:
                best = order
        assert best is not None
        return best[3]

    def flooding(self, queued: Sequence[str], active: Iterable[str], total_weight: float
                 ) -> set[str]:
        """Of the ``queued`` tenants, those that go after the others (see Flooding): queued
        without a break for ``flood_turnovers`` x the region's slots binds, served at
        least ``flood_share`` of their weighted share; none when that is all of them."""
        span = self.config.flood_turnovers * self._slots
        long = [t for t in queued
                if self._bound - self._queued_since.get(t, self._bound) >= span]
        if not long or len(long) == len(queued):
            return set()
        recent = {t: self._recent.get(t, 0.0) for t in active}
        served = sum(recent.values())
        if served <= 0.0:
            return set()
        share = self.config.flood_share
        return {t for t in long
                if recent[t] / served >= share * self.weight(t) / total_weight}
