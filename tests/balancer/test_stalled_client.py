# SPDX-License-Identifier: Apache-2.0
"""A client that stops reading a streamed answer is cut after the stall deadline: a raw
socket with a small receive buffer asks a simulated GPU for a long stream and never reads.
The balancer's lease on the GPU and the tenant's concurrency slot come back, and the cut is
counted; a client that reads, slowly, is never cut."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import socket
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import aiohttp
import pytest

from policies.model import Policy, Tenant, TenantQuota
from regions.balancer import (
    BackendSpec,
    Balancer,
    BalancerConfig,
    SharedStateConfig,
    build_balancer,
)
from regions.balancer.http.client_timeouts import ClientTimeouts
from regions.simulator import EngineConfig, Fleet, ServerSpec
from state import EmbeddedValkey
from tests.balancer.helpers import MODEL, completion
from tests.run_clock import eventually
from tests.tenants.test_balancer_quota import keyed, with_tenants

STALL_S = 1.0
LONG = 60_000  # tokens: a stream that outlasts the deadline many times over
SLOW = 1500  # tokens, about 280 kB of SSE, read at 128 kB/s


@pytest.fixture
def shared(valkey: EmbeddedValkey, prefix: str) -> SharedStateConfig:
    return SharedStateConfig(valkey.url, prefix=prefix)


@asynccontextmanager
async def balancer_for(policy: Policy, shared: SharedStateConfig) -> AsyncIterator[Balancer]:
    """One simulated GPU that can stream ``LONG`` tokens, behind a balancer that cuts a
    client after ``STALL_S`` without progress."""
    engine = EngineConfig(max_model_len=LONG + 1000, kv_cache_tokens=4 * LONG)
    spec = ServerSpec("gpu0", models=(MODEL,), engine=engine)
    async with Fleet([spec], time_scale=200.0) as fleet:
        backends = [BackendSpec(s.spec.name, s.url, (MODEL,), 4) for s in fleet]
        config = BalancerConfig(scrape_every_s=0, client=ClientTimeouts(stall_s=STALL_S))
        async with build_balancer(
            "r0", backends, dataclasses.replace(config, shared_state=shared, policy=policy)
        ) as balancer:
            yield balancer


async def never_reading(balancer: Balancer, headers: dict[str, str],
                        body: dict[str, object], rcvbuf: int = 4096) -> socket.socket:
    """A connection that sends a request and then reads nothing by itself (a small
    receive buffer, set before connecting, keeps its TCP window small)."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
    sock.setblocking(False)
    loop = asyncio.get_running_loop()
    await loop.sock_connect(sock, ("127.0.0.1", balancer.port))
    payload = json.dumps(body).encode()
    head = "".join(f"{name}: {value}\r\n" for name, value in {
        "Host": "127.0.0.1", "Content-Type": "application/json",
        "Content-Length": str(len(payload)), **headers}.items())
    await loop.sock_sendall(sock, f"POST /v1/completions HTTP/1.1\r\n{head}\r\n".encode()
                            + payload)
    return sock


def in_flight(balancer: Balancer) -> int:
    return balancer.pool.in_flight()


def stalled(balancer: Balancer) -> float:
    return balancer.metrics.stalled_clients._value.get()


async def test_a_client_that_stops_reading_is_cut_and_frees_its_gpu_slot_and_tenant_slot(
        example_policy: Policy, shared: SharedStateConfig) -> None:
    policy = with_tenants(example_policy, Tenant("acme", quota=TenantQuota(concurrent=1)))
    acme = await keyed(shared, "acme")
    async with balancer_for(policy, shared) as balancer:
        sock = await never_reading(balancer, acme, completion(LONG))
        try:
            await eventually(lambda: in_flight(balancer) == 1, timeout=10.0)
            # the tenant's one slot is taken by the stalled stream
            async with aiohttp.ClientSession(base_url=balancer.url) as client, \
                    client.post("/v1/completions", json=completion(2), headers=acme) as resp:
                assert (resp.status, (await resp.json())["error"]["code"]) == (
                    429, "rate_limit_exceeded")
            # cut within the deadline (generously: filling the buffers takes a moment)
            await eventually(lambda: in_flight(balancer) == 0, timeout=30.0)
            assert stalled(balancer) == 1
            async with aiohttp.ClientSession(base_url=balancer.url) as client, \
                    client.post("/v1/completions", json=completion(2), headers=acme) as resp:
                assert resp.status == 200  # the tenant's slot is free again
                await resp.read()
        finally:
            sock.close()


async def test_a_slow_reader_that_keeps_reading_is_not_cut(example_policy: Policy,
                                                          shared: SharedStateConfig) -> None:
    async with balancer_for(example_policy, shared) as balancer:
        sock = await never_reading(balancer, {}, completion(SLOW), rcvbuf=32 * 1024)
        loop = asyncio.get_running_loop()
        received = b""
        try:
            async with asyncio.timeout(60.0):
                while not received.endswith(b"0\r\n\r\n"):
                    # 32 KiB every quarter of the deadline: slower than the GPU streams,
                    # but progress
                    await asyncio.sleep(STALL_S / 4)
                    data = await loop.sock_recv(sock, 32 * 1024)
                    if not data:
                        break
                    received += data
        finally:
            sock.close()
        assert stalled(balancer) == 0
        assert received.endswith(b"0\r\n\r\n") and received.count(b"data: {") == SLOW
