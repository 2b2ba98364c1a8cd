"""Follow the policy record in Redis: another API instance (or ``director up``) may change it.

Polls the record every ``interval`` seconds. Redis holding no policy yet (a fresh or
restarted server) gets ours, so DNS servers and other instances that follow Redis see the
same policy; so does Redis holding an older version than ours (it lost its data, or was
restored from an old backup): ours is stored again above it (``PolicyHolder.sync``).
"""

from __future__ import annotations

import asyncio
import logging

from director.api.policy_store import PolicyHolder
from state import AsyncStateStore, StateError

log = logging.getLogger(__name__)


async def sync_once(holder: PolicyHolder, store: AsyncStateStore) -> str:
    """One step: adopt a new version, or publish ours when Redis has none; raises
    ``StateError`` when Redis cannot be read."""
    return await holder.sync(store.policy)


async def follow(holder: PolicyHolder, store: AsyncStateStore, interval: float) -> None:
    """Run ``sync_once`` forever, every ``interval`` seconds, riding out Redis outages."""
    failing = False
    while True:
        try:
            await sync_once(holder, store)
        except StateError as exc:
            if not failing:
                log.warning("api: cannot read the policy record, keeping version %d: %s",
                            holder.current.version, exc)
            failing = True
        else:
            failing = False
        await asyncio.sleep(interval)
