"""``state.tasks.cancel_and_wait``: background loops stop even when a library swallows
their cancellation once (redis-py 8.1's async pub/sub does while subscribing)."""

from __future__ import annotations

import asyncio
import contextlib

import pytest

from state.tasks import cancel_and_wait


async def swallows_once(log: list[str]) -> None:
    """A loop whose first cancellation is eaten, as by a library that catches it."""
    with contextlib.suppress(asyncio.CancelledError):
        await asyncio.sleep(3600)
    log.append("swallowed")
    await asyncio.sleep(3600)


async def test_a_swallowed_cancellation_is_asked_again() -> None:
    log: list[str] = []
    task = asyncio.create_task(swallows_once(log))
    await asyncio.sleep(0)
    async with asyncio.timeout(5):
        await cancel_and_wait([task, None])
    assert task.cancelled() and log == ["swallowed"]


async def test_the_callers_cancellation_is_not_swallowed() -> None:
    release = asyncio.Event()

    async def stubborn() -> None:
        while not release.is_set():
            with contextlib.suppress(asyncio.CancelledError):
                await asyncio.sleep(3600)

    task = asyncio.create_task(stubborn())
    await asyncio.sleep(0)
    stopper = asyncio.create_task(cancel_and_wait([task]))
    await asyncio.sleep(0.05)
    stopper.cancel()
    with pytest.raises(asyncio.CancelledError):
        await stopper
    release.set()
    task.cancel()
    await asyncio.wait([task], timeout=5)
    assert task.done()


async def test_a_failed_task_still_raises() -> None:
    async def fails() -> None:
        raise KeyError("gone")

    task = asyncio.create_task(fails())
    await asyncio.sleep(0)
    with pytest.raises(KeyError):
        await cancel_and_wait([task])
