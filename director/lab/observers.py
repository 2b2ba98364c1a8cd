"""What an HA drill watches while a fault is on, each a loop bounded by the drill's stop.

- ``DnsWatch``: the answers for the lab's service, from one DNS server or the resolver;
- ``Ledger``: critical writes through the admin APIs (a tenant API key each), with the
  durability each answer reported, checked at the end against what the state holds;
- ``Inference``: chat completions through the region's balancers, a client that tries the
  region's other address when one refuses the connection (as browsers and most SDKs'
  connection pools do with several A records) or does not connect within a second;
- ``Follow``: when each tier is first seen writing to the master after the fault.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import dns.asyncquery
import dns.edns
import dns.exception
import dns.message
import dns.rdatatype
import httpx
import redis
import redis.asyncio as aioredis

from director.up.redis_set import REDIS_PORT
from state import AsyncStateStore, StateError
from tenants.api_keys import load_keys


@dataclass
class DnsSample:
    at: float
    ok: bool
    answer: frozenset[str]
    latency_ms: float


@dataclass
class DnsWatch:
    """Ask ``server``:``port`` for ``name`` every ``every_s`` (with ``subnet`` as ECS)."""

    name: str
    server: str
    port: int = 53
    subnet: str | None = "81.2.69.0/24"
    every_s: float = 0.05
    timeout_s: float = 2.0
    samples: list[DnsSample] = field(default_factory=list)

    async def run(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            options = [dns.edns.ECSOption.from_text(self.subnet)] if self.subnet else []
            query = dns.message.make_query(self.name, dns.rdatatype.A, use_edns=0,
                                           options=options)
            began = time.monotonic()
            try:
                reply = await dns.asyncquery.udp(query, self.server, timeout=self.timeout_s,
                                                 port=self.port)
                answer = frozenset(str(rr) for rrset in reply.answer for rr in rrset
                                   if rrset.rdtype == dns.rdatatype.A)
                ok = reply.rcode() == 0 and bool(answer)
            except (OSError, dns.exception.DNSException):
                ok, answer = False, frozenset()
            self.samples.append(DnsSample(time.time(), ok, answer,
                                          (time.monotonic() - began) * 1000))
            await pause(stop, self.every_s)

    def summary(self, baseline: frozenset[str], since: float,
                dead: str | None = None) -> dict[str, Any]:
        """Queries since ``since``: failed, and changed from ``baseline`` otherwise than by
        leaving out ``dead`` (the address of a balancer the fault took down, which answers
        should leave out: ``left_out_dead`` counts those, from ``left_out_after_s``)."""
        during = [s for s in self.samples if s.at >= since]
        latencies = sorted(s.latency_ms for s in during if s.ok)
        without = baseline - {dead} if dead in baseline and len(baseline) > 1 else None
        left_out = [s for s in during if s.ok and without is not None and s.answer == without]
        return {"server": f"{self.server}:{self.port}", "queries": len(during),
                "failed": sum(not s.ok for s in during),
                "changed": sum(s.ok and s.answer not in (baseline, without) for s in during),
                "left_out_dead": len(left_out),
                "left_out_after_s": round(left_out[0].at - since, 2) if left_out else None,
                "p50_ms": _quantile(latencies, 0.5), "p99_ms": _quantile(latencies, 0.99),
                "max_ms": latencies[-1] if latencies else None}


@dataclass
class LedgerEntry:
    seq: int
    at: float
    key_id: str | None  # None: the write failed (an error answer or no answer)
    durable: bool
    status: int | None
    api: str


@dataclass
class Ledger:
    """One critical write every ``every_s`` through the first API that answers."""

    apis: Sequence[str]  # base URLs
    tenant: str
    token: str
    every_s: float = 0.25
    entries: list[LedgerEntry] = field(default_factory=list)

    async def run(self, stop: asyncio.Event) -> None:
        headers = {"authorization": f"Bearer {self.token}"}
        async with httpx.AsyncClient(timeout=5.0, headers=headers) as client:
            seq = 0
            while not stop.is_set():
                seq += 1
                self.entries.append(await self._write(client, seq))
                await pause(stop, self.every_s)

    async def _write(self, client: httpx.AsyncClient, seq: int) -> LedgerEntry:
        reply, api = await post_key(client, self.apis, self.tenant, f"ledger-{seq}")
        status = reply.status_code if reply is not None else None
        if reply is not None and status == 201:
            body = reply.json()
            return LedgerEntry(seq, time.time(), body["id"],
                               bool(body.get("durability", {}).get("durable")), status, api)
        return LedgerEntry(seq, time.time(), None, False, status, "")

    async def verify(self, store: AsyncStateStore) -> dict[str, Any]:
        """Compare with the keys the state holds now: an acknowledged durable write that
        is missing is a lost write (the goal: none)."""
        held = await load_keys(store)
        written = [e for e in self.entries if e.key_id is not None]
        durable = [e for e in written if e.durable]
        return {"writes": len(self.entries), "failed": len(self.entries) - len(written),
                "durable": len(durable), "not_durable": len(written) - len(durable),
                "lost_durable": [e.key_id for e in durable if e.key_id not in held],
                "lost_not_durable": sum(e.key_id not in held for e in written
                                        if not e.durable)}


@dataclass
class InferenceSample:
    began: float
    ended: float
    ok: bool
    target: str
    error: str = ""


@dataclass
class Inference:
    """A chat completion every ``every_s`` to the region's balancers, in turn."""

    endpoints: Sequence[str]  # base URLs
    model: str
    key: str
    every_s: float = 0.2
    samples: list[InferenceSample] = field(default_factory=list)

    async def run(self, stop: asyncio.Event) -> None:
        body = self._body(max_tokens=8)
        timeout = httpx.Timeout(10.0, connect=1.0)  # an SDK's: a dead host is left quickly
        async with httpx.AsyncClient(timeout=timeout, headers=self._headers) as client:
            turn = 0
            tasks: set[asyncio.Task[None]] = set()
            while not stop.is_set():
                order = [*self.endpoints[turn % len(self.endpoints):],
                         *self.endpoints[:turn % len(self.endpoints)]]
                turn += 1
                task = asyncio.create_task(self._one(client, order, body))
                tasks.add(task)
                task.add_done_callback(tasks.discard)
                await pause(stop, self.every_s)
            if tasks:
                await asyncio.gather(*tasks, return_exceptions=True)

    async def key_known(self, timeout_s: float = 15.0) -> bool:
        """Wait until every balancer takes the key (a new key reaches them with their next
        read of the key table, not at once): requests refused before would be counted as
        failures of the fault under drill."""
        body = self._body(max_tokens=1)
        deadline = time.monotonic() + timeout_s
        async with httpx.AsyncClient(timeout=httpx.Timeout(5.0, connect=1.0),
                                     headers=self._headers) as client:
            waiting = list(self.endpoints)
            while waiting and time.monotonic() < deadline:
                for endpoint in list(waiting):
                    try:
                        reply = await client.post(f"{endpoint}/v1/chat/completions", json=body)
                    except httpx.HTTPError:
                        continue
                    if reply.status_code != 401:
                        waiting.remove(endpoint)
                if waiting:
                    await asyncio.sleep(0.2)
        return not waiting

    @property
    def _headers(self) -> dict[str, str]:
        return {"authorization": f"Bearer {self.key}"}

    def _body(self, max_tokens: int) -> dict[str, Any]:
        return {"model": self.model, "max_tokens": max_tokens,
                "messages": [{"role": "user", "content": "ping"}]}

    async def _one(self, client: httpx.AsyncClient, order: Sequence[str],
                   body: dict[str, Any]) -> None:
        began = time.time()
        error = ""
        for endpoint in order:
            try:
                reply = await client.post(f"{endpoint}/v1/chat/completions", json=body)
            except (httpx.ConnectError, httpx.ConnectTimeout) as exc:
                error = f"{endpoint}: {exc!r}"
                continue  # refused or unreachable before anything was sent: the next
            except httpx.HTTPError as exc:
                self.samples.append(InferenceSample(began, time.time(), False, endpoint,
                                                    repr(exc)))
                return
            self.samples.append(InferenceSample(began, time.time(),
                                                reply.status_code == 200, endpoint,
                                                "" if reply.status_code == 200
                                                else f"status {reply.status_code}"))
            return
        self.samples.append(InferenceSample(began, time.time(), False, "", error))

    def summary(self, since: float, killed: str | None, killed_at: float | None
                ) -> dict[str, Any]:
        during = [s for s in self.samples if s.began >= since - 10]
        failed = [s for s in during if not s.ok]
        in_flight = [s for s in failed if killed and killed_at and s.target == killed
                     and s.began <= killed_at <= s.ended]
        return {"requests": len(during), "failed": len(failed),
                "failed_in_flight_on_killed": len(in_flight),
                "failed_otherwise": len(failed) - len(in_flight),
                "errors": sorted({s.error for s in failed if s not in in_flight})[:5]}


@dataclass
class Follow:
    """Polls the master the Sentinels name; notes when each tier's writes (stamped after
    ``since``) first show there: the balancers' region load, the workers' probe results.
    With ``old`` (the master before a fault that moves it), only once another is named."""

    master: Callable[[], str | None]
    credentials: redis.CredentialProvider | None
    region: str
    gpus: Sequence[str]
    old: str | None = None
    since: float = 0.0
    seen: dict[str, float] = field(default_factory=dict)
    every_s: float = 0.2

    async def run(self, stop: asyncio.Event) -> None:
        stores: dict[str, AsyncStateStore] = {}
        try:
            while not stop.is_set():
                with contextlib.suppress(StateError, redis.exceptions.RedisError):
                    await self._look(stores)
                await pause(stop, self.every_s)
        finally:
            for store in stores.values():
                await store.close()

    async def _look(self, stores: dict[str, AsyncStateStore]) -> None:
        if not self.since:
            return
        address = await asyncio.to_thread(self.master)
        if address is None or address == self.old:
            return
        if address not in stores:
            stores[address] = AsyncStateStore(aioredis.Redis(
                host=address, port=REDIS_PORT, socket_timeout=2, socket_connect_timeout=2,
                credential_provider=self.credentials))
        store, now = stores[address], time.time()
        load = await store.region_load(self.region)
        if load is not None and load.timestamp > self.since:
            self.seen.setdefault("balancers", now)
        for gpu in self.gpus:
            health = await store.gpu_health(self.region, gpu)
            if health is not None and health.checked_at > self.since:
                self.seen.setdefault("workers", now)


async def pause(stop: asyncio.Event, seconds: float) -> None:
    """Wait ``seconds``, or less if ``stop`` is set meanwhile."""
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(stop.wait(), seconds)


async def post_key(client: httpx.AsyncClient, apis: Sequence[str], tenant: str,
                   label: str) -> tuple[httpx.Response | None, str]:
    """Make a key of ``tenant`` through the first API that answers (one that is down or
    answers 5xx: the next); its answer and which API gave it (None, "": none answered)."""
    reply, used = None, ""
    for api in apis:
        try:
            reply = await client.post(f"{api}/api/v1/tenants/{tenant}/keys",
                                      json={"label": label})
        except httpx.HTTPError:
            continue
        used = api
        if reply.status_code < 500:
            break
    return reply, used


def _quantile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    return round(values[min(len(values) - 1, int(q * len(values)))], 2)

