"""Drain and undrain regions and GPU servers in the shared state, optionally for a ttl.

A drain with a ttl is undone by a dead-man timer in this process (logged in the audit log
as done by ``deadman``); a later drain or undrain of the same target replaces the timer.
"""

from __future__ import annotations

from typing import Any

from director.api.audit import AuditLog
from director.api.deadman import Deadman
from director.api.targets import check_ttl, find_gpu, find_region
from director.state import AsyncStateStore
from policies import Policy


class Drains:
    def __init__(self, store: AsyncStateStore, deadman: Deadman, audit: AuditLog) -> None:
        self._store = store
        self._deadman = deadman
        self._audit = audit

    async def set(self, policy: Policy, region: str, gpu: str | None, *, draining: bool,
                  ttl: Any = None) -> dict[str, Any]:
        """Set the drain flag; raises ``NotFound``, ``BadTtl`` or ``StateError``."""
        if gpu is None:
            find_region(policy, region)
        else:
            find_gpu(policy, region, gpu)
        seconds = check_ttl(ttl, default=None) if draining else None
        target = region if gpu is None else f"{region}/{gpu}"
        key = f"drain {target}"
        await self._store.set_drain(region, gpu, draining=draining)
        self._deadman.cancel(key)
        until = None
        if seconds is not None:
            until = self._deadman.schedule(key, seconds, lambda: self._expire(region, gpu))
        return {"region": region, "gpu": gpu, "draining": draining, "until": until}

    async def _expire(self, region: str, gpu: str | None) -> None:
        target = f"region {region}" if gpu is None else f"gpu {region}/{gpu}"
        try:
            await self._store.set_drain(region, gpu, draining=False)
        except Exception as exc:
            self._audit.record("deadman", "undrain", target, {"reason": "ttl"}, f"error: {exc}")
            raise
        self._audit.record("deadman", "undrain", target, {"reason": "ttl"})
