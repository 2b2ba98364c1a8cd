from __future__ import annotations

import time

import pytest

from state import (
    AsyncStateStore,
    DrainFlags,
    GpuLoad,
    LatencySample,
    RegionLoad,
    StateStore,
    StateUnavailable,
)
from state.hysteresis import ProbeOutcome
from state.ports import free_port
from state.records import drain_until, drain_value


def _probe(store: StateStore, ok: bool, now: float, *, rise: int = 2, fall: int = 3) -> bool | None:
    store.record_probe("eu", "gpu-a", ok=ok, rise=rise, fall=fall, now=now, probe_id=f"p{now}")
    record = store.gpu_health("eu", "gpu-a")
    assert record is not None
    return record.up


@pytest.mark.parametrize(
    ("results", "expected"),
    [
        pytest.param("", [], id="nothing"),
        pytest.param("1", [True], id="first-success-is-up"),
        pytest.param("000", [None, None, False], id="unknown-falls-after-fall"),
        pytest.param("1001", [True, True, True, True], id="blips-below-fall"),
        pytest.param("1000", [True, True, True, False], id="down-after-3"),
        pytest.param("100010", [True, True, True, False, False, False], id="rise-resets"),
        pytest.param("1000011", [True, True, True, False, False, False, True], id="up-after-2"),
    ],
)
def test_rise_fall_hysteresis(store: StateStore, results: str, expected: list) -> None:
    seen = [_probe(store, r == "1", now=1000.0 + i) for i, r in enumerate(results)]
    assert seen == expected


def test_streaks_changed_at_and_details(store: StateStore) -> None:
    for i in range(3):
        store.record_probe("eu", None, ok=False, rise=2, fall=3, now=10.0 + i, status=503)
    record = store.balancer_health("eu")
    assert record is not None
    assert (record.up, record.fail_streak, record.ok_streak) == (False, 3, 0)
    assert (record.checked_at, record.changed_at, record.status) == (12.0, 12.0, 503)


def test_duplicate_and_out_of_order_results_are_ignored(store: StateStore) -> None:
    args = {"ok": False, "rise": 1, "fall": 2}
    assert store.record_probe("eu", "g", now=5.0, probe_id="a", **args) is ProbeOutcome.RECORDED
    assert store.record_probe("eu", "g", now=5.5, probe_id="a", **args) is ProbeOutcome.IGNORED
    assert store.record_probe("eu", "g", now=4.0, probe_id="b", **args) is ProbeOutcome.IGNORED
    assert store.record_probe("eu", "g", now=6.0, probe_id="c", **args) is ProbeOutcome.CHANGED
    record = store.gpu_health("eu", "g")
    assert record is not None and record.up is False and record.fail_streak == 2


def test_bad_rise_fall_is_refused(store: StateStore) -> None:
    with pytest.raises(ValueError, match="rise and fall"):
        store.record_probe("eu", "g", ok=True, rise=0, fall=1)


def test_load_latency_policy_drain_round_trip(store: StateStore) -> None:
    now = time.time()
    gpu = GpuLoad("vllm", waiting=3, running=7, cache_usage=0.42, timestamp=now)
    store.write_gpu_load("eu", "g", gpu)
    assert store.gpu_load("eu", "g") == gpu
    region = RegionLoad(4, 12, 30.5, 100, 0.87, now)
    store.write_region_load("eu", region)
    assert store.region_load("eu") == region
    assert store.region_load("us") is None

    store.write_latency(LatencySample("81.2.69.0/24", "eu", 12.5, now))
    store.write_latency(LatencySample("81.2.69.0/24", "eu", 11.0, now + 1))
    assert store.latency() == [LatencySample("81.2.69.0/24", "eu", 11.0, now + 1)]

    assert store.policy() is None
    assert store.set_policy("zone a {}", now=1.0) == 1
    assert store.set_policy("zone b {}", now=2.0) == 2
    record = store.policy()
    assert record is not None and (record.text, record.version) == ("zone b {}", 2)
    assert (record.name, dict(record.files)) == ("policy.dp", {})
    store.set_policy("include r.dp", now=3.0, name="global.dp", files={"r.dp": "region x {}"})
    record = store.policy()
    assert record is not None and record.version == 3
    assert (record.name, dict(record.files)) == ("global.dp", {"r.dp": "region x {}"})

    store.set_drain("eu")
    store.set_drain("us", "g1")
    drains = store.drains()
    assert drains.regions == {"eu"} and drains.gpus == {("us", "g1")}
    store.set_drain("eu", draining=False)
    assert store.drains().regions == frozenset()


def test_writes_publish_the_changed_key(store: StateStore) -> None:
    pubsub = store.client.pubsub(ignore_subscribe_messages=True)
    pubsub.subscribe(store.keys.changes)
    pubsub.get_message(timeout=1.0)  # subscribe confirmation
    store.record_probe("eu", "g", ok=True, rise=1, fall=1, now=1.0)  # unknown -> up: published
    store.record_probe("eu", "g", ok=True, rise=1, fall=1, now=2.0)  # no change: silent
    store.write_region_load("eu", RegionLoad(0, 0, 0, 1, 0, 1.0))
    seen = []
    deadline = time.monotonic() + 2
    while len(seen) < 2 and time.monotonic() < deadline:
        message = pubsub.get_message(timeout=0.2)
        if message:
            seen.append(message["data"].decode())
    pubsub.close()
    assert seen == [store.keys.gpu_health("eu", "g"), store.keys.region_load("eu")]


def test_dead_server_raises_state_unavailable_quickly() -> None:
    store = StateStore.from_url(f"redis://127.0.0.1:{free_port()}/0", timeout=0.5)
    started = time.monotonic()
    with pytest.raises(StateUnavailable, match="unavailable"):
        store.record_probe("eu", "g", ok=True, rise=1, fall=1)
    with pytest.raises(StateUnavailable):
        store.region_load("eu")
    assert time.monotonic() - started < 5


def test_a_drain_with_a_ttl_ends_for_readers_at_its_end() -> None:
    raw = {"eu": "100.0 until 200.0", "us/g1": "100.0", "ap": "100.0 until soon",
           "sa": "100.0 until inf"}
    before = DrainFlags.from_fields(raw, now=199.9)
    assert before.regions == {"eu", "ap", "sa"} and before.gpus == {("us", "g1")}
    after = DrainFlags.from_fields(raw, now=200.0)
    # an end this version cannot read keeps the drain (it must not lapse by mistake)
    assert after.regions == {"ap", "sa"} and after.gpus == {("us", "g1")}
    assert drain_until(drain_value(5.0, 7.5)) == 7.5 and drain_until(drain_value(5.0)) is None


async def test_only_a_drain_whose_ttl_ended_is_removed(valkey, prefix) -> None:
    store = AsyncStateStore.from_url(valkey.url, prefix=prefix)
    try:
        await store.set_drain("eu", until=100.0)
        await store.set_drain("us", "g1", until=300.0)
        await store.set_drain("ap", until=100.0)
        await store.set_drain("ap")  # drained again since, without a ttl
        assert await store.end_expired_drain("eu", None, now=200.0)
        assert not await store.end_expired_drain("us", "g1", now=200.0)  # not yet
        assert not await store.end_expired_drain("ap", None, now=200.0)
        assert not await store.end_expired_drain("sa", None, now=200.0)  # never drained
        flags = DrainFlags.from_fields((await store.fetch([store.keys.drain]))[store.keys.drain],
                                       now=200.0)
        assert flags.regions == {"ap"} and flags.gpus == {("us", "g1")}
    finally:
        await store.close()


def test_a_failing_target_that_is_still_up_is_published_when_it_starts_and_stops_failing(
        store: StateStore) -> None:
    """The global tier shortens the TTL of a region whose balancer is failing (not yet down):
    it hears of the first failure, and of the pass that ends the streak, not of each probe."""
    pubsub = store.client.pubsub(ignore_subscribe_messages=True)
    pubsub.subscribe(store.keys.changes)
    pubsub.get_message(timeout=1.0)  # subscribe confirmation
    key = store.keys.gpu_health("eu", "g")
    results = [(True, "up"), (False, "first failure"), (False, None), (True, "streak ends"),
               (True, None), (False, "first failure"), (False, None), (False, "down")]
    expected = []
    for n, (ok, heard) in enumerate(results, start=1):
        store.record_probe("eu", "g", ok=ok, rise=2, fall=3, now=float(n))
        if heard:
            expected.append(key)
    seen = []
    deadline = time.monotonic() + 5
    while len(seen) < len(expected) and time.monotonic() < deadline:
        message = pubsub.get_message(timeout=0.2)
        if message:
            seen.append(message["data"].decode())
    assert pubsub.get_message(timeout=0.3) is None  # and nothing more
    pubsub.close()
    assert seen == expected
