"""The quota gate's time bound on Redis calls: learned from round trips, backed off after a
timeout, and not fooled by this process's own event loop stalling."""

from __future__ import annotations

import asyncio
import time

import pytest
import redis.asyncio as aioredis

from policies.model import RedisDown, TenantQuota
from state import EmbeddedValkey
from tenants.quota import QuotaGate
from tenants.quota_link import QuotaLink, RoundTripBound
from tests.run_clock import RunClock


def test_the_bound_starts_at_its_floor_and_follows_slow_round_trips() -> None:
    bound = RoundTripBound(0.25, 2.0)
    assert bound.timeout_s == 0.25
    for _ in range(20):
        bound.answered(0.001)
    assert bound.timeout_s == 0.25  # fast answers never take it below the floor
    for _ in range(20):
        bound.answered(0.2)
    assert 0.25 < bound.timeout_s <= 2.0  # a slow path lifts it


def test_a_timeout_doubles_the_bound_until_an_answer_and_the_ceiling_holds() -> None:
    bound = RoundTripBound(0.25, 2.0)
    bound.timed_out()
    assert bound.timeout_s == 0.5
    for _ in range(10):
        bound.timed_out()
    assert bound.timeout_s == 2.0
    bound.answered(0.001)
    assert bound.timeout_s == 0.25


def test_a_bound_needs_a_positive_floor() -> None:
    with pytest.raises(ValueError):
        RoundTripBound(0.0, 1.0)


@pytest.mark.parametrize("connected", [True, False], ids=["connected", "connecting"])
async def test_a_stall_of_this_process_is_not_a_timeout(
    valkey: EmbeddedValkey, prefix: str, connected: bool,
) -> None:
    """The call starts, then this process blocks for four times the bound (as a loaded
    machine does to it): whether the answer is already in the socket or the connection is
    still being made, the gate waits for it rather than declaring Redis down."""
    client = aioredis.Redis.from_url(valkey.url)
    gate = QuotaGate(client, prefix, timeout_s=0.05)
    if connected:
        await client.ping()
    try:
        admission = asyncio.create_task(gate.admit(
            "acme", TenantQuota(concurrent=5), RedisDown.CLOSED, input_tokens=1,
            max_output_tokens=None, request_id="stalled"))
        for _ in range(5):  # the command goes out
            await asyncio.sleep(0)
        time.sleep(0.2)  # blocks the event loop: the stall under test
        result = await admission
        assert result.allowed, result
        assert gate.reachable
    finally:
        await gate.aclose()
        await client.aclose()


async def test_a_silent_server_times_out_at_the_bound_then_twice_it(prefix: str) -> None:
    async def swallow(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.read(-1)
        writer.close()

    silent = await asyncio.start_server(swallow, "127.0.0.1", 0)
    port = silent.sockets[0].getsockname()[1]
    client = aioredis.Redis(host="127.0.0.1", port=port, socket_timeout=None)
    link = QuotaLink(client, time.time, timeout_s=0.05, max_timeout_s=1.0)
    loop = asyncio.get_running_loop()
    try:
        for expected in (0.05, 0.1):
            # at least the bound on the loop's clock; at most a little more of the time the
            # process ran (a stretch without a CPU delays the timer, not the link)
            async with RunClock() as clock:
                started, ran_from = loop.time(), clock()
                with pytest.raises(TimeoutError):
                    await link.run("return 1", "0" * 40, [], [])
                assert loop.time() - started >= expected
                assert clock() - ran_from < expected + 0.3
        assert link.timeout_s == 0.2
    finally:
        silent.close()
        await client.aclose()
