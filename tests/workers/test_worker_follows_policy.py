"""Workers follow the stored policy without being asked: a real worker (with beat) started
from a policy naming one GPU server probes the second one a newly stored version adds.
``DIRECTOR_FOLLOW_POLICY=0`` / ``follow_policy=False`` keep the file."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from celery import Celery
from fake_gpu import FakeGpu
from test_worker_integration import Worker, _wait

from policies.model import Failover
from state import EmbeddedValkey, StateStore
from tests.policy_text import make_policy, make_policy_text, region
from workers.config import WorkerSettings
from workers.policy_source import PolicyFile, StoredPolicy
from workers.runner import run_worker

EXAMPLE = Path(__file__).parents[2] / "policies" / "examples" / "minimal.dp"
FAST = {"gpu_interval": 0.3, "balancer_interval": 0.3,
        "failover": Failover(fall=2, rise=1, interval=0.3, timeout=0.25)}


@pytest.fixture
def second_gpu() -> Iterator[FakeGpu]:
    server = FakeGpu().start()
    yield server
    server.stop()


def test_a_worker_probes_the_gpu_server_a_stored_version_adds(
        valkey: EmbeddedValkey, fake_gpu: FakeGpu, second_gpu: FakeGpu, tmp_path: Path) -> None:
    settings = WorkerSettings(redis_url=valkey.url, state_prefix=f"wf-{uuid.uuid4().hex[:8]}",
                              balancer_urls={"r1": fake_gpu.url})
    store = StateStore.from_url(valkey.url, prefix=settings.state_prefix)
    worker = Worker(make_policy((region("r1", {"g1": fake_gpu.url}),), **FAST), settings,
                    tmp_path)
    try:
        _wait(lambda: store.gpu_health("r1", "g1"), lambda r: r.up is True, timeout=60)
        assert store.gpu_health("r1", "g2") is None
        store.set_policy(make_policy_text(
            (region("r1", {"g1": fake_gpu.url, "g2": second_gpu.url}),), **FAST))
        _wait(lambda: store.gpu_health("r1", "g2"), lambda r: r.up is True, timeout=30)
    finally:
        worker.stop()
        store.close()


@pytest.fixture
def started(monkeypatch: pytest.MonkeyPatch) -> list[Celery]:
    calls: list[Celery] = []
    monkeypatch.setattr(Celery, "worker_main", lambda app, argv: calls.append(app))
    return calls


def test_run_worker_follows_unless_told_not_to(started: list[Celery]) -> None:
    run_worker(EXAMPLE, "redis://127.0.0.1:1/0")
    run_worker(EXAMPLE, "redis://127.0.0.1:1/0", follow_policy=False)
    following, static = started
    assert isinstance(following.conf.director_policy_source, StoredPolicy)
    assert following.conf.director_settings.follow_policy is True
    assert isinstance(static.conf.director_policy_source, PolicyFile)
    assert static.conf.director_settings.follow_policy is False
    # a beat in another process reads the choice from the environment
    assert static.conf.director_settings.to_env()["DIRECTOR_FOLLOW_POLICY"] == "0"


def test_follow_policy_setting_from_the_environment() -> None:
    assert WorkerSettings.from_env({}).follow_policy is True
    assert WorkerSettings.from_env({"DIRECTOR_FOLLOW_POLICY": "0"}).follow_policy is False
    assert WorkerSettings.from_env({"DIRECTOR_FOLLOW_POLICY": "yes"}).follow_policy is True
    with pytest.raises(ValueError, match="DIRECTOR_FOLLOW_POLICY: expected 1 or 0"):
        WorkerSettings.from_env({"DIRECTOR_FOLLOW_POLICY": "sometimes"})
