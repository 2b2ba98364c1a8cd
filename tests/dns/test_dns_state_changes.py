"""State changes cost what they change: a new snapshot drops the DNS caches only when it
changes an answer, and after every change of a sequence (load under and over the spillover
threshold, the spilled share moving, health and drains flipping, RTT samples changing) the
fast path still answers byte for byte what the full path computes from scratch."""

from __future__ import annotations

import random

import pytest
from dns_helpers import make_query

from director.dns.app import DnsApp
from director.dns.snapshot_source import StaticSnapshotSource
from director.engine import RegionState

NAMES = ["chat.infer.example.com", "embed.infer.example.com", "sovereign.infer.example.com",
         "infer.example.com"]
RTT = {"8.8.8.0/24": {"us-east": 20.0, "eu-west": 90.0, "eu-central": 95.0, "ap-south": 210.0}}
RTT_MOVED = {"8.8.8.0/24": {"us-east": 120.0, "eu-west": 90.0, "eu-central": 95.0,
                            "ap-south": 210.0}}
# (name, regions, latency, whether answers may change)
STATES = [
    ("calm", {}, RTT, True),
    ("us-east at 30%", {"us-east": RegionState(healthy=True, utilization=0.3)}, RTT, True),
    ("us-east at 60%", {"us-east": RegionState(healthy=True, utilization=0.6)}, RTT, False),
    ("us-east at 84%", {"us-east": RegionState(healthy=True, utilization=0.84)}, RTT, False),
    ("us-east at 102%", {"us-east": RegionState(healthy=True, utilization=1.02)}, RTT, True),
    ("us-east at 110%", {"us-east": RegionState(healthy=True, utilization=1.10)}, RTT, True),
    ("same, new RTT object", {"us-east": RegionState(healthy=True, utilization=1.10)},
     dict(RTT), False),
    ("us-east at 70%", {"us-east": RegionState(healthy=True, utilization=0.7)}, RTT, True),
    ("eu-west down", {"us-east": RegionState(healthy=True, utilization=0.7),
                      "eu-west": RegionState(healthy=False)}, RTT, True),
    ("eu-west down, us-east at 71%", {"us-east": RegionState(healthy=True, utilization=0.71),
                                      "eu-west": RegionState(healthy=False)}, RTT, False),
    ("eu-central draining", {"eu-central": RegionState(draining=True)}, RTT, True),
    ("ap-south degraded", {"ap-south": RegionState(degraded=True)}, RTT, True),
    ("RTT moved", {"ap-south": RegionState(degraded=True)}, RTT_MOVED, True),
]


def corpus(rng: random.Random) -> list[tuple[bytes, str]]:
    queries = []
    for name in NAMES:
        for ecs in [None, "8.8.8.0/24", "81.2.69.0/24", "2.2.2.0/24", "89.160.20.0/22",
                    "0.0.0.0/0", "2001:db8::/56"]:
            queries.append((make_query(name, ecs=ecs, qid=rng.randrange(65536)).to_wire(),
                            rng.choice(["127.0.0.1", "8.8.8.8", "2.2.2.2"])))
        for _ in range(60):  # client subnets from all over, some hashed by spillover
            subnet = f"{rng.randrange(1, 224)}.{rng.randrange(256)}.{rng.randrange(256)}.0/24"
            queries.append((make_query(name, ecs=subnet, qid=rng.randrange(65536)).to_wire(),
                            "127.0.0.1"))
    return queries


@pytest.mark.parametrize("tcp", [False, True], ids=["udp", "tcp"])
def test_answers_after_each_change_equal_the_full_path_and_caches_survive_no_ops(
        example_policy, geolite2, tcp) -> None:
    rng = random.Random(3)
    fast_state, full_state = StaticSnapshotSource(), StaticSnapshotSource()
    fast = DnsApp(example_policy, geolite2, fast_state, merge_budget=10**7)
    full = DnsApp(example_policy, geolite2, full_state, merge_budget=10**7)
    queries = corpus(rng)
    kept = dropped = 0
    for name, regions, latency, may_change in STATES:
        fast_state.update(regions, latency)
        full_state.update(regions, latency)
        misses = fast.stats.cache_misses
        generation = fast.fast.decisions.generation
        for wire, host in queries:
            got = fast.respond(wire, host, tcp)
            full.handler.decisions.clear()
            assert got == full.respond_full(wire, host, tcp), (name, wire, host)
        if not may_change:  # every answer came from the caches of the previous state
            assert fast.fast.decisions.generation == generation, name
            assert fast.stats.cache_misses == misses, name
            kept += 1
        else:
            dropped += fast.fast.decisions.generation != generation
    assert kept == 4 and dropped >= 8
