"""Both EU regions down, with the example policy: clients GeoIP places in Europe with no
country, and clients an edge names by country, get no DNS answer and no GPU outside the EU.

A real system on loopback: the GeoDNS server (real UDP queries with ECS) and one real
balancer per region in front of simulated GPU servers, locations from GeoLite2 City.
- DNS: for every service, continent-only EU subnets (Akamai's, in GeoLite2) are answered
  with EU regions (the rules' all-down: fail static inside the EU) or nothing;
- balancers: the same clients (by ``X-Director-Client-IP``) and clients named by
  ``X-Director-Client-Country`` are refused (451) by us-east and ap-south, for every model,
  and no GPU there sees a prompt;
- overflow: eu-west, saturated and with only us-east and ap-south as siblings, sheds them
  (429) instead of proxying them out of the EU.
"""

from __future__ import annotations

import dataclasses
import ipaddress
from contextlib import AsyncExitStack

import aiohttp
import dns.edns
import dns.message
import dns.query
import dns.rdatatype

from director.commands.region import residency_check
from director.dns.app import DnsApp
from director.dns.server import ServerConfig, ServerThread
from director.dns.snapshot_source import StaticSnapshotSource
from director.engine.snapshot import RegionState
from policies.model import Policy
from regions.balancer import AdmissionConfig, BackendSpec, BalancerConfig, build_balancer
from regions.balancer.signals.overflow import OverflowConfig, OverflowMode
from regions.simulator import Fault, FaultMode, Fleet, ServerSpec
from tests.run_clock import eventually

EU = frozenset({"eu-west", "eu-central"})
OUTSIDE = ("us-east", "ap-south")
# GeoLite2 City 2018: networks whose record names the continent EU and no country
CONTINENT_ONLY_EU = ("2.16.0.0/22", "2.16.4.0/23", "2.16.8.0/21", "2.16.16.0/20",
                     "2.16.32.0/22", "2.16.40.0/21", "2.16.48.0/20")
COUNTRIES = ("DE", "fr", "IE")
LLM, SOVEREIGN, EMBED = "llama-3.1-8b-instruct", "llama-3.1-8b-sovereign", "bge-large-en"
SERVICE_OF = {LLM: "chat", SOVEREIGN: "sovereign", EMBED: "embed"}


def _regions_of(policy: Policy, answer: dns.message.Message) -> set[str]:
    by_address = {a: r.name for r in policy.regions for a in (*r.endpoints_v4, *r.endpoints_v6)}
    return {by_address[item.address] for rrset in answer.answer
            if rrset.rdtype == dns.rdatatype.A for item in rrset}


def _ask(address: tuple[str, int], name: str, subnet: str) -> dns.message.Message:
    network = ipaddress.ip_network(subnet)
    option = dns.edns.ECSOption(str(network.network_address), network.prefixlen)
    query = dns.message.make_query(name, "A", use_edns=0, options=[option])
    return dns.query.udp(query, address[0], port=address[1], timeout=5)


def test_dns_answers_continent_only_eu_clients_inside_the_eu_or_not_at_all(
        example_policy, geolite2) -> None:
    snapshots = StaticSnapshotSource()
    snapshots.update({name: RegionState(healthy=name not in EU)
                      for name in example_policy.region_names})
    app = DnsApp(example_policy, geolite2, snapshots)
    outside: list[str] = []
    answered = 0
    with ServerThread(app, ServerConfig(listen=(("127.0.0.1", 0),))) as server:
        for service in example_policy.services:
            for subnet in CONTINENT_ONLY_EU:
                regions = _regions_of(example_policy, _ask(server.addresses[0],
                                                           service.name, subnet))
                answered += bool(regions)
                if regions - EU:
                    outside.append(f"{service.name} {subnet}: {sorted(regions)}")
    assert not outside
    assert answered >= len(CONTINENT_ONLY_EU)  # chat and sovereign fail static inside the EU


async def test_balancers_outside_the_eu_serve_no_eu_client(example_policy) -> None:
    trusted = ["127.0.0.0/8"]
    async with AsyncExitStack() as stack:
        fleets, balancers = {}, {}
        for name in OUTSIDE:
            models = tuple({m for gpu in example_policy.region(name).gpus for m in gpu.models})
            fleet = await stack.enter_async_context(
                Fleet([ServerSpec(f"{name}-gpu", models=models)], time_scale=50))
            backends = [BackendSpec(s.spec.name, s.url, models) for s in fleet]
            check = residency_check(example_policy, name, None, trusted)
            balancers[name] = await stack.enter_async_context(
                build_balancer(name, backends, BalancerConfig(residency=check)))
            fleets[name] = fleet
        session = await stack.enter_async_context(aiohttp.ClientSession())
        clients = [{"X-Director-Client-IP": str(ipaddress.ip_network(s)[1])}
                   for s in CONTINENT_ONLY_EU] + [{"X-Director-Client-Country": c}
                                                   for c in COUNTRIES]
        served: list[str] = []
        for name, balancer in balancers.items():
            for model in (LLM, SOVEREIGN):
                for client in clients:
                    body = {"model": model, "max_tokens": 2,
                            "messages": [{"role": "user", "content": "personal data"}]}
                    headers = {"Host": f"{SERVICE_OF[model]}.infer.example.com", **client}
                    async with session.post(f"{balancer.url}/v1/chat/completions", json=body,
                                            headers=headers) as response:
                        await response.read()
                        if response.status != 451:
                            served.append(f"{name} {model} {client}: {response.status}")
        assert not served
        for fleet in fleets.values():
            for server in fleet:
                counters = server.engine.state().counters
                assert counters.prompt_tokens == 0 and counters.finished == 0


async def test_a_saturated_eu_region_never_overflows_eu_clients_out_of_the_eu(
        example_policy) -> None:
    trusted = ["127.0.0.0/8"]
    async with AsyncExitStack() as stack:
        urls, fleets = {}, {}
        for name in OUTSIDE:
            fleet = await stack.enter_async_context(
                Fleet([ServerSpec(f"{name}-gpu", models=(LLM,))], time_scale=50))
            backends = [BackendSpec(s.spec.name, s.url, (LLM,)) for s in fleet]
            sibling = await stack.enter_async_context(
                build_balancer(
                    name,
                    backends,
                    BalancerConfig(residency=residency_check(example_policy, name, None, trusted)),
                )
            )
            urls[name], fleets[name] = sibling.url, fleet
        eu = await stack.enter_async_context(
            Fleet([ServerSpec("eu-west-gpu", models=(LLM,))], time_scale=50))
        saturable = BalancerConfig(admission=AdmissionConfig(max_queue=0))
        eu_west = await stack.enter_async_context(
            build_balancer(
                "eu-west",
                [BackendSpec(s.spec.name, s.url, (LLM,), 1) for s in eu],
                dataclasses.replace(
                    saturable,
                    residency=residency_check(example_policy, "eu-west", None, trusted),
                    overflow=OverflowConfig(OverflowMode.PROXY, urls=urls),
                ),
            )
        )
        for server in eu:
            server.set_fault(Fault(FaultMode.HANG))
        session = await stack.enter_async_context(aiohttp.ClientSession())
        body = {"model": LLM, "max_tokens": 2, "messages": [{"role": "user", "content": "x"}]}
        chat = {"Host": "chat.infer.example.com"}
        held = await session.post(f"{eu_west.url}/v1/chat/completions",
                                  json={**body, "stream": True},  # headers come first
                                  headers={**chat, "X-Director-Client-Country": "FR"})
        await eventually(lambda: eu_west.pool.in_flight() == 1)
        statuses = []
        for client in ([{"X-Director-Client-IP": str(ipaddress.ip_network(s)[1])}
                        for s in CONTINENT_ONLY_EU] +
                       [{"X-Director-Client-Country": c} for c in COUNTRIES]):
            async with session.post(f"{eu_west.url}/v1/chat/completions", json=body,
                                    headers={**chat, **client}) as response:
                await response.read()
                statuses.append(response.status)
        assert set(statuses) == {429}, statuses
        for server in eu:
            server.set_fault(Fault())
        held.close()
        for fleet in fleets.values():
            for server in fleet:
                assert server.engine.state().counters.prompt_tokens == 0
