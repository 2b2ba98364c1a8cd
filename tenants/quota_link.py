"""A quota gate's traffic with Redis: scripts under a time bound, whether Redis answers, and
the calls made off the request path, bounded in number.

Every call is bounded whatever the client's own timeouts: by a retransmission timeout
learned from the calls' round trips as TCP learns one (RFC 6298: smoothed round trip plus
four deviations), never below ``timeout_s`` nor above ``max_timeout_s``, doubled after each
call that timed out. Time this process's own event loop spent stalled (a loaded machine) is
not held against Redis: when the loop wakes well past the deadline, the bound starts again
from then (at most ``MAX_STALLS`` times). A failed call
marks Redis unreachable: the gate then leaves it alone for ``retry_s`` seconds before trying
again, and each switch is logged once. Background calls (slice top-ups, output charges,
returned slices, released leases) run as tasks, at most ``max_background`` at a time; the
gate never awaits them on the request path, and :meth:`QuotaLink.drain` waits for them.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Coroutine, Sequence
from typing import Any, TypeVar

import redis.asyncio as aioredis
from redis.exceptions import NoScriptError

from state.guard import describe

log = logging.getLogger("tenants.quota")

DEFAULT_TIMEOUT_S = 0.25
DEFAULT_MAX_TIMEOUT_S = 2.0
MAX_STALLS = 3  # times a call's bound restarts because this process's loop was stalled
DEFAULT_RETRY_S = 1.0
DEFAULT_MAX_BACKGROUND = 16

T = TypeVar("T")
Clock = Callable[[], float]


class QuotaLink:
    """One gate's connection to the shared quota state."""

    def __init__(
        self, client: aioredis.Redis, clock: Clock, *, timeout_s: float = DEFAULT_TIMEOUT_S,
        max_timeout_s: float = DEFAULT_MAX_TIMEOUT_S, retry_s: float = DEFAULT_RETRY_S,
        max_background: int = DEFAULT_MAX_BACKGROUND,
    ) -> None:
        self._client = client
        self._clock = clock
        self._bound = RoundTripBound(timeout_s, max(timeout_s, max_timeout_s))
        self._retry_s = retry_s
        self._where = describe(client)
        self._reachable = True
        self._retry_at = 0.0
        self._slots = asyncio.Semaphore(max_background)
        self._tasks: set[asyncio.Task[Any]] = set()

    @property
    def reachable(self) -> bool:
        """Whether the last call to Redis succeeded."""
        return self._reachable

    def due(self) -> bool:
        """Whether to call Redis: it answered last time, or it is time to try it again."""
        return self._reachable or self._clock() >= self._retry_at

    async def run(
        self, script: str, sha: str, keys: Sequence[str], args: Sequence[object],
    ) -> list[bytes]:
        """EVALSHA, or EVAL when the server does not have the script (restarted, flushed).
        Raises what the client raises, or TimeoutError after the learned bound."""
        loop = asyncio.get_running_loop()
        started = loop.time()
        bound = self._bound.timeout_s
        deadline = started + bound
        call = asyncio.ensure_future(self._script(script, sha, keys, args))
        try:
            for _ in range(MAX_STALLS + 1):
                await asyncio.wait((call,), timeout=max(0.0, deadline - loop.time()))
                woke = loop.time()
                if call.done() or woke - deadline < bound / 2:
                    break
                deadline = woke + bound  # this loop was stalled: the bound runs from now
        except asyncio.CancelledError:
            call.cancel()
            raise
        if not call.done():
            call.cancel()
            self._bound.timed_out()
            raise TimeoutError(f"no answer within {bound:.3f} s")
        reply = call.result()
        self._bound.answered(loop.time() - started)
        return reply

    @property
    def timeout_s(self) -> float:
        """The bound the next call gets."""
        return self._bound.timeout_s

    async def _script(
        self, script: str, sha: str, keys: Sequence[str], args: Sequence[object],
    ) -> list[bytes]:
        try:
            reply: list[bytes] = await self._client.evalsha(sha, len(keys), *keys, *args)
        except NoScriptError:
            reply = await self._client.eval(script, len(keys), *keys, *args)
        return reply

    def lost(self, exc: BaseException) -> None:
        self._retry_at = self._clock() + self._retry_s
        if self._reachable:
            self._reachable = False
            log.warning("quota state %s unreachable (%s): deciding by local limits, or "
                        "refusing redis-down-closed tenants, until it answers",
                        self._where, str(exc) or type(exc).__name__)

    def found(self) -> None:
        if not self._reachable:
            self._reachable = True
            log.info("quota state %s reachable again: quotas are shared again", self._where)

    def start(self, call: Coroutine[Any, Any, T]) -> asyncio.Task[T]:
        """Run ``call`` now as a task that outlives a cancelled caller (for the request path:
        await it shielded)."""
        task = asyncio.create_task(call)
        self._keep(task)
        return task

    def background(self, call: Coroutine[Any, Any, T]) -> asyncio.Task[T]:
        """Run ``call`` off the request path, once one of ``max_background`` slots is free."""
        async def bounded() -> T:
            async with self._slots:
                return await call

        task = asyncio.create_task(bounded())
        self._keep(task)
        return task

    async def drain(self) -> None:
        """Wait until no call started here is running (those they start included)."""
        while self._tasks:
            await asyncio.gather(*list(self._tasks), return_exceptions=True)

    def _keep(self, task: asyncio.Task[Any]) -> None:
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)


class RoundTripBound:
    """A retransmission timeout learned from round trips (RFC 6298, section 2), clamped to
    ``[floor_s, ceiling_s]`` and doubled by each timeout until a call answers."""

    def __init__(self, floor_s: float, ceiling_s: float) -> None:
        if floor_s <= 0:
            raise ValueError("a round-trip bound needs a positive floor")
        self._floor_s = floor_s
        self._ceiling_s = ceiling_s
        self._smoothed: float | None = None
        self._deviation = 0.0
        self._backoff = 1.0

    @property
    def timeout_s(self) -> float:
        learned = 0.0 if self._smoothed is None else self._smoothed + 4 * self._deviation
        return min(self._ceiling_s, max(self._floor_s, learned) * self._backoff)

    def answered(self, round_trip_s: float) -> None:
        if self._smoothed is None:
            self._smoothed, self._deviation = round_trip_s, round_trip_s / 2
        else:
            self._deviation = 0.75 * self._deviation + 0.25 * abs(self._smoothed - round_trip_s)
            self._smoothed = 0.875 * self._smoothed + 0.125 * round_trip_s
        self._backoff = 1.0

    def timed_out(self) -> None:
        self._backoff = min(self._backoff * 2, self._ceiling_s / self._floor_s)
