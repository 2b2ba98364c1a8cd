"""A region with a balancer on each of its endpoints: DNS leaves out an endpoint whose own
probe says down, and answers every endpoint again when all are down (the region's health
decides then), on the fast path as on the full path, with the caches following the change."""

from __future__ import annotations

from pathlib import Path

import dns.message
import pytest
from dns_helpers import make_query

from director.dns.app import DnsApp
from director.dns.snapshot_source import StaticSnapshotSource
from director.engine import RegionState
from policies import load_policy

HA = Path(__file__).resolve().parents[2] / "policies" / "examples" / "ha.dp"
CHAT = "chat.infer.example.com"
# (state of eu-west, the addresses answered to a client in France)
STATES = [
    (RegionState(healthy=True), ["127.0.2.1", "127.0.2.2"]),
    (RegionState(healthy=True, down_endpoints=frozenset({"127.0.2.2"})), ["127.0.2.1"]),
    (RegionState(healthy=True, down_endpoints=frozenset({"127.0.2.1"})), ["127.0.2.2"]),
    (RegionState(healthy=True, down_endpoints=frozenset({"127.0.2.1", "127.0.2.2"})),
     ["127.0.2.1", "127.0.2.2"]),
    (RegionState(healthy=True), ["127.0.2.1", "127.0.2.2"]),
]


def addresses(wire: bytes) -> list[str]:
    return sorted(rr.address for rrset in dns.message.from_wire(wire).answer for rr in rrset)


@pytest.mark.parametrize("tcp", [False, True], ids=["udp", "tcp"])
def test_a_dead_endpoint_is_left_out_while_another_is_up(geolite2, tcp: bool) -> None:
    policy = load_policy(str(HA))
    fast_state, full_state = StaticSnapshotSource(), StaticSnapshotSource()
    fast = DnsApp(policy, geolite2, fast_state)
    full = DnsApp(policy, geolite2, full_state)
    queries = [make_query(CHAT, ecs=ecs, qid=7).to_wire()
               for ecs in ("2.2.2.0/24", "2.2.2.0/25", None)]
    for state, expected in STATES:
        fast_state.update({"eu-west": state})
        full_state.update({"eu-west": state})
        for wire in queries:
            got = fast.respond(wire, "2.2.2.2", tcp)
            full.handler.decisions.clear()
            assert got == full.respond_full(wire, "2.2.2.2", tcp), state
        assert addresses(fast.respond(queries[0], "2.2.2.2", tcp)) == expected, state
