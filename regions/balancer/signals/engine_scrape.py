# SPDX-License-Identifier: Apache-2.0
"""The balancer reads its backends' own metrics and limits, so it learns their capacity
without being told (``capacity``).

Every ``every_s`` seconds, each backend that has requests in flight, or whose capacity is
unknown, is scraped (an idle one with a known capacity every ``info_every_s``), and every
``binding_every_s`` one whose provisional limit is full or that has more in flight than
it was seen running (``capacity``: the sooner it is read, the sooner the limit doubles or
the capacity is known): ``GET
/metrics`` read with its engine's names (``engines.metrics``) gives running, waiting and
cache usage, which go to ``BackendPool.set_scraped`` (a scrape with waiting requests is a
capacity observation). Every ``info_every_s``, and at start, the engine's info endpoint
(``engines.limits.INFO_PATHS``: SGLang ``/v1/loads``, TGI ``/info``) gives its published
limits. Scrapes run concurrently with a short timeout on the backend's own connection pool;
a failure is counted and clears the backend's scraped load, never stops anything. Two
failures in a row forget the learned capacity (a restart may change it).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

import aiohttp

import engines
from regions.balancer.scheduling.backend import Backend, ScrapedLoad
from regions.balancer.scheduling.backends import BackendPool

log = logging.getLogger(__name__)

TIMEOUT_S = 1.0
# the proxy's sessions do not decompress (bodies pass through as sent): ask for plain text
PLAIN = {"Accept-Encoding": "identity"}
FORGET_AFTER_FAILURES = 2
SCRAPE_ERRORS = (aiohttp.ClientError, TimeoutError, OSError, engines.EngineDataError)


class MetricsStatus(engines.EngineDataError):
    """``/metrics`` answered with a status other than 200."""

    def __init__(self, status: int) -> None:
        super().__init__(f"/metrics: status {status}")
        self.status = status


@dataclass
class ScrapeCounts:
    ok: int = 0
    failed: int = 0
    info_ok: int = 0
    failures_in_a_row: dict[str, int] = field(default_factory=dict)


class EngineScraper:
    """Background task scraping the backends of ``pool``; an async context manager."""

    def __init__(
        self,
        pool: BackendPool,
        sessions: Mapping[str, aiohttp.ClientSession],
        every_s: float = 1.0,
        info_every_s: float = 30.0,
        clock: Callable[[], float] = time.monotonic,
        binding_every_s: float = 0.1,
    ) -> None:
        self.pool = pool
        self.sessions = sessions
        self.every_s = every_s
        self.info_every_s = info_every_s
        self.binding_every_s = min(binding_every_s, every_s)
        self.clock = clock
        self.counts = ScrapeCounts()
        self._info_at: dict[str, float] = {}
        self._scraped_at: dict[str, float] = {}
        self._engine: dict[str, str] = {}  # detected from the page when the spec says none
        self._task: asyncio.Task[None] | None = None
        # told each scrape's load: its LoRA figures, where it has some (adapters.placement)
        self.on_lora: Callable[[str, engines.EngineLoad], None] | None = None

    async def scrape_once(self) -> None:
        """One round over the backends that need it."""
        due = [b for b in self.pool if self._wanted(b)]
        if due:
            await asyncio.gather(*(self._scrape(b) for b in due))

    def _wanted(self, b: Backend) -> bool:
        if b.name not in self.sessions or not b.healthy:
            return False
        if b.in_flight > 0 or b.cap_now.slots is None or b.name not in self._info_at:
            return True
        return self.clock() - self._scraped_at.get(b.name, -1e18) >= self.info_every_s

    def engine(self, b: Backend) -> str | None:
        """The backend's engine: as its spec says, else as its metrics page showed."""
        return b.spec.engine or self._engine.get(b.name)

    async def read_load(self, b: Backend) -> engines.EngineLoad:
        """``b``'s metrics page, read once with its engine's names; raises one of
        ``SCRAPE_ERRORS``."""
        session = self.sessions.get(b.name)
        if session is None:
            raise engines.EngineDataError("no session (backend removed)")
        async with asyncio.timeout(TIMEOUT_S), session.get(b.spec.url + "/metrics",
                                                          headers=PLAIN) as resp:
            if resp.status != 200:
                raise MetricsStatus(resp.status)
            load = engines.parse_load(await resp.text(), self.engine(b))
        self._engine[b.name] = load.engine
        return load

    async def _scrape(self, b: Backend) -> None:
        self._scraped_at[b.name] = self.clock()
        try:
            load = await self.read_load(b)
        except SCRAPE_ERRORS as exc:
            self._failed(b, exc)
            return
        self.counts.ok += 1
        self.counts.failures_in_a_row.pop(b.name, None)
        self.pool.set_scraped(b.name, ScrapedLoad(load.waiting, load.running, load.cache_usage,
                                                    load.kv_tokens))
        if self.on_lora is not None:
            self.on_lora(b.name, load)
        now = self.clock()
        if now - self._info_at.get(b.name, -1e18) >= self.info_every_s:
            self._info_at[b.name] = now
            await self._read_info(b, load.engine)

    async def _read_info(self, b: Backend, engine: str) -> None:
        path = engines.INFO_PATHS.get(engine)
        if path is None:
            return
        try:
            async with asyncio.timeout(TIMEOUT_S), \
                    self.sessions[b.name].get(b.spec.url + path, headers=PLAIN) as resp:
                if resp.status != 200:
                    return
                limits = engines.limits_from_info(engine, await resp.json(content_type=None))
        except (aiohttp.ClientError, TimeoutError, OSError, ValueError) as exc:
            log.debug("backend %s: %s%s unreadable: %s", b.name, b.spec.url, path, exc)
            return
        self.counts.info_ok += 1
        self.pool.set_engine_limits(b.name, limits.max_running, limits.max_in_flight)

    def _failed(self, b: Backend, exc: BaseException) -> None:
        self.counts.failed += 1
        row = self.counts.failures_in_a_row.get(b.name, 0) + 1
        self.counts.failures_in_a_row[b.name] = row
        log.debug("backend %s: metrics scrape failed: %s", b.name, exc)
        self.pool.set_scraped(b.name, ScrapedLoad())
        if row == FORGET_AFTER_FAILURES:
            self.pool.forget_capacity(b.name)
            self._info_at.pop(b.name, None)

    async def scrape_binding(self) -> None:
        """Scrape the backends exploring their provisional limit (``explores``), unless
        scraped in the last ``binding_every_s``."""
        now = self.clock()
        due = [b for b in self.pool
               if b.name in self.sessions and b.healthy
               and b.capacity.explores(b.in_flight)
               and now - self._scraped_at.get(b.name, -1e18) >= self.binding_every_s]
        if due:
            await asyncio.gather(*(self._scrape(b) for b in due))

    async def _run(self) -> None:
        round_at = -1e18
        while True:
            started = self.clock()
            if started - round_at >= self.every_s:
                round_at = started
                await self.scrape_once()
            elif self.binding_every_s > 0:
                await self.scrape_binding()
            step = self.binding_every_s if self.binding_every_s > 0 else self.every_s
            await asyncio.sleep(max(0.0, min(step, round_at + self.every_s - self.clock())))

    async def __aenter__(self) -> EngineScraper:
        if self.every_s > 0:
            self._task = asyncio.create_task(self._run(), name="engine-scrape")
        return self

    async def __aexit__(self, *exc: object) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
