# SPDX-License-Identifier: Apache-2.0
"""Clocks for the engine: wall time scaled by ``time_scale``, and virtual time for tests.

The engine works in *model seconds*, the time a real GPU would take. ``ScaledClock`` maps
them to wall time: with ``time_scale=10`` one model second passes in 0.1 wall seconds, so
benchmarks replay an hour of traffic in six minutes. ``VirtualClock`` jumps straight to
every deadline, so engine tests run instantly and deterministically.
"""

from __future__ import annotations

import asyncio
import time
from typing import Protocol

from regions.simulator.errors import SimConfigError


class Clock(Protocol):
    """What the engine needs from time: read it, and wait until a model-time instant."""

    def now(self) -> float:
        """Current model time in seconds (monotonic, arbitrary origin)."""
        ...

    async def sleep_until(self, deadline: float) -> None:
        """Return once ``now() >= deadline`` (at once if it already is)."""
        ...


class ScaledClock:
    """Monotonic wall clock running ``time_scale`` times faster than real time."""

    def __init__(self, time_scale: float = 1.0) -> None:
        if not time_scale > 0:
            raise SimConfigError(f"time_scale: must be > 0, got {time_scale!r}")
        self.time_scale = time_scale

    def now(self) -> float:
        return time.monotonic() * self.time_scale

    async def sleep_until(self, deadline: float) -> None:
        delay = (deadline - self.now()) / self.time_scale
        await asyncio.sleep(max(delay, 0.0))


class VirtualClock:
    """Virtual time that advances only when the engine sleeps: each sleep jumps to its deadline.

    Safe when the engine loop is the only sleeper, which is how the engine uses it.
    """

    time_scale = 1.0

    def __init__(self, start: float = 0.0) -> None:
        self._now = start

    def now(self) -> float:
        return self._now

    async def sleep_until(self, deadline: float) -> None:
        self._now = max(self._now, deadline)
        await asyncio.sleep(0)
