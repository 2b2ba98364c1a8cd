"""The beat lease against a real Valkey: one holder at a time, a follower takes over within
a lease of the holder going away, a holder keeps its lease while it renews."""

from __future__ import annotations

from state import StateStore
from workers.beat_lease import BeatLease


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_one_beat_holds_the_lease_and_another_takes_over(store: StateStore) -> None:
    key = store.keys.beat_leader
    clock = Clock()
    first = BeatLease(store.client, key, lease_s=0.6, clock=clock)
    second = BeatLease(store.client, key, lease_s=0.6, clock=clock)
    assert first.held() and not second.held()
    assert store.client.get(key) == first.owner.encode()
    for _ in range(3):  # renewed every third of a lease: held throughout
        clock.now += 0.25
        assert first.held() and not second.held()
    # the holder goes away (stops renewing); once its lease runs out in Redis, the other
    # takes it at its next try
    store.client.delete(key)  # its lease ran out in Redis (the holder stopped renewing)
    clock.now += 0.25
    assert second.held()
    assert store.client.get(key) == second.owner.encode()
    # the old holder notices at its next renewal and stops sending
    clock.now += 0.6
    assert not first.held()
    assert second.retry_in() >= 0.1
