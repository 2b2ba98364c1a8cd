"""What a quota gate sends Redis after the fact, off the request path (``SETTLE``).

Per tenant, at most one call at a time carries: the output tokens its streams took beyond
what the gate held (owed), the input tokens its finished requests read beyond the estimate
they were charged (owed, at once), the unspent slices it returns (and the tokens a finished request
turned out not to have produced, on an output bucket too small to slice), the leases of
streaming requests it refreshes and those of finished requests it releases. When:

- owed output tokens: while streams run, once the tenant owes ``batch_tokens`` or
  ``flush_s`` after the last call (the stream's ``charge_output`` then waits for it), else
  within ``flush_s``; when a request ends owing any, at once (the gate has run out of what it
  held, so the bucket is near its limit and the other gates should see it);
- released leases: within ``release_s`` of the request's end, unless the gate's own next
  admission of the tenant, which goes to Redis anyway, carries them first;
- returned slices: ``ttl_s`` after they were taken (see :mod:`tenants.slices`).

A timer task wakes for those deadlines and ends when nothing is pending. While Redis is
known to be down nothing is sent: owed tokens and releases wait, expired slices are dropped
(they stay charged, and the bucket refills on its own; leases end after their lease time).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TypeVar

from redis.exceptions import RedisError

from tenants.quota_link import QuotaLink
from tenants.quota_scripts import SETTLE, SETTLE_SHA, Settle, Taken, settled_backlogs
from tenants.slices import SliceRules, TenantView, intervals

log = logging.getLogger("tenants.quota")

DEFAULT_RELEASE_S = 0.01
TIMER_SLACK_S = 0.005  # the timer wakes this much after a deadline

T = TypeVar("T")


@dataclass(eq=False)
class TenantState:
    """One tenant at one gate: its view, and what is on its way to or from Redis."""

    keys: list[str]
    flushed_at: float
    view: TenantView = field(default_factory=TenantView)
    refill: asyncio.Task[tuple[Taken, float] | None] | None = None  # the one top-up
    flush: asyncio.Task[None] | None = None  # the one SETTLE under way
    again: bool = False  # settle again when the one under way ends
    releasing: bool = False  # the SETTLE under way releases leases
    streaming: set[str] = field(default_factory=set)  # leases to refresh
    finished: set[str] = field(default_factory=set)  # leases to release
    owing_since: float | None = None
    finished_since: float | None = None

    def take_releases(self) -> list[str]:
        """The finished requests' leases, for a ``TAKE`` to release."""
        releases = sorted(self.finished)
        self.finished.clear()
        self.finished_since = None
        return releases

    def put_back(self, releases: list[str], now: float) -> None:
        if releases:
            self.finished.update(releases)
            self.finished_since = now


class Settler:
    """Sends each tenant's ``SETTLE`` when due; owns the gate's tenant states."""

    def __init__(
        self, link: QuotaLink, clock: Callable[[], float], rules: SliceRules,
        top_up: Callable[[TenantState, float], None], *, lease_s: float, batch_tokens: int,
        flush_s: float, release_s: float = DEFAULT_RELEASE_S,
    ) -> None:
        self.tenants: dict[str, TenantState] = {}
        self._link = link
        self._clock = clock
        self._rules = rules
        self._top_up = top_up
        self._lease_s = lease_s
        self._batch_tokens = batch_tokens
        self._flush_s = flush_s
        self._release_s = release_s
        self._timer: asyncio.Task[None] | None = None
        self._closing = False

    async def owe(self, held: TenantState, tokens: int, lease: str | None) -> None:
        """A stream produced ``tokens``: take them from what the gate holds (topped up in
        the background when low); settle what it owes, and wait, when a batch is due."""
        now = self._clock()
        self._note_owed(held, tokens, None, now)
        if held.view.low(self._rules):
            self._top_up(held, now)
        if lease is not None:
            held.streaming.add(lease)
        if held.view.owed() < self._batch_tokens and now - held.flushed_at < self._flush_s:
            self.wake()
            return
        if not held.view.owed() and not held.streaming:
            return
        if running(held.flush) is not None:
            held.again = True  # the SETTLE under way takes these next
            return
        task = self.settle_soon(held)
        if task is not None:
            await asyncio.shield(task)

    def finished(self, held: TenantState, produced: int, tokens: int,
                 lease: str | None, *, input_owed: int = 0) -> None:
        """A request ended, having produced ``produced`` tokens, ``tokens`` of them not
        taken yet, and read ``input_owed`` prompt tokens more than it was charged (negative:
        fewer); its lease, if any, is to be released. What the gate then owes is settled
        at once, in the background: it ran out of what it held, so the bucket is near its
        limit and the other gates should see it."""
        now = self._clock()
        held.view.correct(input_owed)
        self._note_owed(held, tokens, produced, now)
        if held.view.low(self._rules):
            self._top_up(held, now)
        if lease is not None:
            held.streaming.discard(lease)
            if not held.finished:
                held.finished_since = now
            held.finished.add(lease)
        if held.view.settling(self._rules):
            self.settle_soon(held)
        else:
            self.wake()

    def settle_soon(self, held: TenantState) -> asyncio.Task[None] | None:
        """Start a ``SETTLE`` of what the tenant owes, returns and releases, unless one is
        under way (it settles again when it ends) or Redis is known to be down."""
        if not self._link.due():
            return None
        flush = running(held.flush)
        if flush is not None:
            held.again = True
            return flush
        task = self._link.background(self._settle(held))
        held.flush = task

        def done(_: asyncio.Task[None]) -> None:
            if held.flush is task:
                held.flush = None

        task.add_done_callback(done)
        return task

    def wake(self) -> None:
        """Make sure the timer runs (after slices were taken, or something is owed)."""
        if not self._closing and (self._timer is None or self._timer.done()):
            self._timer = asyncio.create_task(self._tick())

    async def drain(self) -> None:
        """Release the finished requests' leases now (on closing: settle everything), and
        wait for every call under way to end. Output tokens below a batch stay owed."""
        for held in self.tenants.values():
            if held.finished or self._closing:
                self.settle_soon(held)
        await self._link.drain()

    async def close(self) -> None:
        """Return every slice held, settle the rest, and stop the timer."""
        self._closing = True
        if self._timer is not None:
            self._timer.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._timer
        await self._link.drain()
        await self.drain()

    def _note_owed(self, held: TenantState, tokens: int, produced: int | None,
                   now: float) -> None:
        held.view.owe(tokens, produced=produced)
        if held.owing_since is None and held.view.owed():
            held.owing_since = now

    def _due(self, held: TenantState) -> float | None:
        times = []
        expiry = held.view.expiry(self._rules.ttl_s)
        if expiry is not None:
            times.append(expiry)
        if held.owing_since is not None:
            times.append(held.owing_since + self._flush_s)
        if held.finished_since is not None:
            times.append(held.finished_since + self._release_s)
        return min(times, default=None)

    async def _tick(self) -> None:
        while True:
            dues = [when for held in self.tenants.values()
                    if (when := self._due(held)) is not None]
            if not dues:
                return
            await asyncio.sleep(max(0.0, min(dues) - self._clock()) + TIMER_SLACK_S)
            now = self._clock()
            for held in self.tenants.values():
                when = self._due(held)
                if when is None or when > now or self.settle_soon(held) is not None:
                    continue
                # Redis is down: expired slices are dropped, the rest waits its turn again
                held.view.unsettled(held.view.to_settle(now, self._rules))
                held.owing_since = now if held.view.owed() else None
                held.finished_since = now if held.finished else None

    async def _settle(self, held: TenantState) -> None:
        view = held.view
        while True:
            held.again = False
            now = self._clock()
            units = view.to_settle(now, self._rules, everything=self._closing)
            refresh, release = sorted(held.streaming), held.take_releases()
            held.streaming.clear()
            held.owing_since = None
            if not (units or refresh or release):
                return
            held.flushed_at = now
            held.releasing = bool(release)
            settle = Settle(intervals(view.held, set(units) | set(view.limits)), units,
                            self._lease_s, refresh, release)
            try:
                reply = await self._link.run(SETTLE, SETTLE_SHA, held.keys, settle.args())
            except (RedisError, OSError) as exc:
                self._link.lost(exc)
                view.unsettled(units)
                held.put_back(release, now)
                held.owing_since = now if view.owed() else None
                log.debug("quota: %s not settled: %s", units, exc)
                return
            finally:
                held.releasing = False
            self._link.found()
            view.settled(units, settled_backlogs(reply), now)
            if not held.again:
                return


def running(task: asyncio.Task[T] | None) -> asyncio.Task[T] | None:
    """``task`` unless it has ended (its done callbacks, which forget it, may not have run
    yet: awaiting it then would not yield to them)."""
    return None if task is None or task.done() else task
