"""HTTP health probe of a GPU server: GET its health path, expect a status, within a timeout.

The result goes through the store's rise/fall hysteresis (:mod:`state.hysteresis`),
applied atomically in Redis; ``probe_id`` (the Celery task id) makes a redelivery a no-op.
"""

from __future__ import annotations

import time

from state.hysteresis import ProbeOutcome
from state.store import StateStore
from workers.probes.http import HttpResult, http_get
from workers.targets import GpuTarget


def check(url: str, path: str, *, expect: int, timeout: float) -> tuple[bool, HttpResult]:
    """Whether ``url + path`` answered ``expect`` in time, and the raw result."""
    result = http_get(url + path, timeout=timeout)
    return result.status == expect, result


def probe_gpu_health(store: StateStore, target: GpuTarget, *, probe_id: str = "") -> ProbeOutcome:
    """Probe one GPU server and record the result with the target's rise/fall thresholds."""
    now = time.time()
    ok, result = check(target.url, target.health_path, expect=target.expect, timeout=target.timeout)
    error = result.error or ("" if ok else f"status {result.status}, expected {target.expect}")
    return store.record_probe(
        target.region,
        target.name,
        ok=ok,
        rise=target.rise,
        fall=target.fall,
        now=now,
        probe_id=probe_id,
        status=result.status,
        latency_ms=result.elapsed_ms,
        error=error,
    )
