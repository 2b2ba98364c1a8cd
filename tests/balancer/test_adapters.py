# SPDX-License-Identifier: Apache-2.0
"""LoRA adapters on demand: where a request of an adapter goes (pure placement), and end
to end over real HTTP with simulated vLLM servers: loads coalesced, slots respected,
adapters discovered from /v1/models, refusals, and residency judged by the base model."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import aiohttp
import pytest

from director.geo import GeoLocator
from policies import load_policy_text
from regions.balancer import BackendSpec, BalancerConfig, build_balancer
from regions.balancer.adapters.placement import (
    QUEUE,
    USE,
    AdapterPlacement,
    AdapterSpec,
    Load,
    Refuse,
)
from regions.balancer.tenancy.residency_check import LOOPBACK_EDGE, ResidencyCheck
from regions.balancer.types import BackendSnapshot
from regions.simulator import Fleet, ServerSpec
from regions.simulator.config import EngineConfig
from tests.balancer.helpers import MODEL

SQL = AdapterSpec("sql", MODEL, "/adapters/sql")
CHAT = AdapterSpec("chat", MODEL, "/adapters/chat")


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def view(name: str, in_flight: int = 0, models: Sequence[str] = (MODEL,),
         usable: bool = True) -> BackendSnapshot:
    return BackendSnapshot(0, name, frozenset(models), usable, False, False, in_flight, 16,
                           0.0, 50.0, True)


def decided(p: AdapterPlacement, adapter: str, views: list[BackendSnapshot]):
    """``p.decide`` over views that list what ``p`` holds, as the pool publishes it."""
    return p.decide(adapter, [
        BackendSnapshot(0, v.name, v.models | frozenset(p.holding(v.name)), v.healthy, False,
                        False, v.in_flight, 16, 0.0, 50.0, True) for v in views])


def placement(slots: int = 2, clock: Clock | None = None, **kwargs: float) -> AdapterPlacement:
    return AdapterPlacement([SQL, CHAT], {"a": slots, "b": slots, "c": slots},
                            clock=clock or Clock(), **kwargs)


def test_a_holder_within_the_load_bound_is_used() -> None:
    p = placement()
    p.ended("a", "sql", ok=True)
    assert decided(p, "sql", [view("a", 2), view("b", 1)]) == USE


def test_a_busy_holder_gets_a_replica_on_the_least_loaded_server() -> None:
    p = placement()
    p.ended("a", "sql", ok=True)
    assert decided(p, "sql", [view("a", 9), view("b", 3), view("c", 1)]) == Load("c")


def test_a_cold_adapter_joins_the_load_under_way() -> None:
    p = placement()
    assert decided(p, "sql", [view("a", 1), view("b", 0)]) == Load("b")
    p.started("b", "sql", None)
    assert decided(p, "sql", [view("a", 0), view("b", 5)]) == Load("b")


def test_a_full_server_unloads_only_an_idle_adapter() -> None:
    clock = Clock()
    p = placement(slots=1, clock=clock, min_idle_s=60.0)
    p.ended("a", "chat", ok=True)
    p.ended("b", "chat", ok=True)
    p.ended("c", "chat", ok=True)
    views = [view("a", 1), view("b", 0), view("c", 2)]
    # every slot holds an adapter used just now: nowhere has room, so the least loaded
    # server must make room (nobody holds sql)
    assert decided(p, "sql", views) == Load("b", evict="chat")
    clock.now += 61
    p.used("a", "chat")
    p.used("c", "chat")
    assert decided(p, "sql", views) == Load("b", evict="chat")  # b's chat is idle
    p.ended("b", "sql", ok=True)
    p.started("c", "sql", None)
    p.ended("c", "sql", ok=False)  # c refused: it is left out for a while
    assert decided(p, "sql", [view("a", 0), view("b", 30), view("c", 0)]) == QUEUE


def test_no_server_that_can_hold_adapters_is_a_refusal() -> None:
    p = placement(slots=0)
    decision = decided(p, "sql", [view("a"), view("b", models=("other",))])
    assert isinstance(decision, Refuse) and "no usable GPU server" in decision.why


def test_a_listing_read_before_a_load_does_not_undo_it() -> None:
    clock = Clock()
    p = placement(clock=clock)
    read_at = clock.now
    clock.now += 1
    p.ended("a", "sql", ok=True)
    p.observe("a", [MODEL], {"found": (MODEL, "/x"), "other": ("not-served", "/y")}, read_at)
    assert set(p.holding("a")) == {"sql", "found"}
    assert p.spec("found") == AdapterSpec("found", MODEL, "/x", declared=False)
    assert p.spec("other") is None  # an adapter of a model this server does not serve
    p.observe("a", [MODEL], {}, clock.now + 1)
    assert p.holding("a") == ()


def lora_server(name: str, *loras: tuple[str, str], slots: int = 2) -> ServerSpec:
    return ServerSpec(name, models=(MODEL,), lora_modules=loras,
                      engine=EngineConfig(max_loras=slots, max_cpu_loras=slots,
                                          lora_load_s=0.5))


def body(model: str) -> dict[str, object]:
    return {"model": model, "prompt": "hi", "max_tokens": 4, "x_output_tokens": 4}


async def ask(client: aiohttp.ClientSession, model: str) -> tuple[int, str | None]:
    async with client.post("/v1/completions", json=body(model)) as resp:
        await resp.read()
        return resp.status, resp.headers.get("x-director-backend")


def loads(fleet: Fleet) -> dict[str, dict[str, int]]:
    return {name: dict(fleet[name].engine.adapters.loads) for name in ("g0", "g1")}


async def test_a_burst_for_a_cold_adapter_costs_one_load_and_slots_are_respected() -> None:
    specs = [lora_server("g0"), lora_server("g1")]
    async with Fleet(specs, time_scale=20.0) as fleet:
        backends = [BackendSpec(n, fleet[n].url, (MODEL,), 16, adapter_slots=2)
                    for n in ("g0", "g1")]
        adapters = tuple(AdapterSpec(f"ad{i}", MODEL, f"/adapters/ad{i}") for i in range(5))
        config = BalancerConfig(adapters=adapters, adapter_sync_s=0.0)
        balancer = build_balancer("r", backends, config)
        balancer.placement.min_idle_s = 0.0  # any adapter not in use may make room
        async with balancer, aiohttp.ClientSession(base_url=balancer.url) as client:
            answers = await asyncio.gather(*(ask(client, "ad0") for _ in range(12)))
            assert {status for status, _ in answers} == {200}
            assert sum(n.get("ad0", 0) for n in loads(fleet).values()) == 1
            assert len({backend for _, backend in answers}) == 1  # all on the holder
            for name in ("ad1", "ad2", "ad3", "ad4", "ad0"):
                assert (await ask(client, name))[0] == 200
            for name in ("g0", "g1"):
                registered = fleet[name].context.adapters
                assert len(registered) <= 2, registered
                assert set(balancer.placement.holding(name)) == set(registered)
            metrics = await (await client.get(f"{balancer.admin_url}/metrics")).text()
    assert 'director_balancer_adapter_requests_total{outcome="load"}' in metrics
    assert 'director_balancer_adapter_requests_total{outcome="joined"}' in metrics


async def test_adapters_listed_by_a_server_are_found_and_served_without_a_load() -> None:
    specs = [lora_server("g0", ("found", "/adapters/found")), lora_server("g1")]
    async with Fleet(specs, time_scale=20.0) as fleet:
        backends = [BackendSpec(n, fleet[n].url, (MODEL,), 16) for n in ("g0", "g1")]
        balancer = build_balancer("r", backends, BalancerConfig(adapter_sync_s=0.05))
        async with balancer, aiohttp.ClientSession(base_url=balancer.url) as client:
            async with asyncio.timeout(5):
                while balancer.placement.spec("found") is None:
                    await asyncio.sleep(0.02)
            assert await ask(client, "found") == (200, "g0")
            assert loads(fleet) == {"g0": {"found": 1}, "g1": {}}  # its start's load only
            assert balancer.placement.slots("g0") == 2  # learned from vllm:lora_requests_info
            models = await (await client.get("/v1/models")).json()
    assert {m["id"]: m.get("parent") for m in models["data"]}["found"] == MODEL


async def test_an_adapter_nowhere_loadable_is_refused_and_a_failed_load_too() -> None:
    specs = [ServerSpec("g0", models=(MODEL,))]  # no LoRA: no runtime API
    async with Fleet(specs, time_scale=20.0) as fleet:
        backends = [BackendSpec("g0", fleet["g0"].url, (MODEL,), 16)]
        config = BalancerConfig(adapters=(SQL,), adapter_sync_s=0.0)
        balancer = build_balancer("r", backends, config)
        async with balancer, aiohttp.ClientSession(base_url=balancer.url) as client:
            async with client.post("/v1/completions", json=body("sql")) as resp:
                assert resp.status == 503
                assert "could not be loaded" in (await resp.json())["error"]["message"]
            async with client.post("/v1/completions", json=body("sql")) as resp:
                assert resp.status == 503  # g0 is left out now: nowhere to load it
                assert "none can load sql" in (await resp.json())["error"]["message"]
            assert (await ask(client, MODEL))[0] == 200


RESIDENCY = """
zone infer.example.com { ns ns1.infer.example.com 127.0.0.1 }
jurisdiction EU { countries SE FR DE }
region us-east { location 38.9 -77.0; jurisdiction US; endpoints 127.0.1.1; capacity 10rps }
region eu-west { location 53.3 -6.2; jurisdiction EU; endpoints 127.0.2.1; capacity 10rps }
service chat.infer.example.com {
    models sim-model
    residency eu { clients jurisdiction EU; allow eu-west; all-down answer-allowed }
    unknown-location regions eu-west
    all-down answer-nothing
}
"""
SE = "89.160.20.112"  # Sweden in the MaxMind test database
US = "216.160.83.56"  # United States


@pytest.mark.parametrize(("client", "status"), [(SE, 451), (US, 200)])
async def test_an_adapter_is_judged_by_its_base_models_residency(
        maxmind_test_locator: GeoLocator, client: str, status: int) -> None:
    policy = load_policy_text(RESIDENCY)
    check = ResidencyCheck(policy, "us-east",
                           lambda a: maxmind_test_locator.locate(a).place, LOOPBACK_EDGE)
    async with Fleet([lora_server("g0", ("sql", "/adapters/sql"))], time_scale=20.0) as fleet:
        backends = [BackendSpec("g0", fleet["g0"].url, (MODEL,), 16)]
        config = BalancerConfig(residency=check, adapters=(SQL,), adapter_sync_s=0.0)
        balancer = build_balancer("us-east", backends, config)
        async with balancer, aiohttp.ClientSession(base_url=balancer.url) as client_session:
            headers = {"Host": "chat.infer.example.com", "X-Director-Client-IP": client}
            async with client_session.post("/v1/completions", json=body("sql"),
                                           headers=headers) as resp:
                assert resp.status == status, await resp.text()


class Scraped:
    def __init__(self, max_loras: int, running: set[str],
                 waiting: frozenset[str] = frozenset()) -> None:
        self.max_loras = max_loras
        self.lora_running = frozenset(running)
        self.lora_waiting = waiting


def test_a_holder_whose_batch_is_full_of_other_adapters_is_crowded() -> None:
    p = placement(slots=4)
    for name in ("a", "b"):
        p.ended(name, "sql", ok=True)
    p.learn_active("a", Scraped(2, {"x", "y"}))  # two others fill its batch
    p.learn_active("b", Scraped(2, {"x"}, frozenset({"sql"})))  # sql waits there: it will run there
    assert p.learned_slots["a"] == 2 and p.slots("a") == 4  # declared slots win
    assert p.crowded("sql", ["a", "b", "c"]) == {"a"}  # c says nothing: not crowded
    p.learn_active("b", Scraped(2, {"x", "y"}))
    assert p.crowded("sql", ["a", "b"]) == {"a", "b"}
    # crowding steers among holders; it does not load a replica by itself
    assert decided(p, "sql", [view("a"), view("b"), view("c", 3)]) == USE
    # but where one must be loaded, a batch with room comes first
    p.learn_active("c", Scraped(4, {"x"}))
    p.learn_active("d", Scraped(1, {"x"}))
    views = [view("a", 9), view("b", 9), view("c", 3), view("d", 0)]
    assert decided(p, "sql", views) == Load("c")
    p.bound("c", "z")  # sent there since the scrape: counts until the next one
    assert "z" in p.active["c"][1]


def test_an_evicted_adapter_leaves_routing_at_once_and_a_listing_does_not_bring_it_back(
) -> None:
    clock = Clock()
    p = placement(slots=1, clock=clock)
    p.ended("a", "chat", ok=True)
    p.bound("a", "chat")
    p.bound("a", "chat")
    p.released("a", "chat")
    assert p.in_flight[("a", "chat")] == 1
    p.started("a", "sql", evict="chat")
    assert p.holding("a") == () and p.dropped["a"] == {"chat"}
    p.observe("a", [MODEL], {"chat": (MODEL, "/adapters/chat")}, clock.now + 1)
    assert "chat" not in p.holding("a")  # still registered there, no longer ours
    clock.now += 5
    p.unloaded("a", "chat")
    # a listing read before the unload (the model catalog caches them) is stale for it
    p.observe("a", [MODEL], {"chat": (MODEL, "/adapters/chat")}, clock.now - 1)
    assert "chat" not in p.holding("a")
    p.observe("a", [MODEL], {"chat": (MODEL, "/adapters/chat")}, clock.now + 2)
    assert "chat" in p.holding("a")  # registered again by someone: it holds it


def test_a_forced_eviction_takes_an_adapter_without_requests_there_first() -> None:
    p = placement(slots=2)
    p.ended("a", "chat", ok=True)  # least recently used, but in use
    p.ended("a", "other", ok=True)
    p.bound("a", "chat")
    p.bound("a", "other")
    p.released("a", "other")
    assert decided(p, "sql", [view("a")]) == Load("a", evict="other")


async def test_an_adapter_with_requests_in_flight_is_unloaded_only_after_them() -> None:
    specs = [lora_server("g0", slots=1)]
    async with Fleet(specs, time_scale=5.0) as fleet:
        backends = [BackendSpec("g0", fleet["g0"].url, (MODEL,), 16, adapter_slots=1)]
        config = BalancerConfig(adapters=(SQL, CHAT), adapter_sync_s=0.0)
        balancer = build_balancer("r", backends, config)
        balancer.placement.min_idle_s = 0.0
        async with balancer, aiohttp.ClientSession(base_url=balancer.url) as client:
            long = {**body("sql"), "max_tokens": 60, "x_output_tokens": 60, "stream": True}
            async with client.post("/v1/completions", json=long) as streaming:
                assert streaming.status == 200
                await streaming.content.readany()  # sql is in flight on g0
                assert await ask(client, "chat") == (200, "g0")  # sql evicted for it
                assert "sql" in fleet["g0"].context.adapters  # not yet unloaded
                rest = await streaming.read()
            assert rest.endswith(b"data: [DONE]\n\n")
            async with asyncio.timeout(5):
                while "sql" in fleet["g0"].context.adapters:
                    await asyncio.sleep(0.05)
            assert balancer.placement.in_flight == {}


async def test_a_request_whose_adapter_left_every_holder_before_binding_is_placed_again(
) -> None:
    async with Fleet([lora_server("g0")], time_scale=20.0) as fleet:
        backends = [BackendSpec("g0", fleet["g0"].url, (MODEL,), 16)]
        balancer = build_balancer("r", backends, BalancerConfig(adapters=(SQL,),
                                                                adapter_sync_s=0.0))
        decide, placed = balancer.placement.decide, []

        def stale_first(adapter, views):  # as if its holder evicted it meanwhile
            placed.append(adapter)
            return USE if len(placed) == 1 else decide(adapter, views)

        balancer.placement.decide = stale_first  # type: ignore[method-assign]
        async with balancer, aiohttp.ClientSession(base_url=balancer.url) as client:
            assert await ask(client, "sql") == (200, "g0")
        assert placed == ["sql", "sql"]


def test_a_policy_change_declares_its_adapters_and_slots() -> None:
    text = RESIDENCY.replace(
        "region us-east { location 38.9 -77.0; jurisdiction US; endpoints 127.0.1.1; "
        "capacity 10rps }",
        "region us-east { location 38.9 -77.0; jurisdiction US; endpoints 127.0.1.1; "
        "capacity 10rps\n  gpu g0 { url http://127.0.0.1:9; models sim-model; "
        "adapter-slots 8 }\n  adapter sql base sim-model path /adapters/sql }")
    policy = load_policy_text(text)
    balancer = build_balancer("us-east", [BackendSpec("g0", "http://127.0.0.1:9", (MODEL,))])
    assert balancer.placement.spec("sql") is None
    balancer.apply_policy(policy)
    assert balancer.placement.spec("sql") == AdapterSpec("sql", MODEL, "/adapters/sql")
    assert balancer.placement.slots("g0") == 8


async def test_a_service_that_names_the_adapter_itself_is_enforced_too(
        maxmind_test_locator: GeoLocator) -> None:
    text = RESIDENCY.replace("all-down answer-nothing\n}", """all-down answer-nothing
}
service sql.infer.example.com {
    models sql
    residency us { clients country US; allow eu-west; all-down answer-allowed }
    unknown-location regions eu-west
    all-down answer-nothing
}""", 1)
    policy = load_policy_text(text)
    check = ResidencyCheck(policy, "us-east",
                           lambda a: maxmind_test_locator.locate(a).place, LOOPBACK_EDGE)
    async with Fleet([lora_server("g0", ("sql", "/adapters/sql"))], time_scale=20.0) as fleet:
        backends = [BackendSpec("g0", fleet["g0"].url, (MODEL,), 16)]
        config = BalancerConfig(residency=check, adapters=(SQL,), adapter_sync_s=0.0)
        balancer = build_balancer("us-east", backends, config)
        async with balancer, aiohttp.ClientSession(base_url=balancer.url) as client:
            headers = {"Host": "chat.infer.example.com", "X-Director-Client-IP": US}
            async with client.post("/v1/completions", json=body("sql"),
                                   headers=headers) as resp:
                assert resp.status == 451, await resp.text()  # the adapter's own rule
            async with client.post("/v1/completions", json=body(MODEL),
                                   headers=headers) as resp:
                assert resp.status == 200  # the base model's rules allow the client
