"""What a balancer counts of each revision's answers, read back from a real Valkey the
way a rollout's analysis reads it: a slowed revision fails the TTFT gate, a revision that
answers 5xx fails the error-rate gate over a later window, the good one passes both."""

from __future__ import annotations

import asyncio

import aiohttp

from director.rollouts.gates import Gate, Verdict
from regions.balancer import BackendSpec, BalancerConfig, SharedStateConfig, build_balancer
from regions.balancer.scheduling.revision_split import RevisionSplit
from regions.simulator import Fleet, ServerSpec
from state import StateStore
from state.outcomes import Outcomes, parse_outcome_field
from tests.balancer.helpers import MODEL, completion
from tests.run_clock import eventually

REGION = "test-region"


def reading(store: StateStore) -> dict[str, Outcomes]:
    """The counts by revision (this region has one balancer run: one field each)."""
    raw = store.client.hgetall(store.keys.outcomes(REGION))
    found = {}
    for name, value in raw.items():
        parsed = parse_outcome_field(name.decode())
        assert parsed is not None and parsed[0] == MODEL, name
        assert parsed[1] not in found  # one run
        found[parsed[1]] = Outcomes.from_json(value)
    return found


async def test_each_revisions_answers_are_counted_and_judged_over_a_window(valkey,
                                                                          prefix: str) -> None:
    specs = [ServerSpec("old", models=(MODEL,)), ServerSpec("new", models=(MODEL,))]
    store = StateStore.from_url(valkey.url, prefix=prefix)
    async with Fleet(specs, time_scale=20.0) as fleet:
        backends = [BackendSpec(name, fleet[name].url, (MODEL,), 16,
                                revisions=((MODEL, revision),))
                    for name, revision in (("old", "r1"), ("new", "r2"))]
        config = BalancerConfig(
            splits=(RevisionSplit(MODEL, (("r1", 50.0), ("r2", 50.0))),),
            shared_state=SharedStateConfig(valkey.url, prefix=prefix, publish_every_s=0.1))
        balancer = build_balancer(REGION, backends, config)
        async with balancer, aiohttp.ClientSession(base_url=balancer.url) as client:
            async def fault(body: dict) -> None:
                async with client.post(fleet["new"].url + "/_sim/fault", json=body) as resp:
                    assert resp.status == 200

            async def load(count: int) -> None:
                async def one(i: int) -> None:
                    # a long prompt: the slowed prefill, not the proxy, sets the TTFT
                    body = {**completion(12), "x_prompt_tokens": 3000}
                    async with client.post("/v1/completions", json=body,
                                           headers={"x-director-session": f"s{i}"}) as resp:
                        await resp.read()
                for start in range(0, count, 8):
                    await asyncio.gather(*(one(i) for i in range(start, start + 8)))

            # ten times slower: a test process starved of CPU for half a second (a busy
            # CI machine) puts a few baseline answers near a 4x slower revision's p95
            await fault({"mode": "slow", "factor": 10})
            await load(96)
            r1, r2 = "r1", "r2"
            first = await eventually(lambda: (lambda r: r if r.get(r1) and r.get(r2) and
                                              r[r1].requests + r[r2].requests == 96 else None)(
                reading(store)), timeout=5)
            old, new = first[r1], first[r2]
            assert old.errors == new.errors == 0 and min(old.requests, new.requests) > 30
            assert old.finish == {"length": old.requests}  # max_tokens reached, every one
            assert old.mean_output_tokens() == 12 and old.samples("itl") == old.requests
            ttft = Gate("ttft-p95", 1.5, min_samples=20)
            assert ttft.judge(new, old).verdict is Verdict.FAIL, ttft.judge(new, old)
            assert ttft.judge(old, old).verdict is Verdict.PASS

            await fault({"mode": "error5xx", "rate": 0.5, "status": 500})
            await load(96)
            second = await eventually(lambda: (lambda r: r if sum(
                o.requests for o in r.values()) >= 192 else None)(reading(store)),
                timeout=5)
            window = {k: second[k].minus(first[k]) for k in (r1, r2)}
            errors = Gate("error-rate", 0.05, min_samples=20)
            assert errors.judge(window[r2], window[r1]).verdict is Verdict.FAIL
            assert window[r1].errors == 0 and window[r2].errors > 10
            # the slowdown is gone with the new fault: over this window TTFT passes
            assert ttft.judge(window[r2], window[r1]).verdict is not Verdict.FAIL
    store.close()
