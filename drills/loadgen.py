# SPDX-License-Identifier: Apache-2.0
"""The load generator: replays an arrival schedule as concurrent client requests.

Open loop: each arrival is sent at its time whatever happened to earlier ones (a slow
system does not slow the offered load down), up to ``client.max_in_flight`` requests at
once; an arrival over that bound is recorded as ``not_sent`` (the generator's limit, not
the system's). Bounded in count (the schedule, itself capped by ``max_requests``) and in
time: after the last arrival, in-flight requests get ``drain`` seconds, then are cancelled.
An arrival of a tenant is sent with that tenant's API key (``keys``).
"""

from __future__ import annotations

import asyncio
import contextlib
import random
from collections.abc import Callable, Mapping

import aiohttp

from drills.arrivals import Schedule
from drills.client import Client, Observer
from drills.cohorts import ResolvedCohort
from drills.dnsclient import DnsClient
from drills.model import Load
from drills.records import RequestRecord
from drills.topology import Topology


class LoadGenerator:
    def __init__(self, schedule: Schedule, cohorts: dict[str, ResolvedCohort],
                 topology: Topology, load: Load, clock: Callable[[], float],
                 observe: Observer | None = None, keys: Mapping[str, str] | None = None,
                 ) -> None:
        self.schedule = schedule
        self.keys = dict(keys or {})  # tenant -> API key
        self.cohorts = cohorts
        self.topology = topology
        self.load = load
        self.clock = clock
        self.observe = observe
        self.records: list[RequestRecord] = []
        self.in_flight = 0
        self._tasks: set[asyncio.Task[None]] = set()
        self._stopped = asyncio.Event()
        self._rng = random.Random(f"clients:{load.seed}")

    def stop(self) -> None:
        """Send no further arrivals (in-flight requests go on)."""
        self._stopped.set()

    async def run(self, drain: float) -> None:
        """Send every arrival at its time, then wait up to ``drain`` s for in-flight ones."""
        spec = self.load.client
        timeout = aiohttp.ClientTimeout(total=None, sock_connect=spec.connect_timeout)
        connector = aiohttp.TCPConnector(limit=0, keepalive_timeout=15)
        async with aiohttp.ClientSession(connector=connector, timeout=timeout,
                                         auto_decompress=False) as session:
            dns_client = DnsClient(self.topology.dns, self.load.dns, self.clock)
            client = Client(self.topology, self.load.request, spec, dns_client, session,
                            self.clock, self.observe, deadline=self.load.duration + drain,
                            keys=self.keys)
            try:
                await self._dispatch(client)
                if self._tasks:
                    await asyncio.wait(set(self._tasks), timeout=drain)
            finally:
                await self.cancel()

    async def _dispatch(self, client: Client) -> None:
        for arrival in self.schedule.arrivals:
            delay = arrival.t - self.clock()
            if delay > 0:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._stopped.wait(), delay)
            if self._stopped.is_set():
                return
            cohort = self.cohorts[arrival.cohort]
            subnet = cohort.subnets[self._rng.randrange(len(cohort.subnets))]
            record = RequestRecord(
                id=f"{self.load.seed}-{arrival.seq}", seq=arrival.seq, cohort=arrival.cohort,
                subnet=str(subnet.network), client_ip=subnet.client_address(self._rng),
                t_issue=self.clock(), prompt_tokens=arrival.prompt_tokens,
                output_tokens=arrival.output_tokens, tenant=arrival.tenant)
            self.records.append(record)
            if self.in_flight >= self.load.client.max_in_flight:
                record.not_sent = record.finished = True
                record.t_end = record.t_issue
                continue
            self.in_flight += 1
            task = asyncio.create_task(client.run(record), name=f"request-{record.id}")
            self._tasks.add(task)
            task.add_done_callback(self._done)

    def _done(self, task: asyncio.Task[None]) -> None:
        self._tasks.discard(task)
        self.in_flight -= 1

    async def cancel(self) -> None:
        """Cancel every in-flight request (its attempt is recorded as cancelled)."""
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)
