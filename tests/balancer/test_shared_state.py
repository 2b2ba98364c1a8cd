# SPDX-License-Identifier: Apache-2.0
"""The balancer and the shared state: a real Valkey, real HTTP, real simulated GPU servers."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from regions.balancer import SharedStateConfig
from state import AsyncStateStore, EmbeddedValkey, RegionLoad, StateUnavailable
from tests.balancer.helpers import admin_client, completion, stack, stream_completion
from tests.run_clock import eventually

REGION = "test-region"


def shared(url: str, prefix: str, **overrides: float) -> SharedStateConfig:
    fields = {"publish_every_s": 0.1, "read_every_s": 0.2, "timeout_s": 0.5}
    fields.update(overrides)
    return SharedStateConfig(url, prefix=prefix, **fields)


@asynccontextmanager
async def state(url: str, prefix: str) -> AsyncIterator[AsyncStateStore]:
    store = AsyncStateStore.from_url(url, prefix=prefix)
    try:
        yield store
    finally:
        await store.close()


async def wait_load(
    store: AsyncStateStore, check, timeout: float = 5.0
) -> RegionLoad:
    async with asyncio.timeout(timeout):
        while True:
            try:
                load = await store.region_load(REGION)
            except StateUnavailable:  # this client's pooled connection died with the server
                load = None
            if load is not None and check(load):
                return load
            await asyncio.sleep(0.05)


def finished(fleet, name: str) -> int:
    return fleet[name].engine.state().counters.finished


async def test_drain_in_state_stops_new_requests_and_in_flight_ones_finish(
    valkey: EmbeddedValkey, prefix: str
) -> None:
    # read_every_s is long: the drain must arrive through the change channel
    config = shared(valkey.url, prefix, read_every_s=60.0)
    async with state(valkey.url, prefix) as store, stack(
        time_scale=5.0, shared_state=config
    ) as (fleet, balancer, client):
        async with client.post("/v1/completions", json=completion(300)) as long:
            drained = long.headers["x-director-backend"]
            other = ({"gpu0", "gpu1"} - {drained}).pop()
            await store.set_drain(REGION, drained)
            await eventually(lambda: balancer.pool[drained].draining)
            assert balancer.state()["backends"][int(drained[-1])]["drained_by"] == ["state"]
            for _ in range(8):
                status, backend, _ = await stream_completion(client, completion(3))
                assert (status, backend) == (200, other)
            body = await long.read()  # the in-flight stream finishes on the drained GPU
        assert long.status == 200 and body.endswith(b"data: [DONE]\n\n")
        assert body.count(b"data: {") == 300
        assert finished(fleet, drained) == 1  # the long one, and nothing after the drain
        assert finished(fleet, other) == 8

        await store.set_drain(REGION, drained, draining=False)
        await eventually(lambda: not balancer.pool[drained].draining)
        seen = set()
        for _ in range(30):
            seen.add((await stream_completion(client, completion(3)))[1])
            if drained in seen:
                break
        assert drained in seen
        assert balancer.pool.in_flight() == 0


async def test_state_drain_and_admin_drain_are_held_apart(
    valkey: EmbeddedValkey, prefix: str
) -> None:
    async with state(valkey.url, prefix) as store, stack(
        shared_state=shared(valkey.url, prefix)
    ) as (_, balancer, _client):
        await store.set_drain(REGION, "gpu0")
        await eventually(lambda: balancer.pool["gpu0"].draining)
        async with admin_client(balancer) as adm, \
                adm.post("/_admin/undrain", json={"backend": "gpu0"}) as resp:
            assert (await resp.json())["drained_by"] == ["state"]  # the state's drain holds
        balancer.drain("gpu1")
        await store.set_drain(REGION, "gpu0", draining=False)
        await eventually(lambda: not balancer.pool["gpu0"].draining)
        await asyncio.sleep(0.5)  # several reads later, the admin drain still holds
        assert balancer.pool["gpu1"].drains == {"admin"}


async def test_region_load_is_published(valkey: EmbeddedValkey, prefix: str) -> None:
    """One slot, one long stream in it, one request queued: the published load says so."""
    async with state(valkey.url, prefix) as store, stack(
        (1.0,), time_scale=5.0, cap=1,
        shared_state=shared(valkey.url, prefix), capacity_rps=4.0
    ) as (_, balancer, client):
        idle = await wait_load(store, lambda load: True)
        assert (idle.capacity, idle.queue_depth, idle.in_flight) == (4.0, 0.0, 0.0)
        assert abs(idle.timestamp - time.time()) < 5
        async with client.post("/v1/completions", json=completion(200)) as long:
            queued = asyncio.create_task(stream_completion(client, completion(2)))
            busy = await wait_load(store, lambda load: load.queue_depth >= 1)
            assert busy.in_flight == 1.0
            assert busy.utilization >= 1.0  # a region that queues is at capacity
            assert busy.outstanding_seconds > 0
            await long.read()
        assert (await queued)[0] == 200
        await wait_load(store, lambda load: load.queue_depth == 0 and load.in_flight == 0)
        assert balancer.state()["shared_state"]["reachable"] is True


async def test_two_balancers_of_a_region_publish_their_load_side_by_side(
    valkey: EmbeddedValkey, prefix: str
) -> None:
    """Each writes its own record (one overwriting the other would show half the load):
    a stream in each, and the region's load counts both, its capacity once."""
    config = shared(valkey.url, prefix)
    async with state(valkey.url, prefix) as store, stack(
        (1.0,), time_scale=5.0, cap=1, shared_state=config, capacity_rps=4.0
    ) as (_, one, first), stack(
        (1.0,), time_scale=5.0, cap=1, shared_state=config, capacity_rps=4.0
    ) as (_, two, second):
        assert one.link is not None and two.link is not None
        assert one.link.instance.name != two.link.instance.name
        async with first.post("/v1/completions", json=completion(200)) as a, \
                second.post("/v1/completions", json=completion(200)) as b:
            both = await wait_load(store, lambda load: load.in_flight == 2.0)
            assert both.capacity == 4.0
            await a.read()
            await b.read()


async def test_draining_a_gpu_lowers_the_published_capacity(
    valkey: EmbeddedValkey, prefix: str
) -> None:
    async with state(valkey.url, prefix) as store, stack(
        shared_state=shared(valkey.url, prefix), capacity_rps=10.0
    ):
        await wait_load(store, lambda load: load.capacity == 10.0)
        await store.set_drain(REGION, "gpu1")
        # no speeds learned yet: both GPUs weigh the same, so half the capacity is left
        await wait_load(store, lambda load: load.capacity == 5.0)


async def test_probe_health_in_state_is_followed_unless_stale(
    valkey: EmbeddedValkey, prefix: str
) -> None:
    config = shared(valkey.url, prefix, stale_after_s=30.0)
    async with state(valkey.url, prefix) as store, stack(
        (1.0, 1.0, 1.0), shared_state=config
    ) as (_, balancer, client):
        await store.record_probe(REGION, "gpu0", ok=False, rise=1, fall=1)
        await store.record_probe(REGION, "gpu1", ok=False, rise=1, fall=1,
                                 now=time.time() - 120)  # the workers stopped long ago
        await eventually(lambda: not balancer.pool["gpu0"].healthy)
        assert balancer.pool["gpu1"].healthy
        for _ in range(6):
            status, backend, _ = await stream_completion(client, completion(2))
            assert status == 200 and backend != "gpu0"
        await store.record_probe(REGION, "gpu0", ok=True, rise=1, fall=1)
        await eventually(lambda: balancer.pool["gpu0"].healthy)


async def test_serving_goes_on_when_valkey_dies_and_resumes_when_it_returns(
    prefix: str,
) -> None:
    server = EmbeddedValkey().start()
    try:
        async with state(server.url, prefix) as store, stack(
            shared_state=shared(server.url, prefix), capacity_rps=10.0
        ) as (_, balancer, client):
            await store.set_drain(REGION, "gpu0")
            await eventually(lambda: balancer.pool["gpu0"].draining)
            await wait_load(store, lambda load: True)

            server.stop()
            await eventually(lambda: balancer.link.reachable is False)
            for _ in range(8):  # served, and the last known drain still holds
                status, backend, _ = await stream_completion(client, completion(3))
                assert (status, backend) == (200, "gpu1")
            async with admin_client(balancer) as adm, adm.get("/metrics") as resp:
                text = await resp.text()
            assert "director_balancer_state_reachable 0.0" in text
            assert 'director_balancer_state_errors_total{op=' in text
            async with admin_client(balancer) as adm, adm.get("/_admin/state") as resp:
                assert (await resp.json())["shared_state"]["reachable"] is False

            server.start()  # same port and password, empty: nothing drained any more
            await eventually(lambda: not balancer.pool["gpu0"].draining, timeout=10)
            assert balancer.link.reachable is True
            await wait_load(store, lambda load: load.capacity == 10.0)
    finally:
        server.stop()


async def test_balancer_starts_and_serves_with_valkey_unreachable(prefix: str) -> None:
    from state.ports import free_port

    url = f"redis://127.0.0.1:{free_port()}/0"  # nothing listens there
    async with stack(shared_state=shared(url, prefix)) as (_, balancer, client):
        status, _, body = await stream_completion(client, completion(3))
        assert status == 200 and body.endswith(b"data: [DONE]\n\n")
        assert balancer.link.reachable is False
        async with admin_client(balancer) as adm, adm.get("/_admin/state") as resp:
            data = await resp.json()
        assert data["shared_state"] == {"reachable": False, "published": None}
        assert json.dumps(data)  # plain JSON all the way down
