# SPDX-License-Identifier: Apache-2.0
"""``GET /v1/models``: the models the region's usable GPU servers serve, from a cache.

Each backend's own ``/v1/models`` is read at most once per ``ttl_s`` (default 10 s) however
many clients ask: a request finds the entries still fresh and answers from them with no I/O,
or waits for the one refresh under way (requests arriving meanwhile join it, never start
their own). A backend that cannot be read (error, timeout, non-200) is listed by the models
its spec names until it answers again. The answer is the union over the backends usable
now (healthy, not ejected), each model once, in the order first seen.

Who may see what is the caller's business (``app``: with tenants, only a tenant's models).
``listings`` gives each backend's own entries as last read (the LoRA adapters it holds are
those with a ``parent``: ``adapters.loader``), from the same cache.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Mapping
from typing import Any

import aiohttp

from regions.balancer.scheduling.backends import BackendPool

ModelEntry = dict[str, Any]
DEFAULT_TTL_S = 10.0
TIMEOUT_S = 2.0


class ModelCatalog:
    """The union of the usable backends' ``/v1/models``, each backend read once per TTL."""

    def __init__(self, pool: BackendPool, sessions: Mapping[str, aiohttp.ClientSession],
                 ttl_s: float = DEFAULT_TTL_S, timeout_s: float = TIMEOUT_S,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.pool = pool
        self.sessions = sessions
        self.ttl_s = ttl_s
        self.timeout_s = timeout_s
        self.clock = clock
        self.fetches = 0  # backend reads so far (one per backend per refresh)
        # by backend name: when read, what it listed (its spec's models if unreadable)
        self._entries: dict[str, tuple[float, list[ModelEntry]]] = {}
        self._unread: set[str] = set()  # backends whose last read failed
        self._refresh: asyncio.Future[None] | None = None

    async def models(self) -> list[ModelEntry]:
        """The models of the backends usable now (at most one refresh at a time)."""
        snap = self.pool.snapshot()
        usable = [b.name for b in snap.backends if b.healthy and not b.ejected]
        await self._fresh(usable)
        found: dict[str, ModelEntry] = {}
        for name in usable:
            entry = self._entries.get(name)
            listed = entry[1] if entry is not None else self._spec_models(name)
            for model in listed:
                found.setdefault(model["id"], model)
        return list(found.values())

    async def listings(self, names: list[str]) -> dict[str, tuple[float, list[ModelEntry]]]:
        """Each of these backends' own ``/v1/models`` entries with when they were read,
        refreshed if older than the TTL; a backend that could not be read is left out."""
        await self._fresh(names)
        return {n: self._entries[n] for n in names
                if n in self._entries and n not in self._unread}

    async def _fresh(self, names: list[str]) -> None:
        while stale := self._stale(names):
            if self._refresh is None or self._refresh.done():
                self._refresh = asyncio.ensure_future(self._read(stale))
            await asyncio.shield(self._refresh)
            if self._stale(names) == stale:
                break  # read (or failed) just now: answer with what there is

    def _stale(self, names: list[str]) -> list[str]:
        now = self.clock()
        return [n for n in names
                if n not in self._entries or now - self._entries[n][0] >= self.ttl_s]

    async def _read(self, names: list[str]) -> None:
        results = await asyncio.gather(*(self._fetch(n) for n in names),
                                       return_exceptions=True)
        now = self.clock()
        for name, result in zip(names, results, strict=True):
            if isinstance(result, list):
                self._unread.discard(name)
                self._entries[name] = (now, result)
            else:
                self._unread.add(name)
                self._entries[name] = (now, self._spec_models(name))
        for gone in set(self._entries) - {b.name for b in self.pool}:
            del self._entries[gone]

    async def _fetch(self, name: str) -> list[ModelEntry]:
        self.fetches += 1
        session = self.sessions[name]
        url = self.pool[name].spec.url + "/v1/models"
        async with asyncio.timeout(self.timeout_s), session.get(url) as resp:
            if resp.status != 200:
                raise aiohttp.ClientResponseError(resp.request_info, (), status=resp.status)
            data = (await resp.json(content_type=None)).get("data", [])
            return [m for m in data if isinstance(m, dict) and isinstance(m.get("id"), str)]

    def _spec_models(self, name: str) -> list[ModelEntry]:
        backend = self.pool.by_name.get(name)
        models = backend.spec.models if backend is not None else ()
        return [{"id": m, "object": "model", "owned_by": "director"} for m in models]
