# SPDX-License-Identifier: Apache-2.0
"""vLLM's sleep mode and a server's cold start, simulated.

vLLM (with ``VLLM_SERVER_DEV_MODE=1``) answers ``POST /sleep?level=1|2[&mode=abort|wait]``
(its weights offloaded or dropped and its KV cache freed; ``abort``, the default, ends the
requests it runs), ``POST /wake_up`` (weights and KV cache back: seconds, where a cold start
is a minute or more) and ``GET /is_sleeping`` (``{"is_sleeping": bool}``); asleep, it
generates nothing, while its ``/health`` answers 200 (the process is up). The simulator
does the same: a wake takes ``wake_s`` model seconds (``/wake_up`` answers once it is
done, and ``/is_sleeping`` says true until then), a level 2 sleep wakes in
``cold_start_s`` (the weights are read again); while asleep or waking an inference
request gets 503. ``cold_start_s`` is also the time from the server's start to its first
answer (``/health`` 503 until then: ``starting``), as a vLLM loading its weights.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

from regions.simulator.clock import Clock


@dataclass
class SleepMode:
    """One server's sleep state; times in model seconds on ``clock``."""

    clock: Clock
    wake_s: float = 5.0
    cold_start_s: float = 0.0
    asleep: bool = False
    level: int = 1
    ready_at: float = 0.0  # before this the server is loading (cold start or a wake)
    started_at: float = 0.0  # before this the process is starting (the cold start)
    wakes: int = 0
    _waking: asyncio.Task[None] | None = field(default=None, repr=False)

    def start(self) -> None:
        """The server starts: loading for ``cold_start_s``."""
        self.ready_at = self.started_at = self.clock.now() + self.cold_start_s

    @property
    def loading(self) -> bool:
        return self.clock.now() < self.ready_at

    @property
    def starting(self) -> bool:
        return self.clock.now() < self.started_at

    @property
    def serving(self) -> bool:
        return not self.asleep and not self.loading

    def sleep(self, level: int) -> None:
        self.asleep, self.level = True, level

    async def wake(self) -> None:
        """Wake (joins a wake under way); returns once awake."""
        if not self.asleep:
            return
        if self._waking is None or self._waking.done():
            self._waking = asyncio.ensure_future(self._wake())
        await asyncio.shield(self._waking)

    async def _wake(self) -> None:
        took = self.cold_start_s if self.level >= 2 else self.wake_s
        self.ready_at = self.clock.now() + took
        await self.clock.sleep_until(self.ready_at)
        self.asleep = False
        self.wakes += 1

    def to_json(self) -> dict[str, object]:
        return {"asleep": self.asleep, "level": self.level, "loading": self.loading,
                "wakes": self.wakes, "wake_s": self.wake_s, "cold_start_s": self.cold_start_s}
