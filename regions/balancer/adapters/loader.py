# SPDX-License-Identifier: Apache-2.0
"""Loading LoRA adapters on GPU servers through their engine's runtime API, and reading
what each holds.

``ensure(backend, adapter, evict)`` loads ``adapter`` on ``backend`` (vLLM's ``POST
/v1/load_lora_adapter``). ``evict`` leaves that backend's routing at once and is unloaded
(``POST /v1/unload_lora_adapter``) before the load when no request of it is in flight
there, else once they have ended: a request sent before the eviction must not find its
adapter gone (vLLM's own LRU makes room meanwhile; unloading only tidies). Concurrent
calls for the same backend and adapter share one load: the first starts it, the others
wait for its outcome, so a burst of requests for a cold adapter costs the server one
load. An answer of "already been loaded" counts as loaded. Any other refusal (no runtime
API, no LoRA, a bad path), a timeout or a connection error is a failed load: the
placement leaves that backend out for a while (``placement.REFUSED_FOR_S``).

``sync()`` reads every backend's ``/v1/models``: the entries whose ``parent`` is a model
it serves are the adapters it holds (loaded by us, by its ``--lora-modules``, or by
someone else), and adapters the policy does not name become known with their ``root``
as path. A restarted server that lost its adapters is seen here; until then a request
sent to it for one gets its 404, which ``forget`` takes into account.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping

import aiohttp

from regions.balancer.adapters.placement import AdapterPlacement
from regions.balancer.scheduling.backends import BackendPool
from regions.balancer.signals.model_catalog import ModelCatalog

log = logging.getLogger(__name__)

LOAD_PATH = "/v1/load_lora_adapter"
UNLOAD_PATH = "/v1/unload_lora_adapter"
LOAD_TIMEOUT_S = 60.0  # a load reads weights from disk or a hub: it may take a while
UNLOAD_POLL_S = 0.5
LOAD_ERRORS = (aiohttp.ClientError, TimeoutError, OSError)


class AdapterLoader:
    """Loads adapters where the placement says, one load per backend and adapter at once."""

    def __init__(self, placement: AdapterPlacement, pool: BackendPool,
                 sessions: Mapping[str, aiohttp.ClientSession], catalog: ModelCatalog,
                 counted: Callable[[str, str], None] | None = None,
                 timeout_s: float = LOAD_TIMEOUT_S) -> None:
        """``counted(backend, outcome)`` is told each load's outcome (loaded, failed);
        ``catalog`` reads the backends' ``/v1/models`` (one cache for clients and us)."""
        self.placement = placement
        self.pool = pool
        self.sessions = sessions
        self.catalog = catalog
        self.counted = counted
        self.timeout_s = timeout_s
        self._loads: dict[tuple[str, str], asyncio.Future[bool]] = {}
        self._task: asyncio.Task[None] | None = None
        self._unloads: set[asyncio.Future[None]] = set()

    async def ensure(self, backend: str, adapter: str, evict: str | None = None) -> bool:
        """Whether ``adapter`` is loaded on ``backend`` now (loading it, or waiting for the
        load under way)."""
        key = (backend, adapter)
        future = self._loads.get(key)
        if future is None:
            self.placement.started(backend, adapter, evict)  # before anyone decides again
            if evict is not None:
                self._publish(backend)  # nothing more goes there for it
            future = self._loads[key] = asyncio.ensure_future(self._load(backend, adapter,
                                                                         evict))
            future.add_done_callback(lambda _: self._loads.pop(key, None))
        return await asyncio.shield(future)

    def under_way(self, backend: str, adapter: str) -> bool:
        """Whether a load of ``adapter`` on ``backend`` is under way."""
        return (backend, adapter) in self._loads

    async def _load(self, backend: str, adapter: str, evict: str | None) -> bool:
        spec = self.placement.adapters[adapter]
        ok = False
        try:
            if evict is not None and not self.placement.in_flight[(backend, evict)]:
                await self._unload(backend, evict, adapter)
                evict = None
            status, text = await self._post(backend, LOAD_PATH,
                                            {"lora_name": adapter, "lora_path": spec.path})
            ok = status == 200 or (status == 400 and "already been loaded" in text)
            if ok:
                log.info("backend %s: loaded LoRA adapter %s", backend, adapter)
            else:
                log.warning("backend %s: refused to load LoRA adapter %s (%s): %s", backend,
                            adapter, status, text[:200])
        except LOAD_ERRORS as exc:
            log.warning("backend %s: loading LoRA adapter %s failed: %s", backend, adapter,
                        exc or type(exc).__name__)
        finally:
            self.placement.ended(backend, adapter, ok)
            self._publish(backend)
            if self.counted is not None:
                self.counted(backend, "loaded" if ok else "failed")
        if evict is not None:  # its requests there still run: unload it once they end
            task = asyncio.ensure_future(self._unload_when_idle(backend, evict, adapter))
            self._unloads.add(task)
            task.add_done_callback(self._unloads.discard)
        return ok

    async def _unload(self, backend: str, evict: str, adapter: str) -> None:
        """Unload ``evict`` from ``backend`` (a 404 means it is gone already)."""
        try:
            await self._post(backend, UNLOAD_PATH, {"lora_name": evict})
            log.info("backend %s: unloaded LoRA adapter %s for %s", backend, evict, adapter)
        except LOAD_ERRORS as exc:
            log.warning("backend %s: unloading LoRA adapter %s failed: %s", backend, evict,
                        exc or type(exc).__name__)
        finally:
            self.placement.unloaded(backend, evict)

    async def _unload_when_idle(self, backend: str, evict: str, adapter: str) -> None:
        deadline = asyncio.get_running_loop().time() + self.timeout_s
        while self.placement.in_flight[(backend, evict)]:
            if asyncio.get_running_loop().time() > deadline:
                self.placement.unloaded(backend, evict)  # the server's own LRU will do
                return
            await asyncio.sleep(UNLOAD_POLL_S)
        if evict in self.placement.dropped.get(backend, set()):  # not loaded there again
            await self._unload(backend, evict, adapter)

    async def _post(self, backend: str, path: str, body: dict[str, str]) -> tuple[int, str]:
        session = self.sessions[backend]
        url = self.pool[backend].spec.url + path
        async with asyncio.timeout(self.timeout_s), session.post(url, json=body) as resp:
            return resp.status, (await resp.text())[:4096]

    def forget(self, backend: str, adapter: str) -> None:
        """``backend`` answered that it does not know ``adapter``: it no longer holds it."""
        self.placement.forget(backend, adapter)
        self._publish(backend)

    def _publish(self, backend: str) -> None:
        if backend in self.pool.by_name:
            self.pool.set_adapters(backend, self.placement.holding(backend))

    # -- what the servers hold -------------------------------------------------------------

    async def sync(self) -> None:
        """Read each usable backend's ``/v1/models`` and take its adapters from there."""
        names = [b.name for b in self.pool if b.healthy and b.name in self.sessions]
        for name, (read_at, entries) in (await self.catalog.listings(names)).items():
            if name not in self.pool.by_name:
                continue
            listed = {m["id"]: (m["parent"], str(m.get("root") or m["id"])) for m in entries
                      if isinstance(m.get("parent"), str)}
            self.placement.observe(name, self.pool[name].spec.models, listed, read_at)
            self._publish(name)

    async def start(self, every_s: float) -> None:
        """In the background: read what the backends hold, then again every ``every_s``
        while any adapter is known (0: never)."""
        if every_s > 0 and self._task is None:
            self._task = asyncio.create_task(self._follow(every_s), name="adapter-sync")

    async def stop(self) -> None:
        task, self._task = self._task, None
        pending = [*self._unloads, *([task] if task is not None else [])]
        for each in pending:
            each.cancel()
        await asyncio.gather(*pending, return_exceptions=True)

    async def _follow(self, every_s: float) -> None:
        await self.sync()
        while True:
            await asyncio.sleep(every_s)
            if self.placement.adapters:
                await self.sync()

