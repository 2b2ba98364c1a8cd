# SPDX-License-Identifier: Apache-2.0
"""How many requests a backend runs at once, learned from what its engine says and does.

Sources, strongest first:

1. **pinned**: the policy's ``max-seqs`` for that GPU server (``BackendSpec.max_concurrency``).
2. **observed**: a server that keeps requests waiting while it runs exactly as many as it
   ever ran (a slot limit holds the count still), or while its KV cache is full
   (``kv_full``), runs ``running`` requests at once right now: its sequence slots, or fewer
   when long prompts fill its KV cache. One such scrape is not enough: a request that
   arrived a moment before the scrape waits for the engine's next iteration on any busy
   server, and a server busy prefilling keeps prompts waiting with fewer running (a count
   that moves from scrape to scrape), so it takes ``persist`` of the last ``persist + 1``
   scrapes. The capacity is the largest such
   ``running`` seen in the last ``window_s`` (the newest one keeps counting after that,
   until a newer one comes). A
   scrape without waiting that shows more running than the capacity says the estimate is
   wrong (the server ran the headroom too, with room to spare): it is dropped, and the
   backend is unknown again until a scrape with waiting says where its limit is now.
3. **engine**: the slot count the engine publishes (SGLang's ``max_running_requests``),
   until an observation says otherwise.
4. **unknown**: nothing said yet. Admission then holds nothing (the limit is unbounded), so
   the balancer behaves like least-outstanding-requests; scorers see a guess: the largest
   capacity learned in the region, else ``GUESS_SLOTS``. A region that holds (below) gives
   an unknown backend a provisional limit instead, once a scrape has shown it running.

What admission does with it (the limit):

- **pinned**: the pin is the limit; beyond it requests wait in the region queue.
- **learned** (observed or engine): by default nothing is held (the limit is unbounded) and
  the capacity informs scorers, ``/_admin/state``, ``explain`` and the metrics. Holding at
  a learned capacity (``late_binding``, opt-in) costs every held request an engine
  iteration (it is sent when a slot frees, after the engine has planned its next step)
  and, where KV cache rather than slots bounds a server, holds while it has room (its
  measured effect: ``docs/research/balancer-results.md``). With it, beyond the capacity
  requests wait in the region queue, for the region's next free slot rather than one
  server's (with ``headroom_share`` > 0 a share more may wait at each server), and for one
  second in ten one request more is allowed, so that a server that could run more is seen
  running it (the estimate is then dropped and learned anew).
- **unknown, in a region that holds for tenants** (``provisional``): a provisional limit, so
  that a burst is not sent into the engines before their capacity is seen (a tenant's
  flood would fill the engines' own queues, where the fair share cannot reorder it). Every
  scrape shows a lower bound on the slots (``running``); the limit is
  ``provisional_growth`` times the most seen running, at least one more, raised so only
  by a scrape with nothing waiting. While it binds, or the backend has more in flight
  than it was ever seen running, it is scraped sooner (``engine_scrape``):
  - a scrape showing the engine running all that the limit allows may mean room, and the
    limit doubles (slow start), so a ramp on a large server costs a few quick scrapes of
    queueing; an engine exactly full at the limit looks the same, and a burst then
    overfills it by up to the limit;
  - one running fewer than the limit with one waiting is never saturation: an arrival
    waiting for the engine's next iteration looks the same, and an engine one slot short
    of the limit queues one request, which is harmless;
  - a slot limit must hold the count still over two scrapes (a climbing count is not one);
    an engine with fewer slots runs fewer and keeps the rest waiting: it is seen saturated
    and learned as above.
  Without a scrape (no metrics), nothing is held, as before; ``provisional_growth`` 0 turns
  it off. Plain late binding (no tenants) does not use it; why, and the variants measured
  against this one: ``docs/research/balancer-results.md``.
- An engine's in-flight limit (TGI's ``max_concurrent_requests``: beyond it, 429) caps the
  limit, whatever the source.

A backend that cannot be scraped, comes back from an ejection or turns unhealthy forgets
what was observed (it may have restarted with other settings).
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass

UNBOUNDED = 1 << 30  # the admission limit while the capacity is unknown
GUESS_SLOTS = 256  # vLLM's default max_num_seqs on most GPUs (1024 on 80 GB+ GPUs)


@dataclass(frozen=True)
class CapacityConfig:
    """``late_binding``: hold requests in the region queue at a learned capacity (a pinned
    one always holds; off by default, see the module docstring); ``window_s``: how long a
    saturated observation counts; ``headroom_share``: requests allowed to wait at a server
    beyond a learned capacity, as a share of it, at least one (0, the default: none);
    ``probe_every_s``: without headroom, one request more than the learned capacity is
    allowed for ``probe_s`` of every ``probe_every_s`` seconds (0: never), so that a server
    that could run more is seen doing it; ``provisional``: while holding, give a backend of
    unknown capacity a provisional limit (the balancer turns it on in a region with
    tenants, whose fair share needs the queue before a capacity is learned);
    ``provisional_growth``: that limit, as a multiple of the most it was seen running (0:
    none, unbounded)."""

    late_binding: bool = False
    window_s: float = 5.0
    headroom_share: float = 0.0
    probe_every_s: float = 10.0
    probe_s: float = 1.0
    kv_full: float = 0.9
    persist: int = 2
    provisional_growth: float = 1.25
    provisional: bool = False


@dataclass(frozen=True, slots=True)
class Capacity:
    """A backend's capacity as the estimator has it."""

    slots: int | None  # None: unknown
    source: str  # "pinned", "observed", "engine" or "unknown"
    limit: int  # what admission lets be in flight there (UNBOUNDED while unknown)
    provisional: bool = False  # unknown, and the limit is the provisional one

    @property
    def known(self) -> bool:
        return self.slots is not None


class CapacityEstimator:
    """One backend's capacity from its pin, its engine's limits and scraped observations."""

    def __init__(self, pinned: int | None = None, config: CapacityConfig | None = None) -> None:
        self.pinned = pinned
        self.config = config or CapacityConfig()
        self.engine_slots: int | None = None
        self.engine_in_flight: int | None = None
        self._saturated: deque[tuple[float, int]] = deque()  # (time, running) at capacity
        self._recent: deque[bool] = deque(maxlen=self.config.persist + 1)  # at capacity?
        self._max_running = 0  # the most it was seen running, since it was last forgotten
        self._provisional = 0  # the provisional limit (0: none yet), see the module docstring
        self._last_count: int | None = None  # running, as the previous scrape showed it

    def engine_limits(self, max_running: int | None, max_in_flight: int | None) -> None:
        """What the engine's info endpoint says (None: it does not say)."""
        self.engine_slots = max_running
        self.engine_in_flight = max_in_flight

    def observe(self, now: float, running: float | None, waiting: float | None,
                kv_usage: float | None = None) -> None:
        """A metrics scrape: requests running and waiting at the server, its KV usage."""
        if running is None or waiting is None:
            return
        count = int(running)
        config = self.config
        self._max_running = max(self._max_running, count)
        last, self._last_count = self._last_count, count
        full = (waiting > 0 and count > 0
                and (count == self._max_running
                     or (kv_usage is not None and kv_usage >= config.kv_full))
                and not self._runs_all_allowed(count)
                and (count == last or not self._provisional_mode()))
        self._recent.append(full)
        if full and sum(self._recent) >= config.persist:
            self._saturated.append((now, count))
        elif not waiting and self._saturated and count > max(c for _, c in self._saturated):
            self._saturated.clear()  # it ran more than we thought it could, with room left
        if not full:  # a limit that may be the engine's is no reason to allow more
            self._grow_provisional(count, waiting)
        self._expire(now)

    def _provisional_mode(self) -> bool:
        """Holding at a provisional limit: scrapes come every ``binding_every_s`` while it
        explores, so a count that is still climbing (each scrape a new most, with arrivals
        waiting for the next iteration) must not pass for a slot limit, which holds the
        count still from one scrape to the next."""
        return self.config.late_binding and self.config.provisional and self._provisional > 0

    def _runs_all_allowed(self, running: int) -> bool:
        """Whether a holding balancer's provisional limit, not the engine, may hold
        ``running`` where it is: the engine runs what it was allowed, or all but one (that
        one may wait for its next iteration as well as for a slot; either way an engine
        one short of the limit is harmless). Running more, it is fed from elsewhere too,
        and what waits may wait for a slot."""
        return (self._provisional_mode()
                and self._provisional - 1 <= running <= self._provisional)

    def _grow_provisional(self, running: int, waiting: float) -> None:
        growth = self.config.provisional_growth
        if growth <= 0 or self._max_running <= 0:
            return
        limit = self._provisional
        if not waiting or not self._provisional:  # what runs with some waiting may be a limit
            seen = self._max_running
            limit = max(limit, seen + 1, math.ceil(seen * growth))
        if self._provisional and running >= self._provisional:  # it ran all it was allowed
            limit = max(limit, 2 * self._provisional)
        self._provisional = limit

    def explores(self, in_flight: int) -> bool:
        """Whether ``in_flight`` requests, under a provisional limit, fill it or exceed the
        most the engine was seen running: a scrape soon tells whether the limit may double,
        or what the capacity is."""
        return (self._provisional_mode() and not self._saturated
                and self.pinned is None and self.engine_slots is None
                and (in_flight >= self._provisional or in_flight > self._max_running))

    def forget(self) -> None:
        """Drop what was observed (a restart may have changed it); the pin stays."""
        self._saturated.clear()
        self._recent.clear()
        self._max_running = 0
        self._provisional = 0
        self._last_count = None
        self.engine_slots = None
        self.engine_in_flight = None

    def current(self, now: float) -> Capacity:
        """The capacity and admission limit as of ``now``."""
        self._expire(now)
        if self.pinned is not None:
            slots, source = self.pinned, "pinned"
        elif self._saturated:
            slots, source = max(count for _, count in self._saturated), "observed"
        elif self.engine_slots is not None:
            slots, source = self.engine_slots, "engine"
        else:
            slots, source = None, "unknown"
        limit = self.unheld_limit()
        provisional = False
        if slots is not None and (source == "pinned" or self.config.late_binding):
            limit = min(limit, slots + self._headroom(slots, source, now))
        elif slots is None and self._provisional_mode():
            provisional = self._provisional < limit
            limit = min(limit, self._provisional)
        if slots is not None and self.engine_in_flight is not None:
            slots = min(slots, self.engine_in_flight)
        return Capacity(slots, source, limit, provisional)

    def unheld_limit(self) -> int:
        """The admission limit when nothing is held at a capacity: the engine's own
        in-flight limit (TGI's: beyond it, 429), else unbounded."""
        return UNBOUNDED if self.engine_in_flight is None else self.engine_in_flight

    def _headroom(self, slots: int, source: str, now: float) -> int:
        config = self.config
        if source == "pinned":
            return 0  # what the operator said the server runs; nothing to probe
        if config.headroom_share > 0:
            return max(1, math.ceil(config.headroom_share * slots))
        every = config.probe_every_s
        return 1 if every > 0 and now % every < config.probe_s else 0

    def _expire(self, now: float) -> None:
        horizon = now - self.config.window_s
        saturated = self._saturated
        while saturated and saturated[0][0] < horizon:
            # the newest saturated sample keeps counting until a newer one replaces it, so
            # a capacity learned under load holds while the load that showed it has passed
            if len(saturated) == 1:
                break
            saturated.popleft()
