"""Heartbeats of every process (``state.instances``) in a real Valkey: written, read back
with their age, shown as gone when not renewed, forgotten after an hour."""

from __future__ import annotations

import asyncio
import json

from state import AsyncStateStore, StateStore
from state.instances import FORGET_S, GONE_S, Instance, this_process


def test_heartbeats_are_listed_with_their_age_and_old_ones_forgotten(
        store: StateStore, valkey, prefix: str) -> None:
    me = this_process("worker", "probes.eu-west", "eu-west")
    store.heartbeat(me)
    gone = Instance("balancer", "10.0.0.2:8080#7", "10.0.0.2:8080", "eu-west", "h", 7)
    long_gone = Instance("dns", "10.0.0.3:53#9", "10.0.0.3:53", "", "h", 9)
    now = me.seen().seen_at
    store.client.hset(store.keys.instances, mapping={
        gone.field: gone.seen(now - GONE_S - 1).to_json(),
        long_gone.field: long_gone.seen(now - FORGET_S - 1).to_json(),
        "api/broken": "{not json"})

    async def read() -> list[Instance]:
        aio = AsyncStateStore.from_url(valkey.url, prefix=prefix)
        try:
            return await aio.instances()
        finally:
            await aio.close()

    found = asyncio.run(read())
    assert [i.field for i in found] == [gone.field, me.field]  # by role, region, name
    states = {i.role: i.status(now)["state"] for i in found}
    assert states == {"worker": "up", "balancer": "gone"}
    assert found[1].region == "eu-west" and found[1].address == "probes.eu-west"
    # the long gone and the unreadable were removed by the reader
    assert set(store.client.hkeys(store.keys.instances)) == {gone.field.encode(),
                                                             me.field.encode()}
    assert json.loads(store.client.hget(store.keys.instances, me.field))["pid"] == me.pid
