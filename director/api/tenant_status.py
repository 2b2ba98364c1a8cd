"""The status document's ``tenants`` section: each tenant of the active policy with what it
used and how often it was throttled over the last hour.

Usage comes from the usage buckets every balancer flushes (``tenants.usage.usage_between``:
requests answered, input and output tokens as the engines counted them, cancelled requests,
estimated GPU-seconds), throttling from the refusal buckets (``tenants.throttles``: 429
over quota, by the limit that refused, and 503 while the quota state is down for a
``redis-down closed`` tenant). Both sum whole minutes. Usage recorded for a tenant the
policy no longer declares is listed too (``declared: false``). When the state cannot be
read the section says so (``available: false``) and the rest of the status stands.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from policies import Policy
from policies.model import Tenant
from state import AsyncStateStore
from state.errors import StateError
from tenants.throttles import throttles_between
from tenants.usage import METRICS, usage_between

log = logging.getLogger(__name__)

WINDOW_S = 3600.0


def _quota(tenant: Tenant) -> dict[str, object]:
    q = tenant.quota
    return {"requests_per_minute": q.requests_per_minute,
            "input_tokens_per_minute": q.input_tokens_per_minute,
            "output_tokens_per_minute": q.output_tokens_per_minute,
            "concurrent": q.concurrent,
            "requests_burst": _burst(q.requests_per_minute, q.requests_burst),
            "input_tokens_burst": _burst(q.input_tokens_per_minute, q.input_tokens_burst),
            "output_tokens_burst": _burst(q.output_tokens_per_minute, q.output_tokens_burst)}


def _burst(per_minute: float | None, burst: float | None) -> float | None:
    """The units a rate's bucket holds (None: no limit); without a burst, a minute's worth."""
    if per_minute is None:
        return None
    return burst if burst is not None else per_minute


def _empty_usage() -> dict[str, float]:
    return {metric: 0.0 for metric in METRICS}


async def tenant_status(store: AsyncStateStore, policy: Policy,
                        now: float | None = None) -> dict[str, Any]:
    """The ``tenants`` section of ``GET /api/v1/status`` (see the module docstring)."""
    end = time.time() if now is None else now
    start = end - WINDOW_S
    section: dict[str, Any] = {"identity": policy.identity is not None,
                               "window_s": WINDOW_S, "from": start, "to": end,
                               "available": True, "tenants": []}
    declared = {t.name: t for t in policy.tenants}
    if not declared:
        return section
    try:
        usage_rows = await usage_between(store, start, end)
        throttle_rows = await throttles_between(store, start, end)
    except StateError as exc:
        log.debug("api: tenant usage unavailable: %s", exc)
        section.update(available=False, error=str(exc))
        usage_rows, throttle_rows = [], []
    usage: dict[str, dict[str, float]] = {}
    for row in usage_rows:
        sums = usage.setdefault(row.key.tenant, _empty_usage())
        for metric in METRICS:
            sums[metric] += getattr(row, metric)
    throttled: dict[str, dict[str, Any]] = {}
    for t_row in throttle_rows:
        entry = throttled.setdefault(t_row.key.tenant, {"429": 0, "503": 0, "by_limit": {}})
        entry[str(t_row.key.status)] = entry.get(str(t_row.key.status), 0) + t_row.refused
        if t_row.key.status == 429:
            by_limit = entry["by_limit"]
            by_limit[t_row.key.limit] = by_limit.get(t_row.key.limit, 0) + t_row.refused
    names = list(declared) + sorted((set(usage) | set(throttled)) - set(declared))
    for name in names:
        tenant = declared.get(name)
        sums = usage.get(name, _empty_usage())
        refusals = throttled.get(name, {"429": 0, "503": 0, "by_limit": {}})
        section["tenants"].append({
            "name": name, "declared": tenant is not None,
            "weight": tenant.weight if tenant else None,
            "priority": tenant.priority if tenant else None,
            "quota": _quota(tenant) if tenant else None,
            "usage": {"requests": int(sums["requests"]),
                      "input_tokens": int(sums["input_tokens"]),
                      "output_tokens": int(sums["output_tokens"]),
                      "cancelled": int(sums["cancelled"]),
                      "gpu_seconds": round(sums["gpu_seconds"], 3)},
            "throttled": {"over_quota": refusals["429"],
                          "state_unavailable": refusals["503"],
                          "by_limit": dict(sorted(refusals["by_limit"].items()))},
        })
    return section
