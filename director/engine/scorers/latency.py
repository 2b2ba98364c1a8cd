"""Latency scorer: prefer regions with the lowest measured RTT from the client's network.

Reads: ``Snapshot.latency`` (client network CIDR -> region -> RTT ms, from probes); the most
specific network containing the client's address is used. Score = min RTT / region RTT, so
the fastest region scores 1. Returns None unless every candidate has a measurement.
Scope: the measured network's prefix. Parameters: none.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Sequence

from director.engine.context import DecisionContext
from director.engine.inputs import Input
from director.engine.scorers import Scores


class LatencyScorer:
    name = "latency"
    reads = frozenset({Input.RTT_NETWORK})

    def score(self, request: DecisionContext, candidates: Sequence[str]) -> Scores | None:
        best_network = None
        best_rtts = None
        address = request.client.address
        for cidr, rtts in request.snapshot.latency.items():
            try:
                network = ipaddress.ip_network(cidr)
            except ValueError:
                continue
            if network.version != address.version or address not in network:
                continue
            if best_network is None or network.prefixlen > best_network.prefixlen:
                best_network, best_rtts = network, rtts
        if best_network is None or best_rtts is None:
            return None
        if not all(name in best_rtts and best_rtts[name] > 0 for name in candidates):
            return None
        fastest = min(best_rtts[name] for name in candidates)
        note = "RTT from " + str(best_network) + ": " + ", ".join(
            f"{name} {best_rtts[name]:.0f}ms" for name in candidates)
        return Scores([fastest / best_rtts[name] for name in candidates], note,
                      best_network.prefixlen)
