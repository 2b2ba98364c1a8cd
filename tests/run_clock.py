# SPDX-License-Identifier: Apache-2.0
"""Time as the process ran it: the test machine leaves processes without a CPU for
stretches of 60-1,000 ms, dozens in a few seconds (docs/research/test-machine.md), so a
deadline or a duration measured on the wall clock fails tests without a code cause.

``RunClock`` is ``time.monotonic()`` less those stretches; ``eventually`` and
``wait_until`` give a condition ``timeout`` seconds of that time."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")


class RunClock:
    """Seconds this process could run: ``time.monotonic()`` less the stretches in which it
    had no CPU at all.

    The clock is read every ``tick_s`` (by a task: ``async with RunClock() as clock``, or
    by the caller's own polling loop), and by every caller. Two reads more than
    ``tick_s + LATE_S`` apart are a stretch the loop did not run on time, and all but one
    tick of it is not counted. (The process's CPU time cannot tell a stall from work here:
    this VM charges much of what the host takes to whatever process was running: 400
    sleeps of 5 ms cost 3.5 s of user time.)"""

    TICK_S = 0.005
    LATE_S = 0.007  # a tick this late: the loop did not run (a busy one ticks on time)

    def __init__(self, tick_s: float = TICK_S) -> None:
        self.tick_s = tick_s
        self._last = time.monotonic()
        self.lost_s = 0.0  # time not counted so far
        self._ticker: asyncio.Task[None] | None = None

    def __call__(self) -> float:
        now = time.monotonic()
        gap = now - self._last
        if gap > self.tick_s + self.LATE_S:
            self.lost_s += gap - self.tick_s
        self._last = now
        return now - self.lost_s

    async def _tick(self) -> None:
        while True:
            self()
            await asyncio.sleep(self.tick_s)

    async def __aenter__(self) -> RunClock:
        self()
        self._ticker = asyncio.create_task(self._tick(), name="run-clock")
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._ticker is not None:
            self._ticker.cancel()
            await asyncio.gather(self._ticker, return_exceptions=True)


class SimRunClock:
    """The simulator's ``Clock`` on a ``RunClock``: model time runs ``time_scale`` times
    faster than the process runs, and stands still while it is off the CPU."""

    def __init__(self, run: RunClock, time_scale: float) -> None:
        self.run = run
        self.time_scale = time_scale

    def now(self) -> float:
        return self.run() * self.time_scale

    async def sleep_until(self, deadline: float) -> None:
        # a sleep that ends late because the process was off the CPU ends early on this
        # clock: sleep the rest
        while (delay := (deadline - self.now()) / self.time_scale) > 0:
            await asyncio.sleep(delay)


POLL_S = 0.01


async def eventually(check: Callable[[], T], *, timeout: float = 5.0) -> T:
    """``check()``'s first true value, polled every 10 ms; ``TimeoutError`` once it has
    been false for ``timeout`` seconds of run time."""
    clock = RunClock(POLL_S)
    deadline = clock() + timeout
    while True:
        value = check()
        if value:
            return value
        if clock() >= deadline:
            raise TimeoutError(f"still false after {timeout} s of run time "
                               f"({clock.lost_s:.1f} s more without a CPU)")
        await asyncio.sleep(POLL_S)


def wait_until(check: Callable[[], Any], *, timeout: float, poll_s: float = 0.1) -> bool:
    """Blocking: poll ``check()`` until it is true (True) or ``timeout`` seconds of run time
    have passed (False)."""
    clock = RunClock(poll_s)
    deadline = clock() + timeout
    while not check():
        if clock() >= deadline:
            return False
        time.sleep(poll_s)
    return True
