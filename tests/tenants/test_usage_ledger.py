"""The usage ledger on a real Valkey (``tenants.usage``): recorded requests land in minute
and hour buckets and the usage log; ranges sum whole hours and the minutes around them;
CSV; reading the log page by page; an outage keeps what was not flushed and writes it
when the state is back."""

from __future__ import annotations

import csv
import io

from state import AsyncStateStore, EmbeddedValkey
from tenants.usage import (
    RECONCILE,
    UsageEvent,
    UsageKey,
    UsageLedger,
    read_log,
    rows_csv,
    usage_between,
)

HOUR = 3600.0
BASE = 1_800_000_000.0 - 1_800_000_000.0 % HOUR  # the start of an hour
CHAT = UsageKey("acme", "chat.infer.example.com", "llama", "eu-west", "gpu0")
EMBED = UsageKey("globex", "embed.infer.example.com", "e5", "eu-west", "gpu1")


def event(at: float, key: UsageKey = CHAT, inp: int = 100, out: int = 20,
          cancelled: bool = False) -> UsageEvent:
    return UsageEvent(at, key, inp, out, cancelled, 0.5, request_id=f"r{at}")


async def test_ranges_sum_hours_and_the_minutes_around_them(valkey: EmbeddedValkey,
                                                            prefix: str) -> None:
    store = AsyncStateStore.from_url(valkey.url, prefix=prefix)
    ledger = UsageLedger(store)
    times = [BASE + 30, BASE + 59 * 60 + 1, BASE + HOUR + 5, BASE + 2 * HOUR + 120,
             BASE + 3 * HOUR + 10]
    for at in times:
        ledger.record(event(at))
    ledger.record(event(BASE + 40, EMBED, inp=7, out=3, cancelled=True))
    assert await ledger.flush()
    whole = await usage_between(store, BASE, BASE + 4 * HOUR)
    chat = next(r for r in whole if r.key == CHAT)
    assert (chat.requests, chat.input_tokens, chat.output_tokens) == (5, 500, 100)
    assert chat.gpu_seconds == 2.5
    # 00:59 to 02:03: the minute 00:59, hour 01, minutes 02:00-02:02
    part = await usage_between(store, BASE + 59 * 60, BASE + 2 * HOUR + 180, "acme")
    assert [r.requests for r in part] == [3]
    only = await usage_between(store, BASE, BASE + HOUR, "globex")
    assert [(r.key, r.cancelled, r.input_tokens) for r in only] == [(EMBED, 1, 7)]
    table = list(csv.DictReader(io.StringIO(rows_csv(whole))))
    assert {row["tenant"] for row in table} == {"acme", "globex"}
    assert sum(int(row["output_tokens"]) for row in table) == 103
    await store.close()


async def test_the_log_is_read_page_by_page(valkey: EmbeddedValkey, prefix: str) -> None:
    store = AsyncStateStore.from_url(valkey.url, prefix=prefix)
    ledger = UsageLedger(store)
    for n in range(25):
        ledger.record(event(BASE + n))
    await ledger.flush()
    seen, after = [], "-"
    while page := await read_log(store, after, count=10):
        seen += [fields["request_id"] for _, fields in page]
        after = page[-1][0]
    assert seen == [f"r{BASE + n}" for n in range(25)]
    await store.close()


async def test_an_outage_keeps_the_usage_until_it_can_be_written() -> None:
    with EmbeddedValkey() as own:
        store = AsyncStateStore.from_url(own.url, prefix="usage")
        ledger = UsageLedger(store)
        ledger.record(event(BASE + 1))
        own.stop()
        assert not await ledger.flush()
        ledger.record(event(BASE + 2, out=5))
        assert ledger.pending == 2
        own.start()
        assert await ledger.flush()
        assert ledger.pending == 0
        rows = await usage_between(store, BASE, BASE + 60)
        assert [(r.requests, r.output_tokens) for r in rows] == [(2, 25)]
        await store.close()


async def test_a_reconciliation_adds_tokens_and_counts_no_request(valkey: EmbeddedValkey,
                                                                  prefix: str) -> None:
    store = AsyncStateStore.from_url(valkey.url, prefix=prefix)
    ledger = UsageLedger(store)
    ledger.record(event(BASE + 1, out=4, cancelled=True))
    ledger.record(UsageEvent(BASE + 2, CHAT, 0, 6, False, 0.0, kind=RECONCILE))
    assert await ledger.flush()
    rows = await usage_between(store, BASE, BASE + 60)
    assert [(r.requests, r.output_tokens, r.cancelled) for r in rows] == [(1, 10, 1)]
    log = await read_log(store)
    assert [(f["kind"], f["output_tokens"]) for _, f in log] == [("request", "4"),
                                                                  ("reconcile", "6")]
    await store.close()
