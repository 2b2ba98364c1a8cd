# SPDX-License-Identifier: Apache-2.0
"""Admission: bind a request to a backend now, or hold it in the region queue until a
backend has a free slot (late binding), or shed it with 429 and a real Retry-After.

- ``acquire(request)`` runs the pipeline on the current snapshot. A pick returns a
  ``Lease`` at once. If the ``capacity`` filter dropped the last candidate, the request
  waits in the queue; any other emptying filter means no backend can serve it
  (``NoBackendError``: 404 for an unknown model, else 503).
- The queue is ordered by priority (higher first), then arrival. When it is full, a new
  request evicts the lowest-priority queued one if its own priority is higher; otherwise
  it is shed. A queued request whose deadline passes is shed.
- ``on_bind`` hooks (``(request, backend)``, e.g. the ``prefix-affinity`` scorer's index)
  run synchronously each time a request is bound, right after its lease is taken.
- ``pump()`` runs whenever a slot may have freed (a lease released, an undrain, an
  ejection ending); it hands leases to queued requests in order while slots remain.
- Retry-After, in whole seconds, clamped to [1, ``max_retry_after_s``]::

      backlog_tokens = sum(in-flight work) + sum(queued cost)
      throughput     = sum over usable backends of tokens_per_s * cap
      retry_after    = ceil(backlog_tokens / throughput)
"""

from __future__ import annotations

import asyncio
import bisect
import itertools
import math
from collections.abc import Callable
from dataclasses import dataclass, field

from regions.balancer.backends import BackendPool, Lease
from regions.balancer.errors import NoBackendError, ShedError
from regions.balancer.filters.capacity import NAME as CAPACITY
from regions.balancer.pipeline import Decision, Profile
from regions.balancer.types import BackendSnapshot, RequestInfo


@dataclass(frozen=True)
class AdmissionConfig:
    max_queue: int = 1024
    queue_timeout_s: float = 30.0
    max_retry_after_s: int = 300


@dataclass(order=True)
class _Entry:
    sort_key: tuple[int, int]
    request: RequestInfo = field(compare=False)
    future: asyncio.Future[Lease] = field(compare=False)


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
        self.shed_counts: dict[str, int] = {}
        self.on_bind: list[Callable[[RequestInfo, BackendSnapshot], None]] = []
        pool.on_change = self.pump

    @property
    def queued(self) -> int:
        return len(self._queue)

    def queued_cost(self) -> float:
        return sum(e.request.cost_tokens for e in self._queue)

    # -- binding -------------------------------------------------------------------------

    def try_bind(self, request: RequestInfo) -> tuple[Lease | None, Decision]:
        """One synchronous pipeline run; a lease if a backend was picked."""
        decision = self.profile.run(self.pool.snapshot(), request)
        if decision.chosen is None:
            return None, decision
        lease = self.pool.lease(decision.chosen.index, request.cost_tokens)
        for hook in self.on_bind:
            hook(request, decision.chosen)
        return lease, decision

    async def acquire(self, request: RequestInfo, timeout_s: float | None = None) -> Lease:
        """A lease on a backend for ``request``; may wait in the queue up to the deadline."""
        lease, decision = self.try_bind(request)
        if lease is not None:
            return lease
        if decision.stopped_at != CAPACITY:
            raise _no_backend(request, decision)
        self._make_room(request)
        loop = asyncio.get_running_loop()
        entry = _Entry((-request.priority, next(self._seq)), request, loop.create_future())
        bisect.insort(self._queue, entry)
        self._schedule_wake()
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
            if _has_lease(entry.future):
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
        raise self._shed("queue-full")

    def _remove(self, entry: _Entry) -> None:
        i = bisect.bisect_left(self._queue, entry)
        if i < len(self._queue) and self._queue[i] is entry:
            del self._queue[i]
        if not entry.future.done():
            entry.future.cancel()

    def pump(self) -> None:
        """Hand free slots to queued requests, highest priority first (synchronous)."""
        if self._pumping or not self._queue:
            return
        self._pumping = True
        try:
            i = 0
            while i < len(self._queue):
                if self.pool.snapshot().free_slots == 0:
                    break
                entry = self._queue[i]
                if entry.future.done():
                    del self._queue[i]
                    continue
                lease, decision = self.try_bind(entry.request)
                if lease is not None:
                    del self._queue[i]
                    entry.future.set_result(lease)
                elif decision.stopped_at != CAPACITY:
                    del self._queue[i]
                    entry.future.set_exception(_no_backend(entry.request, decision))
                else:
                    i += 1
        finally:
            self._pumping = False
        self._schedule_wake()

    def _schedule_wake(self) -> None:
        """Pump again when the snapshot expires (an ejection ends, slow start ramps)."""
        if not self._queue:
            return
        at = self.pool.next_transition()
        if math.isinf(at):
            return
        loop = asyncio.get_running_loop()
        if self._wake_handle is not None:
            self._wake_handle.cancel()
        delay = max(0.0, at - self.pool.clock())
        self._wake_handle = loop.call_later(delay + 1e-3, self.pump)

    # -- shedding ------------------------------------------------------------------------

    def retry_after(self) -> int:
        snapshot = self.pool.snapshot()
        usable = [b for b in snapshot.backends if b.healthy and not b.ejected and not b.draining]
        throughput = sum(b.tokens_per_s * b.cap for b in usable)
        backlog = sum(b.work_tokens for b in snapshot.backends) + self.queued_cost()
        if throughput <= 0:
            return self.config.max_retry_after_s
        seconds = math.ceil(backlog / throughput)
        return max(1, min(self.config.max_retry_after_s, seconds))

    def _shed(self, reason: str) -> ShedError:
        self.shed_counts[reason] = self.shed_counts.get(reason, 0) + 1
        return ShedError(reason, self.retry_after())

    def explain(self, request: RequestInfo) -> Decision:
        return self.profile.run(self.pool.snapshot(), request, explain=True)


def _has_lease(future: asyncio.Future[Lease]) -> bool:
    return future.done() and not future.cancelled() and future.exception() is None


def _no_backend(request: RequestInfo, decision: Decision) -> NoBackendError:
    stage = decision.stopped_at or "unknown"
    if stage == "model":
        return NoBackendError(stage, f"the model {request.model!r} is not served in this region")
    return NoBackendError(stage, f"no backend available ({stage})")
