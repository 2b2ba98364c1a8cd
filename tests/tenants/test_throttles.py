"""The refusal counters on a real Valkey (``tenants.throttles``): refusals land in minute and
hour buckets by tenant, region, status and limit; ranges sum whole hours and the minutes
around them; an outage keeps the counts until they can be written; the flush loop runs on
its own and once more on exit."""

from __future__ import annotations

import asyncio

from state import AsyncStateStore, EmbeddedValkey
from tenants.throttles import ThrottleKey, ThrottleLedger, throttles_between

HOUR = 3600.0
BASE = 1_800_000_000.0 - 1_800_000_000.0 % HOUR  # the start of an hour
# How long a test waits for the flush loop's write: not what it tests (this process, or a
# round trip, can stand still for a second or more on a loaded machine).
FLUSH_WAIT_S = 10.0


async def test_refusals_sum_by_tenant_region_status_and_limit(valkey: EmbeddedValkey,
                                                              prefix: str) -> None:
    store = AsyncStateStore.from_url(valkey.url, prefix=prefix)
    ledger = ThrottleLedger(store)
    for n in range(5):
        ledger.record("bronze", "us-east", 429, "requests", at=BASE + 10 + n)
    ledger.record("bronze", "eu-west", 429, "requests", at=BASE + HOUR + 5)
    ledger.record("bronze", "eu-west", 429, "concurrent", at=BASE + 2 * HOUR + 120)
    ledger.record("acme", "eu-west", 503, "state_unavailable", at=BASE + 59 * 60 + 1)
    ledger.record("acme", "eu-west", 429, None, at=BASE + 30)
    assert ledger.pending == 9
    assert await ledger.flush()
    assert ledger.pending == 0
    whole = await throttles_between(store, BASE, BASE + 3 * HOUR)
    assert [(r.key, r.refused) for r in whole] == [
        (ThrottleKey("acme", "eu-west", 429, "unknown"), 1),
        (ThrottleKey("acme", "eu-west", 503, "state_unavailable"), 1),
        (ThrottleKey("bronze", "eu-west", 429, "concurrent"), 1),
        (ThrottleKey("bronze", "eu-west", 429, "requests"), 1),
        (ThrottleKey("bronze", "us-east", 429, "requests"), 5),
    ]
    # 00:59 to 02:03: the minute 00:59, hour 01, minutes 02:00-02:02
    part = await throttles_between(store, BASE + 59 * 60, BASE + 2 * HOUR + 180)
    assert sum(r.refused for r in part) == 3
    only = await throttles_between(store, BASE, BASE + HOUR, "bronze")
    assert [r.as_dict() for r in only] == [{"tenant": "bronze", "region": "us-east",
                                            "status": 429, "limit": "requests",
                                            "refused": 5}]
    await store.close()


async def test_an_outage_keeps_the_counts_until_they_can_be_written() -> None:
    with EmbeddedValkey() as own:
        store = AsyncStateStore.from_url(own.url, prefix="throttles")
        ledger = ThrottleLedger(store)
        ledger.record("bronze", "us-east", 429, "requests", at=BASE + 1)
        own.stop()
        assert not await ledger.flush()
        ledger.record("bronze", "us-east", 429, "requests", at=BASE + 2)
        assert ledger.pending == 2
        own.start()
        assert await ledger.flush()
        rows = await throttles_between(store, BASE, BASE + 60)
        assert [r.refused for r in rows] == [2]
        await store.close()


async def test_the_ledger_flushes_on_its_own_and_on_exit(valkey: EmbeddedValkey,
                                                         prefix: str) -> None:
    store = AsyncStateStore.from_url(valkey.url, prefix=prefix)
    ledger = ThrottleLedger(store, flush_s=0.05)
    async with ledger:
        ledger.record("bronze", "us-east", 429, "requests", at=BASE)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + FLUSH_WAIT_S
        while ledger.pending and loop.time() < deadline:
            await asyncio.sleep(0.01)
        assert ledger.pending == 0  # written by its loop: this test never calls flush
        ledger.record("bronze", "us-east", 429, "requests", at=BASE)  # written on exit
    rows = await throttles_between(store, BASE, BASE + 60)
    assert [r.refused for r in rows] == [2]
    await store.close()
