# SPDX-License-Identifier: Apache-2.0
"""Admission: bind a request to a backend now, or hold it in the region queue until a
backend has a free slot (late binding), or shed it with 429 and a real Retry-After.

- ``acquire(request)`` runs the pipeline on the current snapshot. A pick returns a
  ``Lease`` at once. If a waitable filter (``Profile.waits_at``: ``capacity``) dropped the
  last candidate, the request waits in the queue; any other emptying filter means no
  backend can serve it (``NoBackendError``: 404 for an unknown model, else 503).
- Late binding: the profile's refiners (the ``size-aware`` scorer) first refine each
  request's predicted size (``refine``, once per ``acquire``); its hold policies
  (``size-aware``, ``expected-finish``) are then asked about each pick. When one answers
  ``h > 0`` seconds (the pick is far slower for this request than a backend that is full
  right now) and the request has waited less than ``h``, it is not bound: it waits in the queue
  (``Decision.stopped_at == HOLD``) and is offered the next free slots like any queued
  request, until it binds or its ``h`` runs out (then it takes what is free).
- The queue is ordered by priority (higher first), then arrival, less the advisors'
  refiners' precedence (``precedence_s``: a long request counts as having arrived a little earlier,
  so that in a backlog it starts first and its end-to-end time does not take the whole
  wait plus its long service on top). When it is full, a new
  request evicts the lowest-priority queued one if its own priority is higher; a tenant's
  request evicts the newest (of no higher priority) of the tenant holding the most of the
  queue, when that holds more than its own tenant plus one; otherwise it is shed. A queued
  request whose deadline passes is shed.
- Once requests carry tenants (the policy identifies them), the queue is served by
  ``fair_share``: priority tiers with aging, reserved shares, then the tenants' virtual
  token counters; without tenants nothing changes. Where tenants have reserves, a request
  binds only if the free slots left after it cover the reserves the other tenants with
  requests in flight do not hold (``FairShare.kept_free``; the slots are what admission
  lets be in flight, so nothing is kept while a capacity is unknown and unbounded);
  otherwise it waits (``Decision.stopped_at == KEPT``).
- ``on_bind`` hooks (``(request, backend)``; the balancer adds its profile's bind
  observers, e.g. the ``prefix-affinity`` scorer's index) run synchronously each time a
  request is bound, right after its lease is taken.
- ``pump()`` runs whenever a slot may have freed (a lease released, an undrain, an
  ejection ending, a hold running out); it hands leases to queued requests in order while
  slots remain, looking at most ``max_scan`` entries past the ones it binds (held entries
  stay where they are).
- Retry-After, in whole seconds, clamped to [1, ``max_retry_after_s``]::

      backlog_tokens = sum(in-flight work) + sum(queued cost)
      throughput     = sum over usable backends of tokens_per_s * slots
      (slots: the capacity if known, else what is in flight there, at least one)
      retry_after    = ceil(backlog_tokens / throughput)
"""

from __future__ import annotations

import asyncio
import bisect
import itertools
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from regions.balancer.errors import NoBackendError, ShedError
from regions.balancer.scheduling.backend import Lease
from regions.balancer.scheduling.backends import BackendPool
from regions.balancer.scheduling.capacity import UNBOUNDED
from regions.balancer.scheduling.demand import DemandSignal
from regions.balancer.scheduling.fair_share import FairShare
from regions.balancer.scheduling.pipeline import Decision, Profile
from regions.balancer.types import BackendSnapshot, RegionSnapshot, RequestInfo

HOLD = "late-binding"  # Decision.stopped_at of a request held for a better backend
KEPT = "reserve"  # Decision.stopped_at of a request that would take another tenant's reserve


@dataclass(frozen=True)
class AdmissionConfig:
    max_queue: int = 1024
    queue_timeout_s: float = 30.0
    max_retry_after_s: int = 300
    max_scan: int = 64


@dataclass(order=True)
class _Entry:
    sort_key: tuple[int, float, int]  # (-priority, arrival - precedence, sequence)
    request: RequestInfo = field(compare=False)
    future: asyncio.Future[Lease] = field(compare=False)
    since: float = field(default=0.0, compare=False)  # clock time it arrived
    hold_until: float = field(default=0.0, compare=False)  # clock time its last hold ends


class Dispatcher:
    """The region queue and the binding of requests to backends."""

    def __init__(
        self, pool: BackendPool, profile: Profile, config: AdmissionConfig | None = None
    ) -> None:
        self.pool = pool
        self.profile = profile
        self.config = config or AdmissionConfig()
        self._queue: list[_Entry] = []
        self._seq = itertools.count()
        self._pumping = False
        self._wake_handle: asyncio.TimerHandle | None = None
        self._wake_at = math.inf
        self.shed_counts: dict[str, int] = {}
        self.on_bind: list[Callable[[RequestInfo, BackendSnapshot], None]] = []
        self.holds = 0  # requests held for a better backend (counted once each)
        self.demand = DemandSignal()  # the autoscaling signal, per model (``demand``)
        self.fair = FairShare()
        self._waits_at = profile.waits_at | {HOLD, KEPT}
        self._eligibility = tuple(f for f in profile.filters if f.name not in profile.waits_at)
        pool.on_change = self.pump

    @property
    def queued(self) -> int:
        return len(self._queue)

    def queued_for(self, model: str) -> tuple[int, float]:
        """Requests for ``model`` in the region queue, and how long the longest-waiting of
        them has waited (0 when none)."""
        since = [e.since for e in self._queue if e.request.model == model]
        if not since:
            return 0, 0.0
        return len(since), max(0.0, self.pool.clock() - min(since))

    def loading(self, model: str) -> int:
        """Servers of ``model`` on their way up (woken from standby, not serving yet)."""
        return sum(1 for b in self.pool if model in b.models and b.waking)

    def queued_cost(self) -> float:
        return sum(e.request.cost_tokens for e in self._queue)

    # -- binding -------------------------------------------------------------------------

    def try_bind(
        self, request: RequestInfo, waited_s: float = 0.0
    ) -> tuple[Lease | None, Decision]:
        """One synchronous pipeline run; a lease if a backend was picked and the request
        is not worth holding (it has waited ``waited_s`` so far)."""
        lease, decision, _ = self._bind(request, waited_s)
        return lease, decision

    def _bind(self, request: RequestInfo, waited_s: float) -> tuple[Lease | None, Decision, float]:
        snapshot = self.pool.snapshot()
        if self.fair.reserves and self._takes_a_reserve(request, snapshot):
            return None, Decision(None, KEPT), 0.0
        decision = self.profile.run(snapshot, request)
        chosen = decision.chosen
        if chosen is None:
            return None, decision, 0.0
        for policy in self.profile.hold_policies:
            if policy.acceptable(request, chosen):
                continue
            eligible = self._eligible(request, snapshot.backends, chosen)
            hold = policy.hold_s(request, chosen, eligible)
            if waited_s < hold:
                return None, Decision(None, HOLD, decision.steps), hold
        # only a stream's first byte says when its prompt has prefilled
        prefill = request.prompt_cost if request.stream else 0.0
        lease = self.pool.lease(chosen.index, request.cost_tokens, prefill)
        self.fair.bound(request)
        for hook in self.on_bind:
            hook(request, chosen)
        return lease, decision, 0.0

    def _takes_a_reserve(self, request: RequestInfo, snapshot: RegionSnapshot) -> bool:
        """Whether binding ``request`` now would leave fewer free slots than the other
        tenants' unheld reserves (``FairShare.kept_free``)."""
        usable = [b for b in snapshot.backends if b.usable]
        slots = sum(b.limit for b in usable)
        if slots >= UNBOUNDED:
            return False
        kept = self.fair.kept_free(request.tenant, slots)
        return kept > 0 and sum(b.free_slots for b in usable) - 1 < kept - 1e-9

    def _eligible(
        self, request: RequestInfo, backends: Sequence[BackendSnapshot], chosen: BackendSnapshot
    ) -> list[BackendSnapshot]:
        """The backends every filter but the waitable ones keeps (full ones included); in a
        large region (over ``4 * sample`` backends) of a random sample of ``2 * sample``
        of them and the chosen one, as the pipeline samples its candidates."""
        sample = self.profile.sample
        if sample and len(backends) > 4 * sample:
            n, rnd = len(backends), self.profile.rng.random
            picked = {int(rnd() * n) for _ in range(2 * sample)} | {chosen.index}
            backends = [backends[i] for i in picked]
        checks = [f.check for f in self._eligibility]
        return [b for b in backends if all(check(request, b) is None for check in checks)]

    def _precedence_s(self, request: RequestInfo) -> float:
        return max((r.precedence_s(request) for r in self.profile.refiners), default=0.0)

    def refine(self, request: RequestInfo, *, learn: bool = True) -> RequestInfo:
        """``request`` as the refiners size it (unchanged without refiners)."""
        for refiner in self.profile.refiners:
            request = refiner.refine(request, learn=learn)
        return request

    async def acquire(self, request: RequestInfo, timeout_s: float | None = None) -> Lease:
        """A lease on a backend for ``request``; may wait in the queue up to the deadline."""
        request = self.refine(request)
        self.fair.arrived(request.tenant, self._queue)
        lease, decision, hold = self._bind(request, 0.0)
        if lease is not None:
            return lease
        if decision.stopped_at not in self._waits_at:
            raise _no_backend(request, decision)
        self._make_room(request)
        loop = asyncio.get_running_loop()
        now = self.pool.clock()
        entry = _Entry(
            (-request.priority, now - self._precedence_s(request), next(self._seq)),
            request,
            loop.create_future(),
            since=now,
            hold_until=now + hold,
        )
        if hold:
            self.holds += 1
        bisect.insort(self._queue, entry)
        self._schedule_wake(entry.hold_until if hold else math.inf)
        timeout = self.config.queue_timeout_s if timeout_s is None else timeout_s
        try:
            async with asyncio.timeout(timeout):
                return await asyncio.shield(entry.future)
        except TimeoutError:
            if _has_lease(entry.future):
                return entry.future.result()
            self._remove(entry)
            raise self._shed("deadline") from None
        except BaseException:  # cancelled (client gone) or evicted
            self._remove(entry)
            if _has_lease(entry.future):  # bound as the client left: it produced nothing
                self.fair.finished(request, 0.0)
                entry.future.result().release()
            raise

    def _make_room(self, request: RequestInfo) -> None:
        if len(self._queue) < self.config.max_queue:
            return
        lowest = self._queue[-1] if self._queue else None
        if lowest is not None and -lowest.sort_key[0] < request.priority:
            self._queue.pop()
            if not lowest.future.done():
                lowest.future.set_exception(self._shed("evicted"))
            return
        hog = self._hog(request) if request.tenant is not None else None
        if hog is not None:
            evicted = self._queue.pop(hog)
            evicted.future.set_exception(self._shed("evicted"))  # _hog picks one not done
            return
        raise self._shed("queue-full")

    def _hog(self, request: RequestInfo) -> int | None:
        """Index of the newest queued entry of the tenant holding the most of the full
        queue, when that is another tenant holding more entries than ``request``'s tenant
        (plus one): a flood fills the queue, but never sheds the other tenants' requests."""
        if not self._queue:  # a queue of no room at all (max_queue 0)
            return None
        held: dict[str | None, int] = {}
        for entry in self._queue:
            held[entry.request.tenant] = held.get(entry.request.tenant, 0) + 1
        hog = max(held, key=lambda t: held[t])
        if hog is None or hog == request.tenant or held[hog] <= held.get(request.tenant, 0) + 1:
            return None
        for i in range(len(self._queue) - 1, -1, -1):
            entry = self._queue[i]
            if (entry.request.tenant == hog and entry.request.priority <= request.priority
                    and not entry.future.done()):
                return i
        return None

    def _remove(self, entry: _Entry) -> None:
        i = bisect.bisect_left(self._queue, entry)
        if i < len(self._queue) and self._queue[i] is entry:
            del self._queue[i]
        if not entry.future.done():
            entry.future.cancel()

    def finished(self, request: RequestInfo, output_tokens: float) -> None:
        """A bound request ended with ``output_tokens`` (its tenant's fair share)."""
        self.fair.finished(request, output_tokens)

    def pump(self) -> None:
        """Hand free slots to queued requests, highest priority first (synchronous)."""
        if self._pumping or not self._queue:
            return
        if FairShare.active(self._queue):
            self._pump_fair()
            return
        self._pumping = True
        hold_ends = math.inf
        try:
            now = self.pool.clock()
            i = skipped = 0
            while i < len(self._queue) and skipped < self.config.max_scan:
                if self.pool.snapshot().free_slots == 0:
                    break
                entry = self._queue[i]
                held = None if entry.future.done() else self._offer(entry, now)
                if held is None:
                    del self._queue[i]
                    continue
                hold_ends = min(hold_ends, held)
                i += 1
                skipped += 1
        finally:
            self._pumping = False
        self._schedule_wake(hold_ends)

    def _pump_fair(self) -> None:
        """``pump`` in the fair share's order (``fair_share.FairShare.next``)."""
        self._pumping = True
        hold_ends = math.inf
        try:
            now = self.pool.clock()
            passed: list[_Entry] = []  # offered a slot and not bound: held, or no room
            kept_out: set[str | None] = set()  # tenants whose next bind takes a reserve
            while len(passed) < self.config.max_scan:
                snapshot = self.pool.snapshot()
                if snapshot.free_slots == 0:
                    break
                self._queue = [e for e in self._queue if not e.future.done()]
                waiting = [e for e in self._queue
                           if e not in passed and e.request.tenant not in kept_out]
                if not waiting:
                    break
                slots = sum(b.cap for b in snapshot.backends)
                entry = waiting[self.fair.next(waiting, now, slots)]
                if self.fair.reserves and self._takes_a_reserve(entry.request, snapshot):
                    # binding another tenant's request leaves this one's margin as it was
                    kept_out.add(entry.request.tenant)
                    continue
                held = self._offer(entry, now)
                if held is None:
                    self._queue.remove(entry)
                    continue
                hold_ends = min(hold_ends, held)
                passed.append(entry)
        finally:
            self._pumping = False
        self._schedule_wake(hold_ends)

    def _offer(self, entry: _Entry, now: float) -> float | None:
        """Offer queued ``entry`` a backend. None when that settles it (bound, or no
        backend can serve it: the caller takes it out of the queue); else when its hold
        ends (infinity: it waits for room, not held)."""
        lease, decision, hold = self._bind(entry.request, now - entry.since)
        if lease is not None:
            entry.future.set_result(lease)
            return None
        if decision.stopped_at not in self._waits_at:
            entry.future.set_exception(_no_backend(entry.request, decision))
            return None
        if decision.stopped_at != HOLD:
            return math.inf
        if entry.hold_until <= entry.since:
            self.holds += 1
        entry.hold_until = entry.since + hold
        return entry.hold_until

    def _schedule_wake(self, hold_ends: float = math.inf) -> None:
        """Pump again when the snapshot expires (an ejection ends, slow start ramps) or
        when the first held request's hold runs out."""
        if not self._queue:
            return
        at = min(self.pool.next_transition(), hold_ends)
        if math.isinf(at):
            return
        if self._wake_handle is not None:
            if self._wake_at <= at:
                return  # an earlier wake is already due; it pumps and reschedules
            self._wake_handle.cancel()
        loop = asyncio.get_running_loop()
        delay = max(0.0, at - self.pool.clock())
        self._wake_at = at
        self._wake_handle = loop.call_later(delay + 1e-3, self._wake)

    def _wake(self) -> None:
        self._wake_handle = None
        self.pump()

    # -- shedding ------------------------------------------------------------------------

    def retry_after(self) -> int:
        snapshot = self.pool.snapshot()
        usable = [b for b in snapshot.backends if b.usable]
        throughput = sum(b.tokens_per_s * running_slots(b) for b in usable)
        backlog = sum(b.work_tokens for b in snapshot.backends) + self.queued_cost()
        if throughput <= 0:
            return self.config.max_retry_after_s
        seconds = math.ceil(backlog / throughput)
        return max(1, min(self.config.max_retry_after_s, seconds))

    def _shed(self, reason: str) -> ShedError:
        self.shed_counts[reason] = self.shed_counts.get(reason, 0) + 1
        return ShedError(reason, self.retry_after())

    def explain(self, request: RequestInfo) -> Decision:
        return self.profile.run(
            self.pool.snapshot(), self.refine(request, learn=False), explain=True
        )


def running_slots(b: BackendSnapshot) -> int:
    """Streams decoding at once on ``b``: its capacity, or while that is unknown what is in
    flight there (a guessed capacity would overstate the throughput)."""
    return b.cap if b.cap_known else max(1, min(b.cap, b.in_flight))


def _has_lease(future: asyncio.Future[Lease]) -> bool:
    return future.done() and not future.cancelled() and future.exception() is None


def _no_backend(request: RequestInfo, decision: Decision) -> NoBackendError:
    stage = decision.stopped_at or "unknown"
    if stage == "model":
        return NoBackendError(stage, f"the model {request.model!r} is not served in this region")
    return NoBackendError(stage, f"no backend available ({stage})")
