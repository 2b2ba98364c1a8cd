"""Chaos drills on simulated GPU servers: forward a fault to ``<gpu url>/_sim/fault`` and
revert it to ``{"mode": "none"}`` after its ttl (dead-man; default and maximum 600 s).

The ttl goes to the server too, which reverts by itself at the same time: a fault ends even
if this API crashes first (the API's own revert then finds the server healthy already)."""

from __future__ import annotations

from typing import Any

import aiohttp

from director.api.deadman import Deadman
from director.api.errors import ApiError, BadGateway
from director.api.targets import check_ttl, find_gpu
from policies import Policy

MAX_TTL = 600.0
HEALTHY = {"mode": "none"}
FORWARD_TIMEOUT_S = 5.0


class GpuChaos:
    def __init__(self, http: aiohttp.ClientSession, deadman: Deadman) -> None:
        self._http = http
        self._deadman = deadman

    async def fault(self, policy: Policy, region: str, gpu: str, body: Any) -> dict[str, Any]:
        """Set a fault; raises ``NotFound``, ``BadTtl``, ``BadGateway`` or the simulator's
        own 4xx (as ``ApiError``)."""
        _, server = find_gpu(policy, region, gpu)
        if not isinstance(body, dict):
            raise ApiError("fault: expected a JSON object")
        spec = {k: v for k, v in body.items() if k != "ttl"}
        ttl = check_ttl(body.get("ttl"), default=MAX_TTL, maximum=MAX_TTL)
        if spec.get("mode", "none") != "none" and ttl is not None:
            spec["ttl"] = ttl
        answer = await self._send(server.url, spec)
        key = f"fault {region}/{gpu}"
        self._deadman.cancel(key)
        revert_at = None
        if spec.get("mode", "none") != "none" and ttl is not None:
            revert_at = self._deadman.schedule(key, ttl, lambda: self._send(server.url, HEALTHY))
        return {"region": region, "gpu": gpu, "url": server.url, "fault": answer,
                "revert_at": revert_at}

    async def _send(self, url: str, spec: dict[str, Any]) -> Any:
        target = f"{url.rstrip('/')}/_sim/fault"
        try:
            async with self._http.post(
                target, json=spec, timeout=aiohttp.ClientTimeout(total=FORWARD_TIMEOUT_S)
            ) as resp:
                try:
                    data = await resp.json(content_type=None)
                except ValueError:
                    data = {"error": (await resp.text())[:500]}
        except (aiohttp.ClientError, OSError, TimeoutError) as exc:
            raise BadGateway(f"GPU server {url} unreachable: {exc or type(exc).__name__}"
                             ) from exc
        if resp.status >= 500:
            raise BadGateway(f"GPU server {url} answered {resp.status}", upstream=data)
        if resp.status >= 400:
            message = _message(data) or f"GPU server answered {resp.status}"
            raise ApiError(message, status=resp.status, upstream=data)
        return data


def _message(data: Any) -> str | None:
    if isinstance(data, dict):
        inner = data.get("error")
        if isinstance(inner, dict):
            return inner.get("message")
        if isinstance(inner, str):
            return inner
    return None
