# SPDX-License-Identifier: Apache-2.0
"""``GET /v1/models`` of a balancer: answered from a cache, each backend read at most once
per TTL however many clients ask (it used to read every backend on every request)."""

from __future__ import annotations

import asyncio
import time
from collections import Counter

import aiohttp
from aiohttp import web

from regions.balancer import BackendSpec, BalancerConfig, build_balancer
from tests.tenants.app_server import serving

CONFIG = BalancerConfig(scrape_every_s=0, models_ttl_s=60.0)


def models_server(name: str, hits: Counter, models: tuple[str, ...], status: int = 200
                  ) -> web.Application:
    """A backend's ``/v1/models`` that counts its readers."""
    async def list_models(request: web.Request) -> web.Response:
        hits[name] += 1
        data = [{"id": m, "object": "model", "owned_by": name, "max_model_len": 8192}
                for m in models]
        return web.json_response({"object": "list", "data": data}, status=status)

    app = web.Application()
    app.router.add_get("/v1/models", list_models)
    return app


async def ids(client: aiohttp.ClientSession) -> list[str]:
    async with client.get("/v1/models") as resp:
        assert resp.status == 200
        return [m["id"] for m in (await resp.json())["data"]]


async def test_many_requests_read_each_backend_once_per_ttl() -> None:
    hits: Counter = Counter()
    async with serving(models_server("a", hits, ("m1", "m2"))) as a, \
            serving(models_server("b", hits, ("m2", "m3"))) as b:
        specs = [BackendSpec("a", a, ("m1", "m2")), BackendSpec("b", b, ("m2", "m3"))]
        balancer = build_balancer("r", specs, CONFIG)
        async with balancer, aiohttp.ClientSession(base_url=balancer.url) as client:
            answers = await asyncio.gather(*(ids(client) for _ in range(20)))
            answers += [await ids(client) for _ in range(10)]
            assert all(answer == ["m1", "m2", "m3"] for answer in answers)
            assert hits == {"a": 1, "b": 1}  # 30 requests, one read of each backend
            async with client.get("/v1/models") as resp:
                assert (await resp.json())["data"][0]["max_model_len"] == 8192  # as served
            later = time.monotonic() + CONFIG.models_ttl_s + 1
            balancer.catalog.clock = lambda: later  # the TTL has passed
            await asyncio.gather(*(ids(client) for _ in range(10)))
            assert hits == {"a": 2, "b": 2}


async def test_an_unreadable_backend_is_listed_by_its_spec_and_not_read_per_request() -> None:
    hits: Counter = Counter()
    async with serving(models_server("a", hits, ("m1",))) as a, \
            serving(models_server("b", hits, ("m9",), status=500)) as b:
        specs = [BackendSpec("a", a, ("m1",)), BackendSpec("b", b, ("m2",))]
        balancer = build_balancer("r", specs, CONFIG)
        async with balancer, aiohttp.ClientSession(base_url=balancer.url) as client:
            for _ in range(5):
                assert await ids(client) == ["m1", "m2"]
            assert hits == {"a": 1, "b": 1}
            balancer.set_healthy("a", False)  # only usable backends are listed
            assert await ids(client) == ["m2"]
            assert hits == {"a": 1, "b": 1}
