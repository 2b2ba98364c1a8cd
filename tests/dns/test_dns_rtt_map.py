"""``RttMap``: the most specific sampled IPv4 network holding an address, by bisect, equal
to the latency scorer's linear search over nested and overlapping-free CIDRs."""

from __future__ import annotations

import ipaddress
import random

from director.dns.rtt_map import RttMap


def reference(cidrs: list[str], value: int) -> str | None:
    """The latency scorer's rule: the first network of the longest prefix holding it."""
    address = ipaddress.IPv4Address(value)
    best = None
    for cidr in cidrs:
        try:
            network = ipaddress.ip_network(cidr)
        except ValueError:
            continue
        if network.version == 4 and address in network and (
                best is None or network.prefixlen > best[0].prefixlen):
            best = (network, cidr)
    return best[1] if best else None


def test_the_most_specific_network_holds_each_address() -> None:
    rng = random.Random(9)
    cidrs = []
    for _ in range(200):
        prefix = rng.choice([0, 1, 4, 8, 9, 12, 16, 20, 24, 28, 32])
        address = ipaddress.IPv4Address(rng.randrange(0, 1 << 32))
        cidrs.append(str(ipaddress.ip_network((address, prefix), strict=False)))
    cidrs += ["10.0.0.0/8", "10.0.0.0/08", "not a network", "2001:db8::/32"]
    rtt = RttMap(cidrs)
    probes = [rng.randrange(0, 1 << 32) for _ in range(3000)]
    for cidr in cidrs[:200]:  # the edges of every network, and just outside them
        network = ipaddress.ip_network(cidr)
        first, last = int(network.network_address), int(network.broadcast_address)
        probes += [first, last, max(0, first - 1), min((1 << 32) - 1, last + 1)]
    for value in probes:
        assert rtt.cidrs[rtt.find(value)] == reference(cidrs, value), value


def test_no_networks_hold_nothing() -> None:
    rtt = RttMap(["2001:db8::/32"])
    assert rtt.find(0) == 0 and rtt.find((1 << 32) - 1) == 0 and rtt.cidrs == [None]
