"""A rollout's split in the shared state takes the place of the policy's split at a
running balancer, through the change channel; malformed or undeclared splits are left out
and the policy's applies; withdrawn, the policy's split is back. A policy put with a new
split is followed too."""

from __future__ import annotations

import json

import aiohttp

from policies import load_policy_text
from regions.balancer import BackendSpec, BalancerConfig, SharedStateConfig, build_balancer
from regions.balancer.http.proxy import REVISION_HEADER
from regions.balancer.scheduling.revision_split import RevisionSplit
from regions.simulator import Fleet, ServerSpec
from state import StateStore
from tests.balancer.helpers import MODEL, completion
from tests.run_clock import eventually

REGION = "test-region"


def weights(balancer) -> dict[str, tuple]:
    return {m: s.weights for m, s in balancer.revisions.overrides.items()}


async def test_a_stored_split_replaces_the_policys_until_withdrawn(valkey, prefix: str) -> None:
    specs = [ServerSpec("old", models=(MODEL,)), ServerSpec("new", models=(MODEL,))]
    store = StateStore.from_url(valkey.url, prefix=prefix)
    key = store.keys.split(REGION)

    def put(fields: dict[str, str] | None) -> None:
        store.client.delete(key)
        if fields:
            store.client.hset(key, mapping=fields)
        store.client.publish(store.keys.changes, key)

    async with Fleet(specs, time_scale=20.0) as fleet:
        backends = [BackendSpec(name, fleet[name].url, (MODEL,), 16,
                                revisions=((MODEL, revision),))
                    for name, revision in (("old", "r1"), ("new", "r2"))]
        config = BalancerConfig(
            splits=(RevisionSplit(MODEL, (("r1", 100.0), ("r2", 0.0))),),
            shared_state=SharedStateConfig(valkey.url, prefix=prefix, read_every_s=60.0))
        balancer = build_balancer(REGION, backends, config)
        async with balancer, aiohttp.ClientSession(base_url=balancer.url) as client:
            async def revisions(count: int = 24) -> set[str]:
                seen = set()
                for i in range(count):
                    async with client.post("/v1/completions", json=completion(2),
                                           headers={"x-director-session": f"s{i}"}) as resp:
                        await resp.read()
                        seen.add(resp.headers[REVISION_HEADER])
                return seen

            assert await revisions() == {"r1"}
            put({MODEL: json.dumps([["r1", 0], ["r2", 100]])})  # the switch
            await eventually(lambda: weights(balancer) == {MODEL: (("r1", 0.0), ("r2", 100.0))},
                             timeout=3)
            assert await revisions() == {"r2"}

            put({MODEL: json.dumps([["r1", 50], ["r9", 50]]),  # nobody here declares r9
                 "other-model": "not json"})
            await eventually(lambda: weights(balancer) == {}, timeout=3)
            assert await revisions() == {"r1"}  # the policy's split again

            put({MODEL: json.dumps([["r1", 50], ["r2", 50]])})
            await eventually(lambda: weights(balancer) != {}, timeout=3)
            assert await revisions(40) == {"r1", "r2"}
            put(None)  # withdrawn: the policy's
            await eventually(lambda: weights(balancer) == {}, timeout=3)
            assert await revisions() == {"r1"}
    store.close()


POLICY = """
zone infer.example.com {{ ns ns1.infer.example.com 127.0.0.1 }}
region test-region {{ location 50 8; jurisdiction EU; endpoints 127.0.0.1; capacity 10rps
    gpu old {{ url {old}; models {model}; revision {model} r1 }}
    gpu new {{ url {new}; models {model}; revision {model} r2 }}
    {split}
}}
service chat.infer.example.com {{ all-down answer-nothing }}
"""


async def test_a_policy_with_a_new_split_is_followed() -> None:
    specs = [ServerSpec("old", models=(MODEL,)), ServerSpec("new", models=(MODEL,))]
    async with Fleet(specs, time_scale=20.0) as fleet:
        text = POLICY.format(old=fleet["old"].url, new=fleet["new"].url, model=MODEL,
                             split=f"split {MODEL} r1 100% r2 0%")
        policy = load_policy_text(text)
        backends = [BackendSpec.coerce(g) for g in policy.regions[0].gpus]
        balancer = build_balancer(REGION, backends, BalancerConfig(
            splits=(RevisionSplit(MODEL, (("r1", 100.0), ("r2", 0.0))),)))
        async with balancer:
            assert balancer.revisions.splits[MODEL].weights == (("r1", 100.0), ("r2", 0.0))
            balancer.apply_policy(load_policy_text(text.replace("r1 100% r2 0%",
                                                                "r1 75% r2 25%")), 2)
            assert balancer.revisions.splits[MODEL].weights == (("r1", 75.0), ("r2", 25.0))
            balancer.apply_policy(load_policy_text(text.replace(f"split {MODEL} r1 100% r2 0%",
                                                                "")), 3)
            assert balancer.revisions.splits == {}
