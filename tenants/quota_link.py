"""A quota gate's traffic with Redis: scripts under a time bound, whether Redis answers, and
the calls made off the request path, bounded in number.

Every call is bounded by ``timeout_s`` whatever the client's own timeouts. A failed call
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
DEFAULT_RETRY_S = 1.0
DEFAULT_MAX_BACKGROUND = 16

T = TypeVar("T")
Clock = Callable[[], float]


class QuotaLink:
    """One gate's connection to the shared quota state."""

    def __init__(
        self, client: aioredis.Redis, clock: Clock, *, timeout_s: float = DEFAULT_TIMEOUT_S,
        retry_s: float = DEFAULT_RETRY_S, max_background: int = DEFAULT_MAX_BACKGROUND,
    ) -> None:
        self._client = client
        self._clock = clock
        self._timeout_s = timeout_s
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
        Raises what the client raises, or TimeoutError after ``timeout_s``."""
        async with asyncio.timeout(self._timeout_s):
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
