"""Chaos drills on simulated GPU servers: forward a fault to ``<gpu url>/_sim/fault`` and
revert it to ``{"mode": "none"}`` after its ttl (dead-man; default and maximum 600 s).

``swap_root`` swaps the weights a server says it serves a model from (``/_sim/root``: a
revision changed under the operator's feet), remembering the root it had; ``restore``
or the ttl puts that one back (this API's dead-man only: the server keeps no ttl of it).

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
        self._roots: dict[tuple[str, str, str], str] = {}  # the root before a swap

    async def swap_root(self, policy: Policy, region: str, gpu: str,
                        body: Any) -> dict[str, Any]:
        """``{"model", "root", "ttl"?}``: the server says it serves ``model`` from
        ``root`` until the ttl; ``{"model", "restore": true}``: as before the swap."""
        _, server = find_gpu(policy, region, gpu)
        model = body.get("model") if isinstance(body, dict) else None
        if not isinstance(model, str) or not model:
            raise ApiError("root: expected {\"model\": ..., \"root\": ...} or "
                           "{\"model\": ..., \"restore\": true}")
        key = (region, gpu, model)
        if body.get("restore") is True:
            self._deadman.cancel(f"root {region}/{gpu}/{model}")
            original = self._roots.pop(key, None)
            if original is not None:
                await self._request(server.url, "/_sim/root", {"model": model, "root": original})
            return {"region": region, "gpu": gpu, "model": model, "root": original,
                    "restored": original is not None}
        root = body.get("root")
        if not isinstance(root, str) or not root:
            raise ApiError("root: expected a non-empty string")
        ttl = check_ttl(body.get("ttl"), default=MAX_TTL, maximum=MAX_TTL)
        original = self._roots.get(key)
        if original is None:
            state = await self._request(server.url, "/_sim/state", None, method="GET")
            roots = state.get("roots") if isinstance(state, dict) else None
            original = roots.get(model, model) if isinstance(roots, dict) else model
        answer = await self._request(server.url, "/_sim/root", {"model": model, "root": root})
        self._roots[key] = original

        async def revert() -> None:
            await self._request(server.url, "/_sim/root", {"model": model, "root": original})
            self._roots.pop(key, None)

        revert_at = None
        if ttl is not None:
            revert_at = self._deadman.schedule(f"root {region}/{gpu}/{model}", ttl, revert)
        return {"region": region, "gpu": gpu, "url": server.url, "root": answer,
                "was": original, "revert_at": revert_at}

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
        return await self._request(url, "/_sim/fault", spec)

    async def _request(self, url: str, path: str, spec: dict[str, Any] | None,
                       method: str = "POST") -> Any:
        """``method`` ``path`` on the simulated server at ``url`` (``spec`` its JSON body);
        its answer, or ``BadGateway`` / its own 4xx as ``ApiError``."""
        target = f"{url.rstrip('/')}{path}"
        try:
            async with self._http.request(
                method, target, json=spec,
                timeout=aiohttp.ClientTimeout(total=FORWARD_TIMEOUT_S),
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
