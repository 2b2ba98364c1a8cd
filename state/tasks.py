"""Small asyncio helpers shared by the background loops (refresher, followers, balancers)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterable

RECANCEL_S = 0.1


async def cancel_and_wait(tasks: Iterable[asyncio.Task[object] | None]) -> None:
    """Cancel every task, then wait until each has finished unwinding.

    A task still running ``RECANCEL_S`` after its cancellation is cancelled again: a library
    may swallow one (redis-py 8.1's async pub/sub does when it arrives while subscribing),
    and the loop would run on for good. The caller's own cancellation is never swallowed."""
    running = [task for task in tasks if task is not None]
    for task in running:
        task.cancel()
    for task in running:
        while not task.done():
            await asyncio.wait([task], timeout=RECANCEL_S)
            if not task.done():
                task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
