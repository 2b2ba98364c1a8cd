"""A real Celery worker process (with beat) probing a fake GPU server, state in real Valkey."""

from __future__ import annotations

import asyncio
import os
import pickle
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import redis
from fake_gpu import FIXTURES, FakeGpu

from director.engine.snapshot import RegionState
from director.refresh.refresher import SnapshotRefresher
from policies.model import Failover, Policy
from state import AsyncStateStore, EmbeddedValkey, HealthRecord, StateStore
from state.acl import new_password, role_rules
from state.credentials import embed
from tests.policy_text import make_policy, region
from tests.run_clock import RunClock
from workers.config import WorkerSettings

FALL, RISE = 2, 3
HERE = Path(__file__).parent


def _wait(
    read: Callable[[], HealthRecord | None], done: Callable[[HealthRecord], bool], timeout: float
) -> list[HealthRecord]:
    """Poll ``read`` until ``done``; returns every distinct record seen (bounded in time)."""
    seen: list[HealthRecord] = []
    clock = RunClock(0.02)  # the machine's stalls hold up the worker too: not counted
    deadline = clock() + timeout
    while clock() < deadline:
        record = read()
        if record is not None and (not seen or seen[-1] != record):
            seen.append(record)
            if done(record):
                return seen
        time.sleep(0.02)
    pytest.fail(f"timed out after {timeout}s of run time ({clock.lost_s:.1f}s more stalled); "
                f"seen: {seen[-3:]}")


class Worker:
    def __init__(self, policy: Policy, settings: WorkerSettings, tmp: Path) -> None:
        path = tmp / "policy.pickle"
        path.write_bytes(pickle.dumps(policy))
        env = {**os.environ, **settings.to_env(), "PYTHONPATH": os.pathsep.join(sys.path)}
        self.log = open(tmp / "worker.log", "wb")  # noqa: SIM115 -- closed in stop()
        self.process = subprocess.Popen(
            [sys.executable, str(HERE / "launch_worker.py"), str(path)],
            env=env,
            stdout=self.log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )

    def kill(self) -> None:
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(10)

    def stop(self) -> None:
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.kill()
        self.log.close()


@pytest.fixture(scope="module")
def gpu() -> Iterator[FakeGpu]:
    server = FakeGpu(metrics=(FIXTURES / "vllm.prom").read_text()).start()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def setup(valkey: EmbeddedValkey, gpu: FakeGpu, tmp_path_factory: pytest.TempPathFactory):
    policy = make_policy(
        (region("r1", {"g1": gpu.url}),),
        gpu_interval=0.3,
        balancer_interval=0.3,
        failover=Failover(fall=FALL, rise=RISE, interval=0.3, timeout=0.25),
        stale_after=2.0,
    )
    prefix = f"it-{uuid.uuid4().hex[:8]}"
    # the worker runs as the deployments run it: the worker ACL user (state.acl)
    user, password = f"worker-{prefix}", new_password()
    admin = redis.Redis.from_url(valkey.url)
    admin.execute_command("ACL", "SETUSER", user, "on", f">{password}",
                          *role_rules("worker", prefix).split())
    settings = WorkerSettings(
        redis_url=embed(valkey.address, user, password),
        state_prefix=prefix,
        vantage="10.0.0.0/8",
        balancer_urls={"r1": gpu.url},
    )
    worker = Worker(policy, settings, tmp_path_factory.mktemp("worker"))
    store = StateStore.from_url(valkey.url, prefix=settings.state_prefix)
    yield policy, store, worker
    worker.stop()
    store.close()
    admin.execute_command("ACL", "DELUSER", user)
    admin.close()


def test_worker_probes_scrapes_and_measures(setup) -> None:
    _policy, store, _worker = setup
    _wait(lambda: store.gpu_health("r1", "g1"), lambda r: r.up is True, timeout=30)
    _wait(lambda: store.balancer_health("r1"), lambda r: r.up is True, timeout=5)
    deadline = time.monotonic() + 5
    while (
        store.gpu_load("r1", "g1") is None or not store.latency()
    ) and time.monotonic() < deadline:
        time.sleep(0.05)
    load = store.gpu_load("r1", "g1")
    assert load is not None and (load.waiting, load.running) == (4.0, 12.0)
    assert [s.vantage for s in store.latency()] == ["10.0.0.0/8"]


def test_unhealthy_after_fall_probes_healthy_after_rise(setup, gpu: FakeGpu) -> None:
    _policy, store, _worker = setup
    read = lambda: store.gpu_health("r1", "g1")  # noqa: E731
    _wait(read, lambda r: r.up is True, timeout=30)

    gpu.status = 503
    seen = _wait(read, lambda r: r.up is False, timeout=10)
    failing_but_up = [r for r in seen if r.up and r.fail_streak > 0]
    assert all(r.fail_streak < FALL for r in failing_but_up)
    assert seen[-1].fail_streak == FALL and seen[-1].status == 503

    gpu.status = 200
    seen = _wait(read, lambda r: r.up is True, timeout=10)
    recovering = [r for r in seen if r.up is False and r.ok_streak > 0]
    assert recovering and all(r.ok_streak < RISE for r in recovering)
    assert seen[-1].ok_streak == RISE


def test_killed_worker_leaves_stale_but_kept_state(setup, valkey: EmbeddedValkey) -> None:
    policy, store, worker = setup
    _wait(lambda: store.balancer_health("r1"), lambda r: r.up is True, timeout=10)

    async def scenario() -> None:
        aio = AsyncStateStore.from_url(valkey.url, prefix=store.keys.prefix)
        async with SnapshotRefresher(aio, policy, full_read_every=0.2) as refresher:
            assert refresher.current.region("r1") == RegionState(healthy=True)
            worker.kill()
            stale = await refresher.wait_for(lambda s: s.region("r1").stale, timeout=10)
            assert stale.region("r1") == RegionState(healthy=True, stale=True)
            await asyncio.sleep(1.0)  # and it stays so: nothing marks it down
            assert refresher.current.region("r1") == RegionState(healthy=True, stale=True)
        await aio.close()

    asyncio.run(scenario())
