"""The version probe (``workers.probes.versions``): what each GPU server reports of its
models against the policy; judged alone, then against real simulated servers and a real
Valkey, through to a balancer that stops sending a swapped server the model."""

from __future__ import annotations

import asyncio
import json

import aiohttp
import pytest

from regions.balancer import SharedStateConfig
from regions.simulator import Fleet, ServerSpec
from state import StateStore
from tests.balancer.helpers import MODEL, admin_client, completion, stack, stream_completion
from tests.run_clock import eventually
from workers.probes.http import HttpResult
from workers.probes.session import ProbeSession
from workers.probes.versions import judge, probe_versions, read_listing
from workers.targets import GpuTarget

REGION = "test-region"


def target(name: str, url: str = "http://127.0.0.1:9", *, models: tuple[str, ...] = (MODEL,),
           revisions: tuple[tuple[str, str], ...] = (),
           fingerprints: tuple[tuple[str, str], ...] = ()) -> GpuTarget:
    return GpuTarget(REGION, name, url, "vllm", "/health", 200, None, 1.0, 2.0, 1, 1,
                     models=models, revisions=revisions, fingerprints=fingerprints)


def test_a_declared_fingerprint_must_be_what_the_server_reports() -> None:
    declared = (("sim-model", "r2"),), (("sim-model", "/models/llama@r2"),)
    targets = [target("a", revisions=declared[0], fingerprints=declared[1]),
               target("b", revisions=declared[0], fingerprints=declared[1])]
    refused = judge(targets, {"a": {MODEL: "/models/llama@r2"}, "b": {MODEL: "/models/llama@r3"}})
    assert refused["a"] == {}
    assert refused["b"][MODEL].startswith("fingerprint: reports '/models/llama@r3'")
    assert "'/models/llama@r2'" in refused["b"][MODEL]


def test_an_undeclared_pool_keeps_its_largest_group_and_refuses_the_others() -> None:
    targets = [target(n) for n in "abcd"]
    refused = judge(targets, {"a": {MODEL: "v1"}, "b": {MODEL: "v2"}, "c": {MODEL: "v2"},
                              "d": {MODEL: "v2"}})
    assert {n: sorted(r) for n, r in refused.items()} == {"a": [MODEL], "b": [], "c": [],
                                                          "d": []}
    assert refused["a"][MODEL] == (f"mixed: reports 'v1', 3 of 4 servers of {MODEL} "
                                   "(no declared revision) report 'v2'")
    # a tie: the group of the first server in policy order stays
    tie = judge(targets[:2], {"a": {MODEL: "v1"}, "b": {MODEL: "v2"}})
    assert (tie["a"], sorted(tie["b"])) == ({}, [MODEL])


def test_declared_revisions_are_pools_of_their_own() -> None:
    """Two declared revisions side by side are a split, not a mixed pool; inside one
    declared revision without a fingerprint the servers still have to agree."""
    r1, r2 = ((MODEL, "r1"),), ((MODEL, "r2"),)
    targets = [target("a", revisions=r1), target("b", revisions=r1), target("c", revisions=r2)]
    assert judge(targets, {"a": {MODEL: "x"}, "b": {MODEL: "x"}, "c": {MODEL: "y"}}) == {
        "a": {}, "b": {}, "c": {}}
    mixed = judge([*targets, target("d", revisions=r1)],
                  {"a": {MODEL: "x"}, "b": {MODEL: "z"}, "c": {MODEL: "y"}, "d": {MODEL: "x"}})
    assert sorted(n for n, r in mixed.items() if r) == ["b"]
    assert "(revision r1)" in mixed["b"][MODEL]


def test_unlisted_models_are_refused_and_unreadable_servers_are_not_judged() -> None:
    targets = [target("a", models=(MODEL, "other")), target("b")]
    refused = judge(targets, {"a": {MODEL: MODEL}, "b": None})
    assert refused == {"a": {"other": "unlisted: the server does not list it"}}


@pytest.mark.parametrize(("status", "body", "expected"), [
    (200, b'{"data": [{"id": "m", "root": "/w/m"}, {"id": "n"}, {"id": 3}, "x"]}',
     {"m": "/w/m", "n": "n"}),
    (200, b'{"data": [{"id": "m", "root": ""}]}', {"m": "m"}),
    (200, b"not json", None),
    (200, b'["a list"]', None),
    (200, b'{"data": "none"}', None),
    (503, b'{"data": []}', None),
])
def test_listings_of_every_shape(status: int, body: bytes, expected) -> None:
    assert read_listing(HttpResult(status, body, 1.0)) == expected


async def test_a_silently_swapped_server_is_out_of_routing_for_the_model_until_put_back(
        valkey, prefix: str) -> None:
    """Three simulated servers of one model, no revision declared; one is swapped to
    another root: the next probe refuses it for the model, the balancer (following the
    change channel, not a periodic read) sends the model elsewhere, says why, exports it;
    swapped back, the next probe lets it serve again."""
    config = SharedStateConfig(valkey.url, prefix=prefix, read_every_s=60.0, timeout_s=1.0)
    store = StateStore.from_url(valkey.url, prefix=prefix)
    session = ProbeSession()
    try:
        async with stack((1.0, 1.0, 1.0), time_scale=50.0, shared_state=config) as (
                fleet, balancer, client):
            targets = [target(s.spec.name, s.url) for s in fleet]

            def probe():
                return probe_versions(store, targets, session=session)

            records = await asyncio.to_thread(probe)
            assert all(not r.refused for r in records.values())
            assert records["gpu1"].seen == {MODEL: MODEL}

            async with aiohttp.ClientSession() as http:
                async with http.post(fleet["gpu1"].url + "/_sim/root",
                                     json={"model": MODEL, "root": "/weights/other"}) as r:
                    assert r.status == 200
                records = await asyncio.to_thread(probe)
                assert list(records["gpu1"].refused) == [MODEL]
                assert records["gpu1"].refused[MODEL].startswith("mixed: reports")
                await eventually(lambda: dict(balancer.pool.snapshot().backends[1].refused),
                                 timeout=3)
                served = {(await stream_completion(client, completion(2)))[1]
                          for _ in range(12)}
                assert served == {"gpu0", "gpu2"}
                explained = balancer.state()["backends"][1]["refused"]
                assert explained[MODEL].startswith("mixed: reports '/weights/other'")
                async with admin_client(balancer) as admin, admin.get("/metrics") as page:
                    text = await page.text()
                assert (f'director_balancer_model_refused{{backend="gpu1",kind="mixed",'
                        f'model="{MODEL}"}} 1.0') in text

                async with http.post(fleet["gpu1"].url + "/_sim/root",
                                     json={"model": MODEL, "root": MODEL}) as r:
                    assert r.status == 200
            records = await asyncio.to_thread(probe)
            assert not records["gpu1"].refused
            await eventually(lambda: not balancer.pool.snapshot().backends[1].refused,
                             timeout=3)
            served = {(await stream_completion(client, completion(2)))[1] for _ in range(24)}
            assert "gpu1" in served
            stored = store.client.hgetall(store.keys.gpu_version(REGION, "gpu1"))
            assert json.loads(stored[b"seen"]) == {MODEL: MODEL}
    finally:
        session.close()
        store.close()


async def test_declared_fingerprints_against_servers_started_with_them(store) -> None:
    """Servers started at the fingerprint the policy declares pass; one started from other
    weights is refused for the model, whatever its neighbours report."""
    specs = [ServerSpec("a", models=(MODEL,), roots=((MODEL, "/w/m@r2"),)),
             ServerSpec("b", models=(MODEL,), roots=((MODEL, "/w/m@r2"),)),
             ServerSpec("c", models=(MODEL,), roots=((MODEL, "/w/m@r1"),))]
    session = ProbeSession()
    try:
        async with Fleet(specs, time_scale=50.0) as fleet:
            declared = {"revisions": ((MODEL, "r2"),), "fingerprints": ((MODEL, "/w/m@r2"),)}
            targets = [target(s.spec.name, s.url, **declared) for s in fleet]
            records = await asyncio.to_thread(probe_versions, store, targets, session=session)
    finally:
        session.close()
    assert {n: list(r.refused) for n, r in records.items()} == {"a": [], "b": [], "c": [MODEL]}
    assert records["c"].refused[MODEL].startswith("fingerprint: reports '/w/m@r1'")
