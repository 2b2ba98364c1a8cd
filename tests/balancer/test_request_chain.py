# SPDX-License-Identifier: Apache-2.0
"""A request as a chain of stages (``regions.balancer.http.exchange``): the chain's order,
the configured stage list, and stages on their own in front of a fake next stage, over real
HTTP (an aiohttp server whose handler runs the stage)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager

import aiohttp
import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from policies import load_policy_text
from policies.matching import NOWHERE, Place
from regions.balancer import BackendSpec, BalancerConfig, build_balancer
from regions.balancer.errors import BalancerConfigError
from regions.balancer.http.exchange import Exchange, Next, chain
from regions.balancer.http.parse import Parse, ParseSettings
from regions.balancer.request_chain import STAGES, check_stages
from regions.balancer.scheduling.output_lengths import OutputLengths
from regions.balancer.signals.overflow import OVERFLOW_PARAM, SpillOver
from regions.balancer.tenancy.residency_check import LOOPBACK_EDGE, CheckResidency, ResidencyCheck
from regions.balancer.types import Endpoint
from tests.balancer.helpers import MODEL, completion, stack

Stage = Callable[[Exchange, Next], Awaitable[web.StreamResponse]]
POLICY = """
zone infer.example.com { ns ns1.infer.example.com 127.0.0.1 }
jurisdiction EU { countries SE FR DE }
region eu-west { location 53.3 -6.2; jurisdiction EU; endpoints 127.0.2.1; capacity 10rps }
region us-east { location 38.9 -77.0; jurisdiction US; endpoints 127.0.1.1; capacity 10rps }
service chat.infer.example.com {
    residency eu { clients jurisdiction EU; allow eu-west; all-down answer-allowed }
    unknown-location refuse
    all-down answer-nothing
}
"""


class FakeNext:
    """The rest of the chain: records the exchanges it is given, answers 200."""

    def __init__(self) -> None:
        self.seen: list[Exchange] = []

    async def __call__(self, exchange: Exchange) -> web.StreamResponse:
        self.seen.append(exchange)
        return web.json_response({"ok": True})


@asynccontextmanager
async def serving(stage: Stage, last: Next) -> AsyncIterator[aiohttp.ClientSession]:
    """A server whose every POST runs ``stage`` in front of ``last``."""
    async def handler(request: web.Request) -> web.StreamResponse:
        return await stage(Exchange(request, Endpoint.COMPLETIONS), last)

    app = web.Application()
    app.router.add_post("/v1/completions", handler)
    async with TestServer(app, host="127.0.0.1") as server, \
            aiohttp.ClientSession(base_url=str(server.make_url(""))) as client:
        yield client


async def test_each_stage_wraps_the_rest_and_a_refusal_ends_the_chain() -> None:
    calls: list[str] = []

    def stage(name: str, refuse: bool = False) -> Stage:
        async def run(exchange: Exchange, call_next: Next) -> web.StreamResponse:
            calls.append(f"{name}>")
            if refuse:
                return web.Response(status=403)
            try:
                return await call_next(exchange)
            finally:
                calls.append(f"<{name}")
        return run

    last = FakeNext()
    async with serving(stage("outer"), chain([stage("a"), stage("b")], last)) as client, \
            client.post("/v1/completions", json={}) as resp:
        assert resp.status == 200
    assert calls == ["outer>", "a>", "b>", "<b", "<a", "<outer"]
    calls.clear()
    refusing = chain([stage("a", refuse=True), stage("b")], last)
    async with serving(stage("outer"), refusing) as client, \
            client.post("/v1/completions", json={}) as resp:
        assert resp.status == 403
    assert calls == ["outer>", "a>", "<outer"] and len(last.seen) == 1


def test_the_stage_list_is_checked() -> None:
    assert check_stages(STAGES) == STAGES
    assert check_stages(["parse"]) == ("parse",)
    for bad, says in ((["parse", "hedge"], "unknown"), (["parse", "parse"], "twice"),
                      (["identify"], "need 'parse'"), (["tenant", "parse"], "after 'parse'")):
        with pytest.raises(BalancerConfigError, match=says):
            check_stages(bad)
    with pytest.raises(BalancerConfigError, match="unknown"):
        build_balancer(
            "r",
            [BackendSpec("gpu0", "http://127.0.0.1:9", (MODEL,))],
            BalancerConfig(stages=("parse", "semantic-cache")),
        )


async def test_parse_fills_the_exchange_or_refuses() -> None:
    settings = ParseSettings(max_body_bytes=1024, prefill_ratio=100.0, max_queue_wait_s=30.0)
    slow: list[int] = []
    last = FakeNext()
    async with serving(Parse(settings, OutputLengths(), lambda: slow.append(1)),
                       last) as client:
        async with client.post("/v1/completions", json=completion(7),
                               headers={"x-director-deadline-ms": "1500"}) as resp:
            assert resp.status == 200
        async with client.post("/v1/completions", data=b"{not json") as resp:
            assert resp.status == 400
            assert "not valid JSON" in (await resp.json())["error"]["message"]
        async with client.post("/v1/completions", data=b"x" * 2048) as resp:
            assert resp.status == 413
        async with client.post("/v1/completions", json=completion(7),
                               headers={"x-director-deadline-ms": "soon"}) as resp:
            assert resp.status == 400
    (seen,) = last.seen
    assert seen.info is not None and seen.info.model == MODEL and seen.info.max_tokens == 7
    assert seen.raw and seen.queue_timeout_s == 1.5


async def test_spill_over_takes_the_marker_off_and_passes_other_answers_back() -> None:
    last = FakeNext()
    async with serving(SpillOver(None), last) as client:
        async with client.post(f"/v1/completions?{OVERFLOW_PARAM}=eu-west&x=1",
                               json={}) as resp:
            assert resp.status == 200
        async with client.post("/v1/completions", json={}) as resp:
            assert resp.status == 200
    marked, plain = last.seen
    assert marked.overflowed and OVERFLOW_PARAM not in marked.request.rel_url.query
    assert marked.request.rel_url.query["x"] == "1"
    assert not plain.overflowed


async def test_residency_places_the_client_or_answers_451() -> None:
    policy = load_policy_text(POLICY)

    def nowhere(address: object) -> Place:
        return NOWHERE

    check = ResidencyCheck(policy, "us-east", nowhere, LOOPBACK_EDGE)
    refused: list[str] = []
    stage = CheckResidency(check, "us-east", refused.append)
    last = FakeNext()

    async def parsed(exchange: Exchange, call_next: Next) -> web.StreamResponse:
        exchange.info = None  # the model is not known: every service's rules apply
        return await stage(exchange, call_next)

    host = "chat.infer.example.com"
    async with serving(parsed, last) as client:
        async with client.post("/v1/completions", json={}, headers={
                "Host": host, "X-Director-Client-Country": "DE"}) as resp:
            assert resp.status == 451
            assert resp.headers["x-director-allowed-regions"] == "eu-west"
        async with client.post("/v1/completions", json={}, headers={
                "Host": host, "X-Director-Client-Country": "US"}) as resp:
            assert resp.status == 200
        async with client.post("/v1/completions", json={}, headers={
                "Host": host, "X-Director-Client-Country": "DE, US"}) as resp:
            assert resp.status == 400
    assert refused == ["chat.infer.example.com", "bad-header"]
    (seen,) = last.seen
    assert seen.client is not None and seen.client.place.countries == frozenset({"US"})


async def test_a_balancer_runs_with_stages_left_out() -> None:
    """Identification, overflow, accounting, residency and tenants configured away: the
    request is parsed and forwarded all the same."""
    config = BalancerConfig(stages=("parse",))
    async with stack(config=config) as (_, balancer, client):
        async with client.post("/v1/completions", json=completion(3)) as resp:
            assert resp.status == 200
            await resp.read()
        async with client.post("/v1/completions", data=b"[") as resp:
            assert resp.status == 400
    assert balancer.config.stages == ("parse",)
