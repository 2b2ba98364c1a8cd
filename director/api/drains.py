"""Drain and undrain regions and GPU servers in the shared state, optionally for a ttl.

A drain with a ttl stores its end with the flag, so every reader (DNS, balancers, the API)
stops honouring it then even if no API is left to undo it. A dead-man timer in this process
also removes the flag at that time (logged in the audit log as done by ``deadman``); a later
drain or undrain of the same target replaces the timer. An API that starts (again) takes over
the timers of the drains it finds: it removes those past their end and arms the others.
"""

from __future__ import annotations

import functools
import time
from typing import Any

from director.api.audit import AuditLog
from director.api.deadman import Deadman
from director.api.targets import check_ttl, find_gpu, find_region
from policies import Policy
from state import AsyncStateStore
from state.keys import drain_field
from state.records import drain_until


class Drains:
    def __init__(self, store: AsyncStateStore, deadman: Deadman, audit: AuditLog) -> None:
        self._store = store
        self._deadman = deadman
        self._audit = audit

    async def set(self, policy: Policy, region: str, gpu: str | None, *, draining: bool,
                  ttl: Any = None) -> dict[str, Any]:
        """Set the drain flag; raises ``NotFound``, ``BadTtl`` or ``StateError``. The
        answer says whether the flag reached the replicas (``state.durability``)."""
        if gpu is None:
            find_region(policy, region)
        else:
            find_gpu(policy, region, gpu)
        seconds = check_ttl(ttl, default=None) if draining else None
        key = f"drain {drain_field(region, gpu)}"
        until = None if seconds is None else time.time() + seconds
        durability = await self._store.set_drain(region, gpu, draining=draining, until=until)
        self._deadman.cancel(key)
        if seconds is not None:
            self._deadman.schedule(key, seconds, lambda: self._expire(region, gpu))
        return {"region": region, "gpu": gpu, "draining": draining, "until": until,
                "durability": durability.to_json()}

    async def resume(self) -> int:
        """Take over the ttls of the drains in the shared state (at start): remove those
        past their end, arm a timer for the others; returns how many were found.
        Raises ``StateError``."""
        fetched = await self._store.fetch([self._store.keys.drain])
        found = 0
        now = time.time()
        for raw_name, value in fetched.get(self._store.keys.drain, {}).items():
            until = drain_until(value.decode())
            if until is None:
                continue
            found += 1
            name = raw_name.decode()  # drain_field(region, gpu), as set() keys its timer
            region, _, gpu_name = name.partition("/")
            gpu = gpu_name or None
            if until <= now:
                await self._expire(region, gpu)
            else:
                self._deadman.schedule(f"drain {name}", until - now,
                                       functools.partial(self._expire, region, gpu))
        return found

    async def _expire(self, region: str, gpu: str | None) -> None:
        """Remove the drain whose ttl ran out (unless it was set again since)."""
        target = f"region {region}" if gpu is None else f"gpu {region}/{gpu}"
        try:
            # a second of slack: the timer's clock is monotonic, the end is wall clock
            removed = await self._store.end_expired_drain(region, gpu, time.time() + 1.0)
        except Exception as exc:
            self._audit.record("deadman", "undrain", target, {"reason": "ttl"}, f"error: {exc}")
            raise
        if removed:
            self._audit.record("deadman", "undrain", target, {"reason": "ttl"})
