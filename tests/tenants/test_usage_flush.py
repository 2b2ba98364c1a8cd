"""Usage flushes that survive faults, on a real Valkey: a flush whose reply is lost after it
landed is sent again and counts once (log entry and buckets alike); the usage log is
trimmed by age, not by count; each reader's lag is the age of the oldest entry it has not
read, for API readers and Redis consumer groups, and reaches /metrics."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator

import redis
from prometheus_client import CollectorRegistry, generate_latest

from director.api.usage_lag import UsageLogGauges
from state import AsyncStateStore, EmbeddedValkey
from tenants.throttles import ThrottleLedger, throttles_between
from tenants.usage import UsageEvent, UsageKey, UsageLedger, log_key, read_log, usage_between
from tenants.usage_log import log_lag, record_position

KEY = UsageKey("acme", "chat.infer.example.com", "llama", "eu-west", "gpu0")
BASE = 1_800_000_000.0 - 1_800_000_000.0 % 3600


class ReplyDropper:
    """A TCP relay to a server that can stop passing the server's replies back: the
    commands still land, their answers are lost (a timeout after a write that happened)."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.drop = False
        self.server: asyncio.Server | None = None

    async def _pipe(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                    replies: bool) -> None:
        with contextlib.suppress(OSError, asyncio.CancelledError):
            while data := await reader.read(65536):
                if not (replies and self.drop):
                    writer.write(data)
                    await writer.drain()
        writer.close()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.port)
        await asyncio.gather(self._pipe(reader, up_writer, False),
                             self._pipe(up_reader, writer, True))

    @contextlib.asynccontextmanager
    async def running(self) -> AsyncIterator[str]:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        port = self.server.sockets[0].getsockname()[1]
        try:
            yield f"redis://127.0.0.1:{port}/0"
        finally:
            self.server.close()


def event(at: float, request_id: str) -> UsageEvent:
    return UsageEvent(at, KEY, 100, 20, False, 0.5, request_id=request_id)


async def test_a_flush_whose_reply_was_lost_counts_once(valkey: EmbeddedValkey,
                                                        prefix: str) -> None:
    relay = ReplyDropper(valkey.port or 0)
    async with relay.running() as address:
        url = address.replace("://", f"://:{valkey.password}@")
        stores = [AsyncStateStore.from_url(url, prefix=prefix, timeout=1.0) for _ in range(2)]
        usage, throttles = UsageLedger(stores[0]), ThrottleLedger(stores[1])
        usage.record(event(BASE + 1, "r1"))
        throttles.record("acme", "eu-west", 429, "requests", at=BASE + 2)
        # connected, the script known to the server
        assert await usage.flush()
        assert await throttles.flush()

        usage.record(event(BASE + 2, "r2"))
        throttles.record("acme", "eu-west", 429, "requests", at=BASE + 3)
        relay.drop = True
        assert not await usage.flush()  # it landed; the answer did not
        assert not await throttles.flush()
        assert usage.pending == 1
        usage.record(event(BASE + 3, "r3"))
        relay.drop = False
        assert await usage.flush()
        assert await throttles.flush()
        assert usage.pending == 0 and throttles.pending == 0
        for store in stores:
            await store.close()

    reader = AsyncStateStore.from_url(valkey.url, prefix=prefix)
    (row,) = await usage_between(reader, BASE, BASE + 60)
    assert (row.requests, row.input_tokens, row.output_tokens) == (3, 300, 60)
    assert [f["request_id"] for _, f in await read_log(reader)] == ["r1", "r2", "r3"]
    assert [r.refused for r in await throttles_between(reader, BASE, BASE + 60)] == [2]
    assert usage.duplicates == 1 and throttles.duplicates == 1
    await reader.close()


async def test_the_usage_log_is_trimmed_by_age_not_by_count(valkey: EmbeddedValkey,
                                                            prefix: str) -> None:
    store = AsyncStateStore.from_url(valkey.url, prefix=prefix)
    admin = redis.asyncio.Redis.from_url(valkey.url)
    key = log_key(store)
    old_ms = int((time.time() - 7200) * 1000)  # two hours old
    async with admin.pipeline(transaction=False) as pipe:
        for n in range(250):
            pipe.xadd(key, {"usage": "{}"}, id=f"{old_ms}-{n + 1}")
        await pipe.execute()
    ledger = UsageLedger(store, log_retention_s=3600)
    ledger.record(event(time.time(), "fresh"))
    assert await ledger.flush()
    entries = await admin.xrange(key, "-", "+")
    old = [e for e in entries if int(e[0].decode().split("-")[0]) == old_ms]
    # MINID ~ removes whole nodes (100 entries each by default) older than the window
    assert len(old) < 100
    assert entries[-1][1][b"usage"].decode().count('"request_id":"fresh"') == 1

    young = UsageLedger(store)  # the default window (a day) keeps what a count cap cut
    for n in range(50):
        young.record(event(time.time(), f"y{n}"))
    assert await young.flush()
    assert await admin.xlen(key) == len(old) + 51
    await admin.aclose()
    await store.close()


async def test_each_readers_lag_is_its_oldest_unread_entry(valkey: EmbeddedValkey,
                                                           prefix: str) -> None:
    store = AsyncStateStore.from_url(valkey.url, prefix=prefix)
    admin = redis.asyncio.Redis.from_url(valkey.url)
    key = log_key(store)
    now_ms = int(time.time() * 1000)
    ids = [f"{now_ms - age * 1000}-0" for age in (600, 300, 60)]
    for entry_id in ids:
        await admin.xadd(key, {"usage": "{}"}, id=entry_id)
    await record_position(store, "billing", ids[0], time.time())  # read the oldest only
    await record_position(store, "audit", ids[-1], time.time())  # read everything
    await admin.xgroup_create(key, "warehouse", id="0")
    await admin.xreadgroup("warehouse", "w1", {key: ">"}, count=2)  # two delivered, unacked

    found = await log_lag(store)
    assert found.entries == 3
    assert 599 <= found.oldest_age_s <= 640
    assert 299 <= found.consumers["billing"] <= 340
    assert found.consumers["audit"] == 0
    assert 599 <= found.consumers["group:warehouse"] <= 640  # its oldest unacknowledged

    registry = CollectorRegistry()
    gauges = UsageLogGauges(store, registry)
    assert await gauges.refresh()
    text = generate_latest(registry).decode()
    assert 'director_usage_log_lag_seconds{consumer="billing"}' in text
    assert "director_usage_log_retention_seconds 86400.0" in text
    assert "director_usage_log_entries 3.0" in text
    await admin.aclose()
    await store.close()
