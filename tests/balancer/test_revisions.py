# SPDX-License-Identifier: Apache-2.0
"""A model split over revisions: each GPU server declares the revision it serves, the region
splits the model's traffic by percent, a session stays on one revision (and moves only onto
a growing one), and the answer says which revision served it."""

from __future__ import annotations

import random

import aiohttp
import pytest

from policies import load_policy_text
from policies.errors import PolicyError
from regions.balancer import BackendSpec, BalancerConfig, build_balancer
from regions.balancer.errors import BalancerConfigError
from regions.balancer.http.proxy import REVISION_HEADER
from regions.balancer.scheduling.revision_split import RevisionSplit
from regions.simulator import Fleet, ServerSpec
from regions.simulator.faults import Fault, FaultMode
from tests.balancer.helpers import MODEL, completion
from workers.targets import GpuTarget, probe_targets

KEYS = [f"session-{i}" for i in range(4000)]


def test_a_session_always_gets_the_same_revision_and_each_its_share() -> None:
    split = RevisionSplit(MODEL, (("r1", 50.0), ("r2", 50.0)))
    again = RevisionSplit(MODEL, (("r1", 50.0), ("r2", 50.0)))  # another balancer
    chosen = [split.order(k, random.Random(1))[0] for k in KEYS]
    assert chosen == [again.order(k, random.Random(2))[0] for k in KEYS]
    assert 0.46 < chosen.count("r1") / len(KEYS) < 0.54
    canary = RevisionSplit(MODEL, (("stable", 95.0), ("canary", 5.0)))
    share = sum(canary.order(k, random.Random(0))[0] == "canary" for k in KEYS) / len(KEYS)
    assert 0.035 < share < 0.065


def test_growing_a_revision_moves_sessions_only_onto_it() -> None:
    before = RevisionSplit(MODEL, (("stable", 95.0), ("canary", 5.0)))
    after = RevisionSplit(MODEL, (("stable", 75.0), ("canary", 25.0)))
    rng = random.Random(0)
    moved = [(before.order(k, rng)[0], after.order(k, rng)[0]) for k in KEYS]
    assert ("canary", "stable") not in moved  # a canary session keeps its revision
    assert 0.17 < sum(m == ("stable", "canary") for m in moved) / len(KEYS) < 0.23


def test_without_a_session_a_request_is_drawn_by_weight_and_the_rest_follow_by_weight() -> None:
    split = RevisionSplit(MODEL, (("a", 10.0), ("b", 60.0), ("c", 30.0)))
    rng = random.Random(3)
    drawn = [split.order(None, rng) for _ in range(3000)]
    assert 0.56 < sum(d[0] == "b" for d in drawn) / 3000 < 0.64
    assert {d for d in drawn if d[0] == "a"} == {("a", "b", "c")}


@pytest.mark.parametrize("weights", [(("a", 50.0), ("b", 40.0)), (("a", 50.0), ("a", 50.0)),
                                     (("a", 120.0), ("b", -20.0)), ()])
def test_a_split_that_does_not_add_up_is_refused(weights) -> None:
    with pytest.raises(BalancerConfigError):
        RevisionSplit(MODEL, weights)


async def test_sessions_stay_on_their_revision_and_move_when_its_servers_are_gone() -> None:
    specs = [ServerSpec("old", models=(MODEL,)), ServerSpec("new", models=(MODEL,))]
    async with Fleet(specs, time_scale=20.0) as fleet:
        backends = [BackendSpec(name, fleet[name].url, (MODEL,), 16,
                                revisions=((MODEL, revision),))
                    for name, revision in (("old", "r1"), ("new", "r2"))]
        config = BalancerConfig(splits=(RevisionSplit(MODEL, (("r1", 50.0), ("r2", 50.0))),))
        balancer = build_balancer("test-region", backends, config)
        async with balancer, aiohttp.ClientSession(base_url=balancer.url) as client:
            async def ask(session: str) -> tuple[str, str]:
                async with client.post("/v1/completions", json=completion(2),
                                       headers={"x-director-session": session}) as resp:
                    await resp.read()
                    assert resp.status == 200
                    return resp.headers[REVISION_HEADER], resp.headers["x-director-backend"]

            seen: dict[str, set[tuple[str, str]]] = {}
            for session in (f"s{i}" for i in range(16)):
                for _ in range(3):
                    seen.setdefault(session, set()).add(await ask(session))
            assert all(len(answers) == 1 for answers in seen.values())  # one revision each
            assert {a for answers in seen.values() for a in answers} == {("r1", "old"),
                                                                         ("r2", "new")}
            explained = balancer.explain("/v1/completions", completion(2),
                                         {"x-director-session": "s0"})
            step = next(s for s in explained["steps"] if s.get("plugin") == "revision")
            assert len(step["kept"]) == 1

            balancer.drain("new")  # r2's only server: its sessions go to r1 meanwhile
            on_r2 = [s for s, answers in seen.items() if ("r2", "new") in answers]
            assert on_r2 and {await ask(s) for s in on_r2} == {("r1", "old")}


POLICY = """
zone infer.example.com {{ ns ns1.infer.example.com 127.0.0.1 }}
region eu {{ location 50 8; jurisdiction EU; endpoints 127.0.0.1; capacity 10rps
    gpu a {{ url http://127.0.0.1:8000; models m; revision m r1 }}
    gpu b {{ url http://127.0.0.1:8001; models m; revision m r2 }}
    {split}
}}
service chat.infer.example.com {{ all-down answer-nothing }}
"""


def test_the_policy_declares_revisions_and_splits_a_model_over_them() -> None:
    region = load_policy_text(POLICY.format(split="split m r1 95% r2 5%")).regions[0]
    assert [g.revisions for g in region.gpus] == [(("m", "r1"),), (("m", "r2"),)]
    assert region.splits == (("m", (("r1", 95.0), ("r2", 5.0))),)
    assert BackendSpec.coerce(region.gpus[1]).revision_of("m") == "r2"


@pytest.mark.parametrize(("split", "message"), [
    ("split m r1 95% r2 10%", "add to 105%"),
    ("split m r1 50% r3 50%", "no gpu of this region declares revision r3"),
    ("split m r1 50% r1 50%", "named twice"),
    ("split m r1 100%\n    split m r2 100%", "split twice"),
])
def test_a_split_the_region_cannot_serve_is_refused(split: str, message: str) -> None:
    with pytest.raises(PolicyError, match=message):
        load_policy_text(POLICY.format(split=split))


def test_a_revision_of_a_model_the_gpu_does_not_serve_is_refused() -> None:
    text = POLICY.format(split="").replace("revision m r2", "revision other r2")
    with pytest.raises(PolicyError, match="does not serve"):
        load_policy_text(text)


def test_a_revision_may_name_the_fingerprint_its_probe_must_read() -> None:
    text = POLICY.format(split="").replace(
        "revision m r2", 'revision m r2 fingerprint "/models/m@2026-11-01"')
    gpu = load_policy_text(text).regions[0].gpus[1]
    assert (gpu.revisions, gpu.fingerprints) == ((("m", "r2"),), (("m", "/models/m@2026-11-01"),))
    target = probe_targets(load_policy_text(text)).gpus[1]
    assert GpuTarget.from_dict(target.to_dict()) == target  # as a Celery task carries it
    assert target.fingerprints == (("m", "/models/m@2026-11-01"),)
    with pytest.raises(PolicyError, match="revision"):
        load_policy_text(POLICY.format(split="").replace("revision m r2",
                                                         "revision m r2 fingerprint"))


async def test_a_request_every_server_of_its_revision_failed_is_answered_by_another() -> None:
    specs = [ServerSpec(n, models=(MODEL,)) for n in ("old", "new-a", "new-b")]
    async with Fleet(specs, time_scale=20.0) as fleet:
        for name in ("new-a", "new-b"):
            fleet[name].set_fault(Fault(FaultMode.ERROR5XX, status=500))
        backends = [BackendSpec(n, fleet[n].url, (MODEL,), 16,
                                revisions=((MODEL, "r1" if n == "old" else "r2"),))
                    for n in ("old", "new-a", "new-b")]
        balancer = build_balancer("test-region", backends, BalancerConfig())
        balancer.revisions.set_overrides({MODEL: RevisionSplit(MODEL, (("r1", 0.0),
                                                                      ("r2", 100.0)))})
        async with balancer, aiohttp.ClientSession(base_url=balancer.url) as client, \
                client.post("/v1/completions", json=completion(2)) as resp:
            await resp.read()
            assert resp.status == 200
            assert (resp.headers[REVISION_HEADER], resp.headers["x-director-backend"]) == (
                "r1", "old")
        counted = balancer.outcomes.by_revision
        assert counted[(MODEL, "r2")].errors == 2  # the rollout still sees both failures
