# SPDX-License-Identifier: Apache-2.0
"""A service's degradation ladder: the DSL, the residency proof of each step, and the
balancer walking it on a real simulated fleet (a lighter model, a cache hit, a 429 whose
Retry-After, honoured, is served), never outside the client's jurisdiction."""

from __future__ import annotations

import asyncio
import dataclasses
import json
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from typing import Any

import aiohttp
import pytest

from policies import load_policy_text
from policies.errors import PolicyError
from policies.lint import lint
from policies.matching import Place
from policies.model import DegradeAction, DegradeStep, DegradeTrigger, ResponseCache
from policies.reading import Reporter
from policies.residency import enumerate_paths
from regions.balancer import (
    AdmissionConfig,
    BackendSpec,
    Balancer,
    BalancerConfig,
    build_balancer,
)
from regions.balancer.degrade.retry_promises import RetryPromises
from regions.balancer.signals.overflow import OverflowConfig, OverflowMode
from regions.balancer.tenancy.residency_check import LOOPBACK_EDGE, ResidencyCheck
from regions.simulator import Fleet, ServerSpec
from tests.run_clock import eventually

BIG, SMALL = "big-model", "small-model"
POLICY = """
zone infer.example.com { ns ns1.infer.example.com 127.0.0.1 }
jurisdiction EU { countries SE FR DE }
region eu-west { location 53.3 -6.2; jurisdiction EU; endpoints 127.0.2.1; capacity 10rps }
region eu-central { location 50.1 8.7; jurisdiction EU; endpoints 127.0.3.1; capacity 10rps }
region us-east { location 38.9 -77.0; jurisdiction US; endpoints 127.0.1.1; capacity 10rps }
service chat.infer.example.com {
    models big-model
    residency eu { clients jurisdiction EU; allow eu-west eu-central; all-down answer-allowed }
    unknown-location refuse
    all-down answer-nothing
    cache 1m
    degrade {
        overflow when queue-wait 2s
        model small-model when saturation 100%
        cache
        shed when queue-wait 1s
    }
}
service small.infer.example.com {
    models small-model
    residency eu { clients jurisdiction EU; allow eu-central; all-down answer-allowed }
    unknown-location refuse
    all-down answer-nothing
}
"""
CHAT = "chat.infer.example.com"


def test_the_ladder_is_read_in_order_with_its_triggers() -> None:
    (chat, _) = load_policy_text(POLICY).services
    assert [s.describe() for s in chat.degrade] == [
        "overflow when queue-wait 2s", "model small-model when saturation 100%", "cache",
        "shed when queue-wait 1s"]
    assert chat.degrade[1] == DegradeStep(DegradeAction.MODEL, SMALL,
                                          DegradeTrigger.SATURATION, 1.0)
    with pytest.raises(PolicyError, match="unknown trigger 'queue-length'"):
        load_policy_text(POLICY.replace("queue-wait 2s", "queue-length 2s"))
    with pytest.raises(PolicyError, match=r"missing an argument(.|\n)*when saturation <percent>"):
        load_policy_text(POLICY.replace("saturation 100%", "saturation"))


def test_steps_that_never_serve_are_linted() -> None:
    text = POLICY.replace("    cache 1m\n", "")
    warnings = [d.message for d in lint(load_policy_text(text), Reporter())]
    assert any("the 'cache' step never finds an answer" in w for w in warnings)


def test_the_proof_covers_every_step_and_runs_the_re_check() -> None:
    paths = {(p.service, p.path): p for p in enumerate_paths(load_policy_text(POLICY))}
    overflow = paths[("chat.infer.example.com", "degrade overflow eu-west -> eu-central")]
    assert overflow.answers == ("eu-central",) and not overflow.leaks
    # the re-check keeps the EU rule's clients out of us-east: nothing to answer there
    assert paths[("chat.infer.example.com", "degrade overflow eu-west -> us-east")].answers == ()
    # small-model's own service forbids EU clients in eu-west: that step never serves them
    assert paths[("chat.infer.example.com", "degrade model small-model in eu-west")].answers \
        == ()
    assert paths[("chat.infer.example.com", "degrade model small-model in eu-central")] \
        .answers == ("eu-central",)
    assert paths[("chat.infer.example.com", "degrade cache in eu-west")].answers == \
        ("eu-west",)
    assert not [p for p in paths.values() if p.leaks]


def country_of(address: Any) -> Place:
    return Place()  # clients are placed by the trusted edge's country header here


@asynccontextmanager
async def region(name: str, config: BalancerConfig, *, cap: int = 1,
                 policy: str | None = POLICY) -> AsyncIterator[tuple[Fleet, Balancer]]:
    """``gpu-big`` serving the big model and ``gpu-small`` the small one, one slot each."""
    specs = [ServerSpec("gpu-big", models=(BIG,)), ServerSpec("gpu-small", models=(SMALL,))]
    async with Fleet(specs, time_scale=5) as fleet:
        backends = [BackendSpec(s.spec.name, s.url, s.spec.models, cap) for s in fleet]
        loaded = load_policy_text(policy) if policy else None
        residency = ResidencyCheck(loaded, name, country_of, LOOPBACK_EDGE) if loaded else None
        config = dataclasses.replace(config, policy=loaded, residency=residency)
        async with build_balancer(name, backends, config) as balancer:
            yield fleet, balancer


async def ask(balancer: Balancer, country: str, *, tokens: int = 400,
              **extra: Any) -> tuple[int, dict[str, str], bytes]:
    body = {"model": BIG, "messages": [{"role": "user", "content": "hi"}],
            "max_tokens": tokens, **extra}
    headers = {"Host": CHAT, "X-Director-Client-Country": country}
    async with aiohttp.ClientSession() as client, client.post(
            f"{balancer.url}/v1/chat/completions", json=body, headers=headers) as resp:
        return resp.status, dict(resp.headers), await resp.read()


SMALL_QUEUE = BalancerConfig(admission=AdmissionConfig(max_queue=4))


async def test_a_full_region_answers_with_the_lighter_model_where_residency_allows() -> None:
    async with region("eu-central", SMALL_QUEUE) as (fleet, balancer):
        busy = asyncio.create_task(ask(balancer, "DE", tokens=3000))
        await eventually(lambda: fleet["gpu-big"].engine.state().running == 1)
        status, headers, body = await ask(balancer, "DE", tokens=5)
        assert status == 200 and headers["x-director-degraded"] == f"model={SMALL}"
        assert json.loads(body)["model"] == SMALL
        busy.cancel()


async def test_the_lighter_model_is_never_served_where_its_rules_forbid_the_client() -> None:
    async with region("eu-west", SMALL_QUEUE) as (fleet, balancer):
        busy = asyncio.create_task(ask(balancer, "DE", tokens=3000))
        await eventually(lambda: fleet["gpu-big"].engine.state().running == 1)
        served_small = fleet["gpu-small"].engine.state().counters.prompt_tokens
        # a German client: small-model's service allows it in eu-central only
        tasks = [asyncio.create_task(ask(balancer, "DE", tokens=5)) for _ in range(3)]
        await asyncio.sleep(1.5)  # the queue's head has waited past 'shed when queue-wait 1s'
        status, headers, _ = await ask(balancer, "DE", tokens=5)
        assert status == 429 and headers["x-director-degraded"] == "shed"
        assert int(headers["Retry-After"]) >= 1
        assert fleet["gpu-small"].engine.state().counters.prompt_tokens == served_small
        # a client no rule covers may be given the lighter model here
        status, headers, _ = await ask(balancer, "US", tokens=5)
        assert status == 200 and headers["x-director-degraded"] == f"model={SMALL}"
        busy.cancel()
        for task in tasks:
            task.cancel()


async def test_a_kept_retry_after_is_served_when_honoured() -> None:
    ladder = (DegradeStep(DegradeAction.SHED, trigger=DegradeTrigger.SATURATION,
                          threshold=1.0),)
    config = dataclasses.replace(SMALL_QUEUE, degrade=ladder)
    async with region("r", config, policy=None) as (fleet, balancer):
        busy = asyncio.create_task(ask(balancer, "US", tokens=600))
        await eventually(lambda: fleet["gpu-big"].engine.state().running == 1)
        status, headers, _ = await ask(balancer, "US", tokens=7)
        assert status == 429 and headers["x-director-degraded"] == "shed"
        await asyncio.sleep(int(headers["Retry-After"]))  # honoured
        assert fleet["gpu-big"].engine.state().running == 1  # still full: and yet
        status, headers, _ = await ask(balancer, "US", tokens=7)
        assert status == 200 and "x-director-degraded" not in headers
        await busy


async def test_under_overload_a_cached_answer_is_served_from_the_ladder() -> None:
    ladder = (DegradeStep(DegradeAction.CACHE, trigger=DegradeTrigger.SATURATION,
                          threshold=1.0),)
    config = dataclasses.replace(SMALL_QUEUE, degrade=ladder, cache=ResponseCache(60))
    async with region("r", config, policy=None) as (fleet, balancer):
        status, _, first = await ask(balancer, "US", tokens=5, temperature=0)
        await eventually(lambda: balancer.metrics.cache.labels("stored")._value.get() == 1)
        busy = asyncio.create_task(ask(balancer, "US", tokens=600))
        await eventually(lambda: fleet["gpu-big"].engine.state().running == 1)
        status, headers, again = await ask(balancer, "US", tokens=5, temperature=0)
        assert status == 200 and headers["x-director-degraded"] == "cache"
        assert json.loads(again)["choices"] == json.loads(first)["choices"]
        await busy


async def test_explain_shows_the_ladder_and_its_signals() -> None:
    async with region("eu-central", SMALL_QUEUE) as (_, balancer):
        explained = balancer.explain("/v1/chat/completions", {
            "model": BIG, "messages": [{"role": "user", "content": "x"}]}, {"host": CHAT})
        steps = explained["degrade"]["steps"]
        assert [s["step"] for s in steps][1] == "model small-model when saturation 100%"
        assert steps[1]["trigger_holds"] is False and steps[2]["trigger_holds"] is None
        assert explained["degrade"]["signals"]["saturation"] == 0


def test_promises_are_spread_over_the_seconds_the_region_can_answer() -> None:
    promises = RetryPromises(share=0.5)
    for i in range(60):  # 6 answers a second (54 in the nine whole seconds counted)
        promises.served(100.0 + i / 6)
    after = [promises.promise(RetryPromises.key("t", f"c{i}", b"{}"), 110.0) for i in range(6)]
    assert after == [1, 1, 2, 2, 3, 3]
    key = RetryPromises.key("t", "c0", b"{}")
    assert not promises.redeem(RetryPromises.key("t", "other client", b"{}"), 111.0)
    assert not promises.redeem(key, 105.0)  # too early
    assert promises.redeem(key, 111.2)
    assert not promises.redeem(key, 111.3)  # used up


OVERFLOW_POLICY = POLICY.replace("""    degrade {
        overflow when queue-wait 2s""", """    degrade {
        overflow when saturation 100%""").replace("    cache\n", "").replace(
    "    cache 1m\n", "")


@asynccontextmanager
async def three_regions(siblings: tuple[str, ...]) -> AsyncIterator[
        tuple[Fleet, dict[str, Balancer]]]:
    """A balancer per region, one big-model GPU each; eu-west overflows (proxy) to
    ``siblings``."""
    policy = load_policy_text(OVERFLOW_POLICY)
    names = ("eu-west", "eu-central", "us-east")
    specs = [ServerSpec(f"gpu-{n}", models=(BIG,)) for n in names]
    async with Fleet(specs, time_scale=5) as fleet, AsyncExitStack() as exits:
        balancers: dict[str, Balancer] = {}
        for name in reversed(names):
            residency = ResidencyCheck(policy, name, country_of, LOOPBACK_EDGE)
            overflow = None
            if name == "eu-west":
                overflow = OverflowConfig(OverflowMode.PROXY, urls={
                    s: balancers[s].url for s in siblings})
            config = dataclasses.replace(SMALL_QUEUE, policy=policy, residency=residency,
                                         overflow=overflow)
            backends = [BackendSpec(f"gpu-{name}", fleet[f"gpu-{name}"].url, (BIG,), 1)]
            balancers[name] = await exits.enter_async_context(
                build_balancer(name, backends, config))
        yield fleet, balancers


@pytest.mark.parametrize("siblings", [("us-east",), ("eu-central", "us-east")])
async def test_the_overflow_step_never_leaves_the_client_s_jurisdiction(
        siblings: tuple[str, ...]) -> None:
    async with three_regions(siblings) as (fleet, balancers):
        west = balancers["eu-west"]
        busy = asyncio.create_task(ask(west, "US", tokens=3000))
        await eventually(lambda: fleet["gpu-eu-west"].engine.state().running == 1)
        status, headers, _ = await ask(west, "US", tokens=5)  # no rule holds it
        assert status == 200 and headers["x-director-region"] == siblings[0]
        us_east = fleet["gpu-us-east"].engine.state().counters.prompt_tokens
        german = asyncio.create_task(ask(west, "DE", tokens=5))
        if "eu-central" not in siblings:  # outside the EU only: it waits for eu-west
            await eventually(lambda: west.dispatcher.queued == 1)
            busy.cancel()
        status, headers, _ = await german
        assert status == 200
        assert headers["x-director-region"] == ("eu-central" if "eu-central" in siblings
                                                else "eu-west")
        assert fleet["gpu-us-east"].engine.state().counters.prompt_tokens == us_east
        busy.cancel()


def test_a_promise_past_the_horizon_is_kept_all_the_same() -> None:
    promises = RetryPromises(horizon_s=5)
    for i in range(20):  # 2 answers a second: 1 promise a second
        promises.served(100.0 + i / 2)
    keys = [RetryPromises.key(None, f"c{i}", b"{}") for i in range(8)]
    after = [promises.promise(k, 110.0) for k in keys]
    assert after == [1, 2, 3, 4, 5, 5, 5, 5]  # the last ones overbook the horizon
    assert promises.redeem(keys[-1], 115.0)


async def test_saturation_counts_only_the_model_s_own_queue() -> None:
    ladder = (DegradeStep(DegradeAction.MODEL, SMALL, DegradeTrigger.SATURATION, 1.0),)
    config = dataclasses.replace(SMALL_QUEUE, degrade=ladder)
    async with region("r", config, policy=None) as (_, balancer):
        lighter = [asyncio.create_task(ask(balancer, "US", tokens=2000, model=SMALL))
                   for _ in range(3)]
        await eventually(lambda: balancer.dispatcher.queued_for(SMALL)[0] == 2)
        explained = balancer.ladder.explain(None, BIG)["signals"]
        assert explained["saturation"] == 0 and explained["queue-wait"] == 0
        status, headers, _ = await ask(balancer, "US", tokens=5)  # the big model is idle
        assert status == 200 and "x-director-degraded" not in headers
        for task in lighter:
            task.cancel()


async def test_a_full_lighter_model_passes_to_the_next_step() -> None:
    ladder = (DegradeStep(DegradeAction.MODEL, SMALL, DegradeTrigger.SATURATION, 1.0),
              DegradeStep(DegradeAction.SHED, trigger=DegradeTrigger.SATURATION,
                          threshold=1.0))
    config = dataclasses.replace(SMALL_QUEUE, degrade=ladder)
    async with region("r", config, policy=None) as (fleet, balancer):
        busy = [asyncio.create_task(ask(balancer, "US", tokens=3000, model=model))
                for model in (BIG, SMALL)]
        await eventually(lambda: all(fleet[g].engine.state().running == 1
                                     for g in ("gpu-big", "gpu-small")))
        status, headers, _ = await ask(balancer, "US", tokens=5)
        assert status == 429 and headers["x-director-degraded"] == "shed"
        assert balancer.dispatcher.queued == 0  # it never waited in the lighter queue
        for task in busy:
            task.cancel()
