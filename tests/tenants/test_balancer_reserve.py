"""A tenant's ``reserve`` at a real balancer, over real HTTP, in front of a GPU stand-in
that holds every request open until the test lets it answer: while the reserving tenant
has a request in flight, another tenant's flood gets the slots less the reserve's unheld
part, and the reserving tenant's next requests reach the GPU at once; the tenants' requests
in flight are exported as gauges."""

from __future__ import annotations

import asyncio
import dataclasses
from collections import Counter

import aiohttp
from aiohttp import web
from app_server import serving

from policies.model import Identity, Policy, Tenant
from regions.balancer import BackendSpec, BalancerConfig, SharedStateConfig, build_balancer
from state import AsyncStateStore, EmbeddedValkey
from tenants.api_keys import new_key, store_key
from tests.balancer.helpers import MODEL, admin_client, completion
from tests.run_clock import eventually

SLOTS = 8


def holding_gpu(seen: Counter[str], release: asyncio.Event) -> web.Application:
    """Counts each completion by its prompt (the tenant's name), answers once released."""
    async def completions(request: web.Request) -> web.Response:
        seen[(await request.json())["prompt"]] += 1
        await release.wait()
        return web.json_response({"id": "x", "object": "text_completion", "choices": [
            {"index": 0, "text": "hi", "finish_reason": "stop"}]})

    app = web.Application()
    app.router.add_post("/v1/completions", completions)
    return app


async def test_a_reserve_keeps_its_unheld_slots_free_of_another_tenants_flood(
        example_policy: Policy, valkey: EmbeddedValkey, prefix: str) -> None:
    shared = SharedStateConfig(valkey.url, prefix=prefix)
    keys = {name: new_key(name) for name in ("flood", "steady")}
    admin = AsyncStateStore.from_url(shared.url, prefix=prefix)
    for made in keys.values():
        await store_key(admin, made.stored)
    await admin.close()
    policy = dataclasses.replace(example_policy, identity=Identity(), tenants=(
        Tenant("flood"), Tenant("steady", reserve=0.5)))
    seen: Counter[str] = Counter()
    release = asyncio.Event()
    async with serving(holding_gpu(seen, release)) as gpu:
        balancer = build_balancer(
            "r",
            [BackendSpec("gpu0", gpu, (MODEL,), SLOTS)],
            BalancerConfig(scrape_every_s=0, shared_state=shared, policy=policy),
        )
        async with balancer, aiohttp.ClientSession(base_url=balancer.url) as client:

            async def send(tenant: str) -> int:
                body = completion(3, stream=False, prompt=tenant)
                headers = {"Authorization": f"Bearer {keys[tenant].token}"}
                async with client.post("/v1/completions", json=body, headers=headers) as resp:
                    await resp.read()
                    return resp.status

            steady = [asyncio.create_task(send("steady"))]
            await eventually(lambda: seen["steady"] == 1)
            flood = [asyncio.create_task(send("flood")) for _ in range(10)]
            # 8 slots, steady holds 1 of its 4: 3 kept free, the flood gets 4
            await eventually(lambda: seen["flood"] == 4 and balancer.dispatcher.queued == 6)
            await asyncio.sleep(0.1)
            assert seen["flood"] == 4
            async with admin_client(balancer) as adm, adm.get("/metrics") as resp:
                exported = await resp.text()
            assert 'director_balancer_tenant_in_flight{tenant="flood"} 4.0' in exported
            assert 'director_balancer_tenant_in_flight{tenant="steady"} 1.0' in exported
            steady += [asyncio.create_task(send("steady")) for _ in range(3)]
            await eventually(lambda: seen["steady"] == 4)  # no slot had to turn over
            assert seen["flood"] == 4 and balancer.dispatcher.queued == 6
            release.set()
            assert set(await asyncio.gather(*steady, *flood)) == {200}
    assert seen == {"steady": 4, "flood": 10}
