"""Round-trip time from this worker's vantage to a region: TCP connect time to its balancer.

A TCP handshake costs one round trip, so connect time is the RTT without any server work in
it. The sample is stored under the worker's vantage (the client network it stands for, as a
CIDR, ``DIRECTOR_VANTAGE``; a worker without one writes no samples) and feeds the global
tier's latency map.
"""

from __future__ import annotations

import socket
import time

from state.records import LatencySample
from state.store import StateStore
from workers.targets import LatencyTarget


def connect_ms(host: str, port: int, *, timeout: float) -> float | None:
    """TCP connect time in milliseconds, or None when the connection fails or times out."""
    started = time.perf_counter()
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return (time.perf_counter() - started) * 1000.0
    except OSError:
        return None


def measure_latency(store: StateStore, target: LatencyTarget, *, vantage: str) -> float | None:
    """Measure and store one RTT sample; a failed connect stores nothing (health's job)."""
    ms = connect_ms(target.host, target.port, timeout=target.timeout)
    if ms is not None:
        store.write_latency(LatencySample(vantage, target.region, ms, time.time()))
    return ms
