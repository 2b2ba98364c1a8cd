"""The usage log's billing lag on the admin API's ``/metrics`` (``tenants.usage_log``),
read in the background every ``every_s`` seconds, never on a scrape.

- ``director_usage_log_entries``: entries in the log;
- ``director_usage_log_oldest_entry_age_seconds``: age of its oldest entry;
- ``director_usage_log_retention_seconds``: how long an entry is kept;
- ``director_usage_log_lag_seconds{consumer}``: age of the oldest entry each reader has not
  read (0: caught up). An alert fires well before it reaches the retention
  (``deploy/prometheus/alerts-usage.yml``).

While the state is unreachable the last values stay.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging

from prometheus_client import CollectorRegistry, Gauge

from state.aio import AsyncStateStore
from state.errors import StateError
from state.tasks import cancel_and_wait
from tenants.usage import LOG_RETENTION_S
from tenants.usage_log import log_lag

log = logging.getLogger(__name__)

EVERY_S = 15.0


class UsageLogGauges:
    """The gauges, and the task that keeps them current."""

    def __init__(self, store: AsyncStateStore, registry: CollectorRegistry,
                 every_s: float = EVERY_S) -> None:
        self.store = store
        self.every_s = every_s
        self.entries = Gauge("director_usage_log_entries", "Entries in the usage log",
                             registry=registry)
        self.oldest = Gauge("director_usage_log_oldest_entry_age_seconds",
                            "Age of the usage log's oldest entry", registry=registry)
        self.retention = Gauge("director_usage_log_retention_seconds",
                               "How long a usage log entry is kept", registry=registry)
        self.retention.set(LOG_RETENTION_S)
        self.lag = Gauge("director_usage_log_lag_seconds",
                         "Age of the oldest usage log entry a reader has not read "
                         "(0: caught up)", ["consumer"], registry=registry)
        self._task: asyncio.Task[None] | None = None

    async def refresh(self) -> bool:
        """Read the lag once; False (keeping the last values) when the state is down."""
        try:
            found = await log_lag(self.store)
        except StateError as exc:
            log.debug("usage log lag: state unavailable: %s", exc)
            return False
        self.entries.set(found.entries)
        self.oldest.set(found.oldest_age_s)
        self.lag.clear()
        for consumer, seconds in found.consumers.items():
            self.lag.labels(consumer).set(seconds)
        return True

    async def _run(self) -> None:
        while True:
            with contextlib.suppress(Exception):  # never ends: a bad read is tried again
                await self.refresh()
            await asyncio.sleep(self.every_s)

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="usage-log-lag")

    async def stop(self) -> None:
        await cancel_and_wait([self._task])
