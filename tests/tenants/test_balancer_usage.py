"""Usage accounting at a real balancer in front of simulated GPU servers, kept in a real
Valkey: per tenant, the input and output tokens summed from the shared state equal what the
simulators themselves counted, streamed or not, with clients that leave mid-stream (the
tokens generated after the last relayed piece reconciled from the engines' counters); a
client that did not ask for usage never sees the usage event; one that asked gets it."""

from __future__ import annotations

import asyncio
import dataclasses
import random
import time

import aiohttp
import pytest

from policies.model import Identity, Policy, Tenant
from regions.balancer import BackendSpec, BalancerConfig, SharedStateConfig, build_balancer
from regions.simulator import Fleet, ServerSpec
from state import AsyncStateStore, EmbeddedValkey
from tenants.api_keys import new_key, store_key
from tenants.usage import read_log, usage_between
from tests.balancer.helpers import MODEL, completion


@pytest.fixture
def shared(valkey: EmbeddedValkey, prefix: str) -> SharedStateConfig:
    return SharedStateConfig(valkey.url, prefix=prefix)


@pytest.mark.parametrize("leave_every", [0, 7])
async def test_usage_equals_the_simulators_counts(example_policy: Policy,
                                                  shared: SharedStateConfig,
                                                  leave_every: int) -> None:
    """Without clients leaving, every token matches; with every seventh stream's client
    leaving after its first piece, every token matches too once the balancer has stopped:
    what the simulators generated for the aborted streams after the last piece relayed is
    read from their counters and added as ``kind=reconcile`` log entries (and to the
    Prometheus tenant token counter)."""
    policy = dataclasses.replace(example_policy, identity=Identity(),
                                 tenants=(Tenant("acme"), Tenant("globex")))
    store = AsyncStateStore.from_url(shared.url, prefix=shared.prefix)
    keys = {}
    for tenant in ("acme", "globex"):
        made = new_key(tenant)
        await store_key(store, made.stored)
        keys[tenant] = {"Authorization": f"Bearer {made.token}"}
    rng = random.Random(3)
    started = time.time()
    cancelled = 0
    specs = [ServerSpec(f"gpu{i}", models=(MODEL,)) for i in range(2)]
    async with Fleet(specs, time_scale=40.0) as fleet:
        backends = [BackendSpec(s.spec.name, s.url, (MODEL,), 32) for s in fleet]
        balancer = build_balancer(
            "eu-west",
            backends,
            BalancerConfig(scrape_every_s=0, shared_state=shared, policy=policy),
        )
        async with balancer, aiohttp.ClientSession(base_url=balancer.url) as client:

            async def one(n: int) -> None:
                nonlocal cancelled
                tenant = ("acme", "globex")[n % 2]
                stream = n % 3 != 0
                body = completion(rng.randint(1, 40), stream=stream,
                                  x_prompt_tokens=rng.randint(5, 300))
                if n % 5 == 0:
                    body["stream_options"] = {"include_usage": True}
                leave = stream and leave_every and n % leave_every == 0
                async with client.post("/v1/completions", json=body,
                                       headers=keys[tenant]) as resp:
                    assert resp.status == 200
                    if leave:  # read a little, then go away mid-stream
                        await resp.content.readany()
                        cancelled += 1
                        resp.close()
                        return
                    data = await resp.read()
                if stream:
                    has_usage = b'"choices":[]' in data.replace(b" ", b"")
                    assert has_usage is (n % 5 == 0), data[-300:]

            for batch in range(0, 300, 30):
                await asyncio.gather(*(one(n) for n in range(batch, batch + 30)))
            await asyncio.sleep(0.3)  # the aborted streams end at the simulators
        # leaving the balancer reconciled the aborted streams' tokens and flushed its ledger
        sims_prompt = sum(s.engine.state().counters.prompt_tokens for s in fleet)
        sims_output = sum(s.engine.state().counters.generation_tokens for s in fleet)
    rows = await usage_between(store, started - 60, time.time() + 60)
    assert {r.key.tenant for r in rows} == {"acme", "globex"}
    assert {r.key.region for r in rows} == {"eu-west"}
    assert {r.key.backend for r in rows} <= {"gpu0", "gpu1"}
    assert sum(r.requests for r in rows) == 300
    assert sum(r.input_tokens for r in rows) == sims_prompt
    accounted = sum(r.output_tokens for r in rows)
    assert accounted == sims_output
    outcomes = balancer.reconcile.outcomes
    assert not {"negative", "over-headroom", "tainted", "reset"} & set(outcomes), outcomes
    if not leave_every:
        assert sum(r.cancelled for r in rows) == 0
    else:  # a short answer may end before its client leaves
        left = sum(r.cancelled for r in rows)
        assert 0 < left <= cancelled
        assert outcomes["attributed"] > 0, outcomes
    assert all(r.gpu_seconds > 0 for r in rows)
    log = await read_log(store, count=1000)
    kinds = [fields["kind"] for _, fields in log]
    assert kinds.count("request") == 300
    assert set(kinds) == ({"request", "reconcile"} if leave_every else {"request"})
    assert sum(int(fields["output_tokens"]) for _, fields in log) == accounted
    assert all(fields["input_tokens"] == "0" and fields["cancelled"] == "0"
               for _, fields in log if fields["kind"] == "reconcile")
    counted = balancer.metrics.registry.get_sample_value
    assert sum(counted("director_balancer_tenant_tokens_total",
                       {"tenant": t, "model": MODEL, "kind": "output"}) or 0
               for t in ("acme", "globex")) == sims_output
    await store.close()


async def test_each_usage_entry_carries_the_request_id_its_answer_names(
        example_policy: Policy, shared: SharedStateConfig) -> None:
    """The balancer's request id: the client's X-Request-Id when it is sane, else made; the
    answer's x-request-id and the usage log entry carry the same, never an empty one."""
    policy = dataclasses.replace(example_policy, identity=Identity(),
                                 tenants=(Tenant("acme"),))
    store = AsyncStateStore.from_url(shared.url, prefix=shared.prefix)
    made = new_key("acme")
    await store_key(store, made.stored)
    auth = {"Authorization": f"Bearer {made.token}"}
    answered = []
    async with Fleet([ServerSpec("gpu0", models=(MODEL,))], time_scale=40.0) as fleet:
        backends = [BackendSpec(s.spec.name, s.url, (MODEL,), 8) for s in fleet]
        balancer = build_balancer(
            "eu-west",
            backends,
            BalancerConfig(scrape_every_s=0, shared_state=shared, policy=policy),
        )
        async with balancer, aiohttp.ClientSession(base_url=balancer.url) as client:
            for sent in ("client-abc-1", None, "not sane: spaces", "x" * 129):
                headers = {**auth, **({"X-Request-Id": sent} if sent else {})}
                async with client.post("/v1/completions", json=completion(4, stream=True),
                                       headers=headers) as resp:
                    assert resp.status == 200
                    await resp.read()
                    answered.append(resp.headers["x-request-id"])
    assert answered[0] == "client-abc-1"
    assert all(rid.startswith("req_") and len(rid) == 36 for rid in answered[1:])
    assert len(set(answered)) == 4
    logged = [fields["request_id"] for _, fields in await read_log(store)]
    assert sorted(logged) == sorted(answered)
    await store.close()
