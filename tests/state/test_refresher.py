from __future__ import annotations

import asyncio
import time

from director.engine.snapshot import RegionState
from director.refresh.metrics import RefresherMetrics
from director.refresh.refresher import SnapshotRefresher
from state import AsyncStateStore, EmbeddedValkey, StateStore
from state.records import RegionLoad
from tests.policy_text import fleet_policy as make_policy

POLICY = make_policy({"eu": ["a", "b"], "us": ["c"]}, stale_after=30.0)


def _refresher(url: str, prefix: str, policy=POLICY, **kwargs) -> SnapshotRefresher:
    return SnapshotRefresher(
        AsyncStateStore.from_url(url, prefix=prefix, timeout=0.5), policy, **kwargs
    )


def test_published_change_reaches_the_snapshot(valkey: EmbeddedValkey, store: StateStore) -> None:
    async def scenario() -> None:
        # A long full-read period: only the change channel can deliver this in time.
        async with _refresher(valkey.url, store.keys.prefix, full_read_every=60) as refresher:
            first = refresher.current
            assert first.region("eu") == RegionState()
            await asyncio.to_thread(store.record_probe, "eu", None, ok=True, rise=1, fall=1)
            up = await refresher.wait_for(lambda s: s.region("eu").healthy is True, timeout=2)
            assert up.version > first.version
            for _ in range(2):
                await asyncio.to_thread(store.record_probe, "eu", None, ok=False, rise=1, fall=2)
            await refresher.wait_for(lambda s: s.region("eu").healthy is False, timeout=2)
            await asyncio.to_thread(
                store.write_region_load, "us", RegionLoad(1, 2, 3, 4, 0.5, time.time())
            )
            await refresher.wait_for(lambda s: s.region("us").utilization == 0.5, timeout=2)
            await asyncio.to_thread(store.set_drain, "us")
            await refresher.wait_for(lambda s: s.region("us").draining, timeout=2)
        await refresher.store.close()

    asyncio.run(scenario())


def test_full_read_catches_changes_nobody_published(
    valkey: EmbeddedValkey, store: StateStore
) -> None:
    async def scenario() -> None:
        async with _refresher(valkey.url, store.keys.prefix, full_read_every=0.2) as refresher:
            key = store.keys.gpu_health("us", "c")
            fields = {
                "up": "0",
                "checked_at": repr(time.time()),
                "ok_streak": "0",
                "fail_streak": "3",
            }
            await asyncio.to_thread(store.client.hset, key, mapping=fields)
            await refresher.wait_for(lambda s: s.region("us").healthy is False, timeout=2)
        await refresher.store.close()

    asyncio.run(scenario())


def test_no_swap_when_nothing_changed(valkey: EmbeddedValkey, store: StateStore) -> None:
    async def scenario() -> None:
        refresher = _refresher(valkey.url, store.keys.prefix)
        store.record_probe("eu", None, ok=True, rise=1, fall=1)
        first = await refresher.refresh()
        assert (await refresher.refresh()) is first
        await refresher.store.close()

    asyncio.run(scenario())


def test_removed_region_is_forgotten_on_policy_change(
    valkey: EmbeddedValkey, store: StateStore
) -> None:
    async def scenario() -> None:
        store.record_probe("us", None, ok=True, rise=1, fall=1)
        async with _refresher(valkey.url, store.keys.prefix, full_read_every=60) as refresher:
            assert refresher.current.region("us").healthy is True
            refresher.set_policy(make_policy({"eu": ["a"]}))
            await refresher.wait_for(lambda s: "us" not in s.regions, timeout=2)
        await refresher.store.close()

    asyncio.run(scenario())


def test_fail_static_when_the_server_dies() -> None:
    """Data going missing keeps the last known state, flagged stale after the bound."""
    policy = make_policy({"eu": ["a"], "us": ["c"]}, stale_after=1.0)
    metrics = RefresherMetrics()

    async def scenario(server: EmbeddedValkey) -> None:
        store = StateStore.from_url(server.url, prefix="fs")
        store.record_probe("eu", None, ok=True, rise=1, fall=1)
        for _ in range(2):
            store.record_probe("us", "c", ok=False, rise=1, fall=2)
        store.close()
        async with _refresher(server.url, "fs", policy, metrics=metrics) as refresher:
            before = refresher.current
            assert before.region("eu") == RegionState(healthy=True)
            assert before.region("us") == RegionState(healthy=False)
            server.stop()
            after = await refresher.wait_for(
                lambda s: s.region("eu").stale and s.region("us").stale, timeout=5
            )
            assert after.region("eu") == RegionState(healthy=True, stale=True)
            assert after.region("us") == RegionState(healthy=False, stale=True)
            value = metrics.registry.get_sample_value
            assert value("director_state_reachable") == 0
            assert value("director_state_stale_regions") == 2
            assert value("director_state_region_stale", {"region": "eu"}) == 1
            assert value("director_state_read_errors_total") >= 1
        await refresher.store.close()

    with EmbeddedValkey() as server:
        asyncio.run(scenario(server))


def test_flushed_data_keeps_last_known_state(valkey: EmbeddedValkey, store: StateStore) -> None:
    async def scenario() -> None:
        store.record_probe("eu", None, ok=True, rise=1, fall=1)
        async with _refresher(valkey.url, store.keys.prefix, full_read_every=0.1) as refresher:
            assert refresher.current.region("eu").healthy is True
            await asyncio.to_thread(store.client.delete, store.keys.balancer_health("eu"))
            await asyncio.sleep(0.4)  # several full reads that find nothing
            assert refresher.current.region("eu") == RegionState(healthy=True)
        await refresher.store.close()

    asyncio.run(scenario())
