"""Dead-man timers: undo a drill or a temporary drain after its ttl, unless cancelled first.

A new timer for a key replaces the old one; ``close(run_pending=True)`` runs what is still
pending at shutdown (a fault must not outlive the API that set it).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable

from state.tasks import cancel_and_wait

log = logging.getLogger(__name__)

Revert = Callable[[], Awaitable[object]]


class Deadman:
    """Pending reverts by key, each an asyncio task sleeping until its deadline."""

    def __init__(self) -> None:
        self._tasks: dict[str, tuple[asyncio.Task[None], float, Revert]] = {}

    def schedule(self, key: str, ttl: float, revert: Revert) -> float:
        """Run ``revert`` in ``ttl`` seconds; returns the deadline (wall clock)."""
        self.cancel(key)
        deadline = time.time() + ttl
        task = asyncio.create_task(self._wait(key, ttl, revert), name=f"deadman {key}")
        self._tasks[key] = (task, deadline, revert)
        return deadline

    def cancel(self, key: str) -> bool:
        entry = self._tasks.pop(key, None)
        if entry is None:
            return False
        entry[0].cancel()
        return True

    def deadline(self, key: str) -> float | None:
        entry = self._tasks.get(key)
        return entry[1] if entry else None

    async def close(self, *, run_pending: bool) -> None:
        entries, self._tasks = list(self._tasks.items()), {}
        await cancel_and_wait(task for _key, (task, _deadline, _revert) in entries)
        if run_pending:
            for key, (_task, _deadline, revert) in entries:
                await self._run(key, revert)

    async def _wait(self, key: str, ttl: float, revert: Revert) -> None:
        await asyncio.sleep(ttl)
        self._tasks.pop(key, None)
        await self._run(key, revert)

    @staticmethod
    async def _run(key: str, revert: Revert) -> None:
        try:
            await revert()
        except Exception:
            log.exception("api: dead-man revert of %s failed", key)
