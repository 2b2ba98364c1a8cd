"""Batch probes: many targets concurrently on one shared session, results in one pipeline."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
from fake_gpu import FIXTURES, FakeGpu

from state import StateStore
from state.hysteresis import ProbeOutcome
from state.ports import free_port
from workers.errors import MetricsError
from workers.probes.batch import fetch_all, probe_gpu_health_batch, scrape_gpu_metrics_batch
from workers.probes.session import ProbeSession
from workers.targets import GpuTarget

IGNORED, RECORDED, CHANGED = ProbeOutcome.IGNORED, ProbeOutcome.RECORDED, ProbeOutcome.CHANGED


@pytest.fixture
def session() -> Iterator[ProbeSession]:
    session = ProbeSession()
    yield session
    session.close()


@pytest.fixture
def slow_gpu() -> Iterator[FakeGpu]:
    server = FakeGpu().start()
    server.delay = 0.6
    yield server
    server.stop()


# a healthy target's bound, generous: this machine can stall a process for ~0.5 s, and
# these tests are about rise/fall and batching, not about how fast a healthy GPU answers
HEALTHY_TIMEOUT_S = 5.0
SLOW_TIMEOUT_S = 0.3  # against slow_gpu's 0.6 s


def _gpu(name: str, url: str, *, rise: int = 2, fall: int = 2,
         timeout: float = HEALTHY_TIMEOUT_S) -> GpuTarget:
    return GpuTarget("eu", name, url, "vllm", "/health", 200, "/metrics", 1.0, timeout, rise, fall)


def test_health_batch_applies_each_targets_rise_fall(
    store: StateStore, fake_gpu: FakeGpu, slow_gpu: FakeGpu, session: ProbeSession
) -> None:
    dead = f"http://127.0.0.1:{free_port()}"
    targets = [
        _gpu("g1", fake_gpu.url),
        _gpu("g2", fake_gpu.url, fall=1),
        _gpu("dead", dead, fall=1),
        _gpu("slow", slow_gpu.url, fall=1, timeout=SLOW_TIMEOUT_S),
    ]
    outcomes = probe_gpu_health_batch(store, targets, probe_id="p1", session=session)
    assert outcomes == [CHANGED, CHANGED, CHANGED, CHANGED]  # unknown -> up / down
    assert store.gpu_health("eu", "g1").up is True  # type: ignore[union-attr]
    dead_record = store.gpu_health("eu", "dead")
    assert dead_record is not None and dead_record.up is False and dead_record.status is None
    assert "Connect" in dead_record.error
    slow_record = store.gpu_health("eu", "slow")
    assert slow_record is not None and slow_record.up is False and "timed out" in slow_record.error

    # a redelivered batch counts for no target
    assert probe_gpu_health_batch(store, targets, probe_id="p1", session=session) == [IGNORED] * 4

    fake_gpu.status = 503  # g1 falls after 2 failures, g2 after 1
    outcomes = probe_gpu_health_batch(store, targets[:2], probe_id="p2", session=session)
    assert outcomes == [RECORDED, CHANGED]
    assert probe_gpu_health_batch(store, targets[:2], probe_id="p3", session=session) == [
        CHANGED,
        RECORDED,
    ]
    g1 = store.gpu_health("eu", "g1")
    assert g1 is not None and g1.up is False and g1.fail_streak == 2
    assert (g1.status, g1.error) == (503, "status 503, expected 200")


def test_slow_targets_cost_their_timeout_once_not_each(
    store: StateStore, fake_gpu: FakeGpu, slow_gpu: FakeGpu, session: ProbeSession
) -> None:
    targets = [_gpu(f"s{i}", slow_gpu.url, fall=1, timeout=SLOW_TIMEOUT_S) for i in range(40)]
    targets += [_gpu(f"f{i}", fake_gpu.url) for i in range(4)]  # FakeGpu's listen backlog: 5
    started = time.perf_counter()
    outcomes = probe_gpu_health_batch(store, targets, probe_id="x", session=session)
    elapsed = time.perf_counter() - started
    # 40 timeouts one after another take 12 s; four at a time 3 s: more than four overlap
    # (the bound leaves a stalled machine 2.7 s beyond one timeout)
    assert elapsed < 10 * SLOW_TIMEOUT_S, elapsed
    assert outcomes == [CHANGED] * 44
    assert [store.gpu_health("eu", t.name).up for t in targets] == [False] * 40 + [True] * 4  # type: ignore[union-attr]


def test_each_probe_has_its_own_start_time(fake_gpu: FakeGpu, session: ProbeSession) -> None:
    before = time.time()
    fetched = fetch_all([_gpu("a", fake_gpu.url), _gpu("b", fake_gpu.url)], "health_path",
                        session=session)  # fmt: skip
    assert [f.target.name for f in fetched] == ["a", "b"]
    assert all(before <= f.started_at <= time.time() and f.result.status == 200 for f in fetched)
    assert fetch_all([], "health_path", session=session) == []


def test_session_is_shared_across_batches_and_restarts_after_close() -> None:
    session = ProbeSession()

    async def which(http):  # type: ignore[no-untyped-def]
        return id(http)

    first = session.run(which, timeout=5)
    assert session.run(which, timeout=5) == first  # one pooled client for every batch
    session.close()
    assert isinstance(session.run(which, timeout=5), int)  # usable again after close
    session.close()


def test_metrics_batch_stores_what_it_can_read(
    store: StateStore, fake_gpu: FakeGpu, session: ProbeSession
) -> None:
    fake_gpu.metrics = (FIXTURES / "vllm.prom").read_text()
    good = _gpu("good", fake_gpu.url)
    missing = GpuTarget("eu", "missing", fake_gpu.url, "vllm", "/health", 200, "/nope", 1.0,
                        HEALTHY_TIMEOUT_S, 2, 3)  # fmt: skip
    wrong = GpuTarget("eu", "wrong", fake_gpu.url, "tgi", "/health", 200, "/metrics", 1.0,
                      HEALTHY_TIMEOUT_S, 2, 3)  # fmt: skip
    none = GpuTarget("eu", "none", fake_gpu.url, "vllm", "/health", 200, None, 1.0,
                     HEALTHY_TIMEOUT_S, 2, 3)  # fmt: skip
    outcomes = scrape_gpu_metrics_batch(store, [good, missing, wrong, none], session=session)
    assert set(outcomes) == {"eu/good", "eu/missing", "eu/wrong"}
    load = outcomes["eu/good"]
    assert not isinstance(load, MetricsError) and (load.waiting, load.running) == (4.0, 12.0)
    assert store.gpu_load("eu", "good") == load
    assert isinstance(outcomes["eu/missing"], MetricsError)
    assert "/nope: status 404" in str(outcomes["eu/missing"])
    assert "engine tgi" in str(outcomes["eu/wrong"])
    assert store.gpu_load("eu", "missing") is None and store.gpu_load("eu", "wrong") is None
