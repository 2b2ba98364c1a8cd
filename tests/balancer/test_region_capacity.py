# SPDX-License-Identifier: Apache-2.0
"""Late binding (``CapacityConfig.late_binding``, opt-in) only where every capacity is known:
while one healthy backend's capacity is unknown, no backend is full, and requests spread as
least-outstanding-requests spreads them instead of all going to the one backend with
"room"."""

from __future__ import annotations

from collections import Counter

from regions.balancer.scheduling.admission import Dispatcher
from regions.balancer.scheduling.backend import BackendSpec, ScrapedLoad
from regions.balancer.scheduling.backends import BackendPool
from regions.balancer.scheduling.capacity import UNBOUNDED, CapacityConfig
from regions.balancer.scheduling.registry import Registry, build_profile, register_builtin_plugins
from tests.balancer.helpers import MODEL, req


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def region(n: int = 3) -> tuple[BackendPool, Dispatcher, Clock]:
    clock = Clock()
    specs = [BackendSpec(f"gpu{i}", f"http://127.0.0.1:{9000 + i}", (MODEL,)) for i in range(n)]
    pool = BackendPool(specs, clock=clock, capacity=CapacityConfig(late_binding=True))
    profile = build_profile(register_builtin_plugins(Registry()),
                            scorers=(("least-requests", 1.0),))
    return pool, Dispatcher(pool, profile), clock


def saturate(pool: BackendPool, clock: Clock, name: str, slots: int) -> None:
    """Scrapes of a server running ``slots`` with requests waiting: its capacity."""
    for _ in range(3):
        clock.now += 1.0
        pool.set_scraped(name, ScrapedLoad(waiting=2.0, running=float(slots), kv_usage=0.3))


def test_an_unknown_backend_leaves_every_backend_without_a_limit() -> None:
    pool, _, clock = region()
    saturate(pool, clock, "gpu0", 4)
    saturate(pool, clock, "gpu1", 4)
    views = pool.snapshot().backends
    assert [v.cap_known for v in views] == [True, True, False]
    assert all(v.limit == UNBOUNDED for v in views)
    saturate(pool, clock, "gpu2", 4)
    assert [v.limit for v in pool.snapshot().backends] == [4, 4, 4]


def test_requests_spread_while_a_capacity_is_unknown() -> None:
    pool, dispatcher, clock = region()
    saturate(pool, clock, "gpu0", 2)
    saturate(pool, clock, "gpu1", 2)
    leases = []
    for _ in range(30):
        lease, decision = dispatcher.try_bind(req())
        assert lease is not None, decision.stopped_at  # nothing held, nothing refused
        leases.append(lease)
    counts = Counter(lease.backend.name for lease in leases)
    assert max(counts.values()) - min(counts.values()) <= 1  # as leastconn shares them


def test_once_every_capacity_is_known_the_region_queue_holds_the_rest() -> None:
    pool, dispatcher, clock = region(2)
    saturate(pool, clock, "gpu0", 2)
    saturate(pool, clock, "gpu1", 2)
    bound = [dispatcher.try_bind(req())[0] for _ in range(5)]
    assert [lease is not None for lease in bound] == [True] * 4 + [False]
    assert dispatcher.try_bind(req())[1].stopped_at == "capacity"


def test_an_unhealthy_backend_does_not_make_the_region_unsure() -> None:
    pool, _, clock = region()
    saturate(pool, clock, "gpu0", 4)
    saturate(pool, clock, "gpu1", 4)
    pool.set_healthy("gpu2", False)
    assert [v.limit for v in pool.snapshot().backends[:2]] == [4, 4]
    pool.set_healthy("gpu2", True)  # back, capacity unknown: no limits until learned
    views = pool.snapshot().backends
    assert [v.limit for v in views[:2]] == [UNBOUNDED, UNBOUNDED]
    assert views[2].limit < 4  # itself in slow start, ramping up


def test_without_late_binding_a_learned_capacity_holds_nothing() -> None:
    clock = Clock()
    specs = [BackendSpec(f"gpu{i}", f"http://127.0.0.1:{9000 + i}", (MODEL,)) for i in range(2)]
    specs.append(BackendSpec("pinned", "http://127.0.0.1:9009", (MODEL,), 3))
    pool = BackendPool(specs, clock=clock)
    saturate(pool, clock, "gpu0", 2)
    saturate(pool, clock, "gpu1", 2)
    views = pool.snapshot().backends
    assert [v.cap for v in views] == [2, 2, 3] and all(v.cap_known for v in views)
    assert [v.limit for v in views] == [UNBOUNDED, UNBOUNDED, 3]  # a pin always holds
