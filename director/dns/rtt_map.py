"""The IPv4 networks that have RTT samples, flattened for a binary search.

The latency scorer answers from the most specific network with samples that holds the
client (``director.engine.scorers.latency``). ``RttMap`` cuts the IPv4 space at every
boundary of those networks; each piece holds the number of its most specific network
(0: none), so finding a client's network is one ``bisect``, as in the GeoIP network map.
"""

from __future__ import annotations

import bisect
import ipaddress
from array import array
from collections.abc import Iterable


class RttMap:
    """Pieces of the IPv4 space, each with the most specific sampled network holding it."""

    def __init__(self, cidrs: Iterable[str]) -> None:
        networks = []
        for cidr in cidrs:
            try:
                network = ipaddress.ip_network(cidr)
            except ValueError:
                continue
            if network.version == 4:
                networks.append((network, cidr))
        self.cidrs: list[str | None] = [None] + [cidr for _, cidr in networks]
        cuts = {0}
        for network, _ in networks:
            cuts.add(int(network.network_address))
            end = int(network.broadcast_address) + 1
            if end < 1 << 32:
                cuts.add(end)
        starts = sorted(cuts)
        ids = [0] * len(starts)
        # wider networks first, so a nested one paints over its part of them; of equal
        # ones the first listed last, as the latency scorer keeps the first it meets
        for number in sorted(range(1, len(self.cidrs)),
                             key=lambda n: (networks[n - 1][0].prefixlen, -n)):
            network = networks[number - 1][0]
            first = bisect.bisect_left(starts, int(network.network_address))
            last = bisect.bisect_right(starts, int(network.broadcast_address))
            for piece in range(first, last):
                ids[piece] = number
        self.starts = array("L", starts)
        self.ids = array("L", ids)

    def find(self, value: int) -> int:
        """The number of the most specific sampled network holding IPv4 ``value`` (0: none)."""
        return self.ids[bisect.bisect_right(self.starts, value) - 1]
