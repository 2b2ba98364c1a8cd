# SPDX-License-Identifier: Apache-2.0
"""How many GPU servers each model of a region needs: the autoscaling signal.

Demand is measured where it arrives, not where it piles up: a step in traffic shows in
the arrival rate within one window, long before the in-flight count of LLM requests
(each tens of seconds long) catches up. For each model, over the last ``window_s``:

- **home rate**: requests that arrived here for the model's servers, less those a sibling
  region sent (``borrowed``: its demand, not ours), plus those this region sent to a
  sibling instead (``sent_away``: the degradation ladder's overflow step; what the proxy
  sheds and the overflow then sends on is an arrival here already);
- **service time**: the mean seconds a request of the model took, arrival to end, over
  the requests that ended here in the window (the last known while none did);
- **per-server capacity**: the mean capacity (requests at once: learned, pinned, or the
  guess while unknown) of the model's servers that serve now;

``needed = home concurrency / (per-server capacity x target)``, where the home
concurrency is the larger of ``home rate x service time`` (Little's law: it moves within
one window of a step in arrivals) and the requests of the model in flight and queued now,
less the share a sibling sent (it moves as the requests of a step pile up, and it sees a
service time that grows with the load before those requests have ended); or, when larger,
``servers x mean KV-cache usage / kv_target`` (the servers' own reading, when their
metrics publish it). ``desired`` follows ``needed`` as an HPA follows its metric: up
at once to ``ceil(needed)`` once ``needed`` is more than ``tolerance`` above it; down only
to the highest ``ceil(needed x (1 + tolerance))`` of the last ``settle_s`` (a
stabilization window), so the noise of a constant load's window rate (a Poisson count:
about 1/sqrt(arrivals in the window)) does not move it, while a step shows within one
window. It is never below the servers still loading (a server is not scaled
away mid-load) nor below 1 while the model has any demand, and it is 0 only for a model
with no demand and nothing loading.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field

from regions.balancer.types import BackendSnapshot


@dataclass(frozen=True)
class DemandSettings:
    window_s: float = 15.0  # the rate's window: a step shows within it
    target: float = 0.8  # the share of a server's capacity it should run at
    kv_target: float = 0.85  # the KV-cache usage a server should stay under
    tolerance: float = 0.1  # the dead band around the current value
    settle_s: float = 60.0  # scale down to the highest need of this long


@dataclass(frozen=True)
class Desired:
    """One model's autoscaling reading."""

    model: str
    desired: int
    needed: float  # before rounding and the dead band
    servers: int  # serving now
    loading: int  # declared but not yet serving (waking, starting)
    home_rate: float  # requests per second
    service_s: float
    capacity: float  # per server, requests at once
    kv_usage: float | None
    borrowed_rate: float
    sent_away_rate: float

    def to_json(self) -> dict[str, float | int | str | None]:
        return {"model": self.model, "desired": self.desired, "needed": round(self.needed, 3),
                "servers": self.servers, "loading": self.loading,
                "home_rate": round(self.home_rate, 3), "service_s": round(self.service_s, 3),
                "capacity": round(self.capacity, 2),
                "kv_usage": None if self.kv_usage is None else round(self.kv_usage, 3),
                "borrowed_rate": round(self.borrowed_rate, 3),
                "sent_away_rate": round(self.sent_away_rate, 3)}


@dataclass
class _ModelDemand:
    arrivals: deque[float] = field(default_factory=deque)
    borrowed: deque[float] = field(default_factory=deque)
    sent_away: deque[float] = field(default_factory=deque)
    ended: deque[tuple[float, float]] = field(default_factory=deque)  # (at, seconds)
    service_s: float = 0.0
    desired: int = 0
    lows: deque[tuple[float, int]] = field(default_factory=deque)  # (at, down target)


class DemandSignal:
    """Per model: the events of the window and the published ``desired``."""

    def __init__(self, settings: DemandSettings | None = None) -> None:
        self.settings = settings or DemandSettings()
        self._models: dict[str, _ModelDemand] = {}

    def _of(self, model: str) -> _ModelDemand:
        found = self._models.get(model)
        if found is None:
            found = self._models[model] = _ModelDemand()
        return found

    def arrived(self, model: str, now: float, *, borrowed: bool = False) -> None:
        """A request for the model's servers here (``borrowed``: a sibling sent it)."""
        demand = self._of(model)
        (demand.borrowed if borrowed else demand.arrivals).append(now)

    def sent_away(self, model: str, now: float) -> None:
        """A request of this region's clients sent to a sibling instead."""
        self._of(model).sent_away.append(now)

    def ended(self, model: str, now: float, seconds: float) -> None:
        """A request of the model ended here after ``seconds`` from its arrival."""
        self._of(model).ended.append((now, seconds))

    def models(self) -> list[str]:
        return sorted(self._models)

    def read(self, model: str, backends: Iterable[BackendSnapshot], now: float,
             loading: int = 0, queued: int = 0) -> Desired:
        """The model's reading now (updates its ``desired``); ``loading``: its servers
        on their way up (waking, loading the model); ``queued``: its requests in the
        region queue."""
        s = self.settings
        demand = self._of(model)
        horizon = now - s.window_s
        for events in (demand.arrivals, demand.borrowed, demand.sent_away):
            while events and events[0] < horizon:
                events.popleft()
        while demand.ended and demand.ended[0][0] < horizon:
            demand.ended.popleft()
        if demand.ended:
            demand.service_s = sum(t for _, t in demand.ended) / len(demand.ended)
        serving, caps, kv, in_flight = 0, 0.0, [], 0
        for view in backends:
            if model in view.models and view.usable:
                serving += 1
                caps += view.cap
                in_flight += view.in_flight
                if view.kv_usage is not None:
                    kv.append(view.kv_usage)
        capacity = caps / serving if serving else 0.0
        home_rate = (len(demand.arrivals) + len(demand.sent_away)) / s.window_s
        arrived = len(demand.arrivals) + len(demand.borrowed)
        home_share = len(demand.arrivals) / arrived if arrived else 1.0
        concurrency = max(home_rate * demand.service_s, (in_flight + queued) * home_share)
        needed = 0.0
        if capacity > 0:
            needed = concurrency / (capacity * s.target)
        kv_usage = sum(kv) / len(kv) if kv else None
        if kv_usage is not None and serving:
            needed = max(needed, serving * kv_usage / s.kv_target)
        demand.desired = self._settle(demand, now, needed, home_rate > 0, loading)
        return Desired(model, demand.desired, needed, serving, loading, home_rate,
                       demand.service_s, capacity, kv_usage,
                       len(demand.borrowed) / s.window_s, len(demand.sent_away) / s.window_s)

    def _settle(self, demand: _ModelDemand, now: float, needed: float, wanted: bool,
                loading: int) -> int:
        s, current = self.settings, demand.desired
        lows = demand.lows
        lows.append((now, math.ceil(needed * (1 + s.tolerance) - 1e-9)))
        while lows and lows[0][0] < now - s.settle_s:
            lows.popleft()
        if needed > current + min(0.5, current * s.tolerance) or (current == 0 and needed > 0):
            desired = max(current, math.ceil(needed - 1e-9))
        else:
            desired = min(current, max(low for _, low in lows))
        if wanted:
            desired = max(desired, 1)
        return max(desired, loading)

