# SPDX-License-Identifier: Apache-2.0
"""Exact output tokens for cancelled requests: each backend's recorded output reconciled
against the engine's own generated-token counter.

When a client leaves mid-stream the balancer closes the upstream connection and records the
pieces it relayed, but the engine generates a few more tokens before it notices (about one
scheduling step's worth). Only the engine's cumulative counter has them
(``vllm:generation_tokens_total``, ``sglang:generation_tokens_total``, read by
``engines.parse_load``). Per backend a ``Tally`` keeps that counter's value at the last
reconciliation (the baseline), the output tokens this balancer recorded for the requests
that finished there since, and the keys of those that ended short (not whole, and without
the engine's own usage event).

When the backend has no request in flight from this balancer and its engine reports
nothing running or waiting, the counter's growth since the baseline minus what was recorded
is the tokens generated for the short requests after the last piece relayed. That residual
is added to the short requests' keys (split evenly per request, the remainder to the first)
through the balancer's usage path (``account``: the usage buckets, a ``kind=reconcile``
usage log entry, the Prometheus tenant token counter), and the counter becomes the baseline.

**Assumption: this balancer is the engine's only client.** Another client's tokens would
show in the growth and be billed to this balancer's cancelled requests. Its requests in
flight (``running``/``waiting`` above zero) hold reconciliation off, and a residual above
what the short requests could still have generated (their ``max_tokens``) is not
attributed, but another client's finished requests cannot be told apart.

Only a new baseline, nothing attributed, when: there were no short requests; the residual
is negative; the counter went down (the engine restarted: what it counted before is lost);
a request this balancer did not account (no tenant) finished there; the residual exceeds
the short requests' headroom. Each is logged at debug and counted in ``outcomes``. A
backend whose engine exports no such counter (TGI, Triton), or no ``/metrics`` at all (404),
keeps the relayed counts (read again after ``NO_COUNTER_RECHECK_S``).

When: a request that finishes and leaves its backend idle, with short requests not yet
reconciled (or no baseline yet), schedules a scrape of that backend's ``/metrics``
(``read``: the engine scraper's session and parsing), at most one per ``every_s``, after
``settle_s`` for the engine to notice the disconnects; retried briefly while the engine
still reports work. A request bound to the backend, or finished there, before the page
arrives voids the attempt (the next idle moment tries again). ``baseline_all`` reads the
baselines before the balancer listens; ``close``, once the balancer's requests have ended,
reconciles what is left, so a run's totals are exact. The request path itself costs a
counter add (``finished``).
"""

from __future__ import annotations

import asyncio
import enum
import logging
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import engines
from regions.balancer.scheduling.backend import Backend
from regions.balancer.scheduling.backends import BackendPool
from regions.balancer.signals.engine_scrape import SCRAPE_ERRORS, MetricsStatus
from state.tasks import cancel_and_wait
from tenants.usage import UsageKey

log = logging.getLogger(__name__)

EVERY_S = 1.0
SETTLE_S = 0.05
RETRY_FOR_S = 1.0  # how long an idle moment's attempt waits for the engine to go idle
CLOSE_WAIT_S = 2.0  # how long ``close`` waits for the engines to go idle
NO_COUNTER_RECHECK_S = 300.0  # a page without the counter is read again after this


@dataclass(frozen=True)
class Settlement:
    """What one reconciliation attributes: extra output tokens per key, and why."""

    shares: tuple[tuple[UsageKey, int], ...]
    outcome: str  # attributed, first, reset, tainted, no-short, negative, over-headroom
    residual: int | None = None  # counter growth minus recorded; None without a baseline


class Tally:
    """What one backend finished since its last reconciliation (no I/O)."""

    __slots__ = ("baseline", "finished", "headroom", "recorded", "short", "shorts",
                 "tainted")

    def __init__(self) -> None:
        self.baseline: float | None = None  # the engine's counter at the last one
        self.recorded = 0  # output tokens recorded for requests finished since
        self.finished = 0  # requests finished since (a scrape checks none ended meanwhile)
        self.short: dict[UsageKey, int] = {}  # short requests per key, first one first
        self.shorts = 0
        self.headroom: int | None = 0  # what the short ones could still generate; None: any
        self.tainted = False  # a request not accounted here finished since

    def add(self, output: int, short: UsageKey | None = None,
            headroom: int | None = None) -> None:
        """A request finished with ``output`` tokens recorded; ``short``: its key if it
        ended short, ``headroom``: its ``max_tokens`` minus ``output`` (None: no limit)."""
        self.recorded += output
        self.finished += 1
        if short is not None and self.baseline is not None:  # else the first reading drops it
            self.short[short] = self.short.get(short, 0) + 1
            self.shorts += 1
            if self.headroom is not None:
                self.headroom = None if headroom is None else self.headroom + max(0, headroom)

    def settle(self, counter: float) -> Settlement:
        """Reconcile with the engine's counter read while nothing ran there; ``counter``
        becomes the baseline and the tally starts afresh."""
        baseline, short, shorts = self.baseline, self.short, self.shorts
        headroom, tainted, recorded = self.headroom, self.tainted, self.recorded
        self.restart(counter)
        if baseline is None:
            return Settlement((), "first")
        if counter < baseline:
            return Settlement((), "reset")
        residual = round(counter - baseline) - recorded
        if tainted:
            return Settlement((), "tainted", residual)
        if not shorts:
            return Settlement((), "no-short", residual)
        if residual < 0:
            return Settlement((), "negative", residual)
        if headroom is not None and residual > headroom:
            return Settlement((), "over-headroom", residual)
        return Settlement(split(residual, short, shorts), "attributed", residual)

    def restart(self, baseline: float | None) -> None:
        """Start afresh from ``baseline`` (None: unknown, the next reading sets it)."""
        self.baseline = baseline
        self.recorded = self.finished = self.shorts = 0
        self.short = {}
        self.headroom = 0
        self.tainted = False


def split(tokens: int, short: dict[UsageKey, int], requests: int) -> tuple[
        tuple[UsageKey, int], ...]:
    """``tokens`` split evenly over ``requests`` requests counted per key in ``short``,
    the remainder to the first key; keys that get nothing are left out."""
    each, rest = divmod(tokens, requests)
    shares = []
    for n, (key, count) in enumerate(short.items()):
        share = each * count + (rest if n == 0 else 0)
        if share:
            shares.append((key, share))
    return tuple(shares)


class _Attempt(enum.Enum):
    DONE = "done"  # settled, or nothing to settle
    BUSY = "busy"  # the engine still works: try again shortly
    VOID = "void"  # this balancer used the backend, or the scrape failed: next idle moment


class UsageReconciler:
    """The tallies of one balancer's backends, and the scrapes that settle them."""

    def __init__(self, pool: BackendPool,
                 read: Callable[[Backend], Awaitable[engines.EngineLoad]],
                 account: Callable[[UsageKey, int], None], every_s: float = EVERY_S,
                 settle_s: float = SETTLE_S,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.pool = pool
        self.read = read  # one backend's metrics page
        self.account = account  # extra output tokens for a key
        self.every_s = every_s  # 0: never reconcile
        self.settle_s = settle_s
        self.clock = clock
        self.active = False  # some tenant request has been tallied
        self.outcomes: Counter[str] = Counter()  # settlements by outcome
        self._tallies: dict[str, Tally] = {}
        self._tasks: dict[str, asyncio.Task[None]] = {}
        self._next_at: dict[str, float] = {}  # no scrape of a backend before this
        self._no_counter_until: dict[str, float] = {}

    def tally(self, name: str) -> Tally | None:
        """Backend ``name``'s tally, if it has one."""
        return self._tallies.get(name)

    @property
    def scheduled(self) -> frozenset[str]:
        """The backends with a reading scheduled or under way."""
        return frozenset(self._tasks)

    def finished(self, backend: Backend, output: int, short: UsageKey | None = None,
                 headroom: int | None = None) -> None:
        """A tenant's request finished on ``backend`` (its lease released) with
        ``output`` tokens recorded; see ``Tally.add``."""
        t = self._tallies.get(backend.name)
        if t is None:
            if not self.every_s:
                return
            t = self._tallies[backend.name] = Tally()
            self.active = True
        t.add(output, short, headroom)
        if backend.in_flight == 0 and (t.shorts or t.baseline is None):
            self._soon(backend.name)

    def untracked(self, name: str | None) -> None:
        """A request this balancer does not account finished on backend ``name``: its
        tokens are in the engine's counter, so the tally cannot tell what is whose."""
        t = self._tallies.get(name) if name is not None else None
        if t is not None:
            t.tainted = True

    async def baseline_all(self) -> None:
        """Read every backend's counter now (before the balancer serves anything)."""
        if not self.every_s:
            return
        names = [b.name for b in self.pool if self._counts(b)]
        for name in names:
            self._tallies.setdefault(name, Tally())
        self.active = self.active or bool(names)
        await asyncio.gather(*(self._attempt(name) for name in names))

    async def close(self, wait_s: float = CLOSE_WAIT_S) -> None:
        """Stop the scheduled scrapes, then reconcile every backend with short requests
        left (call once nothing is in flight), waiting up to ``wait_s`` for its engine to
        finish the aborted work."""
        await cancel_and_wait(list(self._tasks.values()))
        self._tasks.clear()
        names = [name for name, t in self._tallies.items()
                 if t.shorts and t.baseline is not None]
        until = self.clock() + wait_s
        await asyncio.gather(*(self._attempts(name, until) for name in names))

    def _counts(self, b: Backend) -> bool:
        """Whether ``b``'s engine may export the counter (unknown engines are read)."""
        known = engines.ENGINES.get(b.spec.engine or "")
        return known is None or bool(known.generation_tokens)

    def _soon(self, name: str) -> None:
        if name in self._tasks:
            return
        now = self.clock()
        if now < self._no_counter_until.get(name, 0.0):
            self._tallies[name].restart(None)  # keep nothing while there is no counter
            return
        delay = max(self.settle_s, self._next_at.get(name, 0.0) - now)
        self._tasks[name] = asyncio.create_task(self._scheduled(name, delay),
                                                name=f"usage-reconcile-{name}")

    async def _scheduled(self, name: str, delay: float) -> None:
        try:
            await asyncio.sleep(delay)
            await self._attempts(name, self.clock() + RETRY_FOR_S)
        finally:
            if self._tasks.get(name) is asyncio.current_task():
                del self._tasks[name]

    async def _attempts(self, name: str, until: float) -> None:
        wait = self.settle_s
        while await self._attempt(name) is _Attempt.BUSY and self.clock() + wait < until:
            await asyncio.sleep(wait)
            wait = min(2 * wait, 0.25)

    async def _attempt(self, name: str) -> _Attempt:
        b, t = self.pool.by_name.get(name), self._tallies.get(name)
        if b is None or t is None:
            self._tallies.pop(name, None)  # the backend left the pool
            return _Attempt.DONE
        if b.in_flight or not self._counts(b):
            return _Attempt.VOID
        self._next_at[name] = self.clock() + self.every_s
        finished = t.finished
        try:
            load = await self.read(b)
        except SCRAPE_ERRORS as exc:
            log.debug("usage reconcile: backend %s: metrics unreadable: %s", name, exc)
            if isinstance(exc, MetricsStatus) and exc.status == 404:
                return self._no_counter(name, t)
            return _Attempt.VOID
        if b.in_flight or t.finished != finished:
            return _Attempt.VOID
        if load.generation_tokens is None:
            log.debug("usage reconcile: backend %s (%s) exports no generated-token counter",
                      name, load.engine)
            return self._no_counter(name, t)
        if load.waiting or load.running:
            return _Attempt.BUSY
        settled = t.settle(load.generation_tokens)
        self.outcomes[settled.outcome] += 1
        for key, tokens in settled.shares:
            self.account(key, tokens)
        if settled.outcome != "attributed" and settled.outcome != "first":
            log.debug("usage reconcile: backend %s: %s (residual %s), re-baselined", name,
                      settled.outcome, settled.residual)
        return _Attempt.DONE

    def _no_counter(self, name: str, t: Tally) -> _Attempt:
        """Keep the relayed counts of backend ``name`` until a later recheck."""
        self._no_counter_until[name] = self.clock() + NO_COUNTER_RECHECK_S
        t.restart(None)
        return _Attempt.DONE
