"""Spillover over the wire: with us-east at 120% of its quota, the share of distinct US
client /24s answered elsewhere is within 2 points of the policy's formula, and a subnet keeps
its answer on every query while the load does not change."""

from __future__ import annotations

import dns.message
from dns_helpers import a_addresses, bulk_udp, make_query

from director.dns.app import DnsApp
from director.dns.server import ServerConfig, ServerThread
from director.dns.snapshot_source import StaticSnapshotSource
from director.engine import RegionState
from director.engine.spillover import spill_share

SUBNETS = [f"8.{b}.{c}.0/24" for b in range(0, 256, 2) for c in range(0, 256, 8)]
US_EAST = {"127.0.1.1"}


def _answers(address, subnets: list[str], base_id: int = 0) -> dict[str, set[str]]:
    queries = [make_query("chat.infer.example.com", ecs=s, qid=base_id + i).to_wire()
               for i, s in enumerate(subnets)]
    replies = bulk_udp(address, queries)
    return {subnets[qid - base_id]: a_addresses(dns.message.from_wire(data))
            for qid, data in replies.items()}


def test_share_of_subnets_moved_matches_the_formula(example_policy, geolite2):
    spill = example_policy.service("chat.infer.example.com").spillover
    utilization = spill.threshold * 1.2
    snapshots = StaticSnapshotSource()
    app = DnsApp(example_policy, geolite2, snapshots)
    with ServerThread(app, ServerConfig(listen=(("127.0.0.1", 0),))) as server:
        address = server.addresses[0]
        calm = _answers(address, SUBNETS)
        primaries = [s for s in SUBNETS if calm.get(s) == US_EAST]
        assert len(primaries) > 2500
        snapshots.update({"us-east": RegionState(healthy=True, utilization=utilization)})
        hot = _answers(address, primaries, base_id=10000)
        assert len(hot) == len(primaries)
        moved = sum(1 for s in primaries if hot[s] != US_EAST)
        expected = spill_share(utilization, spill.threshold, spill.max_share)
        print(f"moved {moved}/{len(primaries)} = {moved / len(primaries):.4f}, "
              f"expected {expected:.4f}")
        assert abs(moved / len(primaries) - expected) <= 0.02, (moved, len(primaries))
        for repeat in range(3):  # the same answer for each subnet, query after query
            again = _answers(address, primaries[:1500], base_id=30000 + repeat * 2000)
            assert all(again[s] == hot[s] for s in again)
            assert len(again) == 1500
