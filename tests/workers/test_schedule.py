from __future__ import annotations

import datetime as dt

import pytest
from worker_policies import make_policy, region

from policies.model import Failover
from workers.app import create_app
from workers.beat import PolicyScheduler
from workers.config import WorkerSettings, parse_balancer_urls
from workers.phased import phased
from workers.policy_source import StaticPolicy
from workers.schedule import build_schedule, phase_for

US = region("us", {"a": "http://127.0.1.11:8000", "b": "http://127.0.1.12:8000/"}, index=1)
EU = region("eu", {"c": "http://127.0.2.11:8000"}, index=2)
POLICY = make_policy((US, EU), gpu_interval=2.0, balancer_interval=1.0)


def test_entry_names_tasks_and_queues() -> None:
    entries = build_schedule(POLICY, balancer_port=8080)
    assert sorted(entries) == sorted(
        [
            "gpu-health:us/a",
            "gpu-metrics:us/a",
            "gpu-health:us/b",
            "gpu-metrics:us/b",
            "gpu-health:eu/c",
            "gpu-metrics:eu/c",
            "balancer:us",
            "balancer:eu",
            "latency:us",
            "latency:eu",
        ]
    )
    assert entries["gpu-health:us/b"]["task"] == "director.probe.gpu_health"
    assert entries["gpu-health:us/b"]["args"][0]["url"] == "http://127.0.1.12:8000"
    assert entries["balancer:eu"]["args"][0]["url"] == "http://127.0.2.1:8080"
    assert entries["latency:eu"]["args"][0]["port"] == 8080
    assert {e["options"]["queue"] for n, e in entries.items() if ":eu" in n} == {"probes.eu"}


@pytest.mark.parametrize(
    ("name", "interval", "expires"),
    [
        pytest.param("gpu-health:us/a", 2.0, 3.0, id="gpu-health"),
        pytest.param("gpu-metrics:us/a", 2.0, 3.0, id="gpu-metrics"),
        pytest.param("balancer:us", 1.0, 1.5, id="balancer"),
        pytest.param("latency:us", 5.0, 7.5, id="latency"),
    ],
)
def test_intervals_expiry_and_jitter_bounds(name: str, interval: float, expires: float) -> None:
    entry = build_schedule(POLICY)[name]
    schedule = entry["schedule"]
    assert isinstance(schedule, phased)
    assert schedule.interval == interval
    assert entry["options"]["expires"] == expires
    assert 0 <= schedule.phase < interval
    assert schedule.phase == phase_for(name, interval)  # deterministic
    assert build_schedule(POLICY)[name]["schedule"] == schedule


def test_phases_spread_probes_across_the_interval() -> None:
    phases = [phase_for(f"gpu-health:r/g{i}", 2.0) for i in range(1000)]
    buckets = [0] * 10
    for phase in phases:
        buckets[int(phase / 0.2)] += 1
    assert min(buckets) > 60  # ~100 each: no lock-step, no empty slice of the interval


def test_balancer_follows_the_faster_failover_and_its_hysteresis() -> None:
    policy = make_policy((US,), failover=Failover(fall=4, rise=5, interval=0.5, timeout=0.2))
    entries = build_schedule(policy, balancer_urls={"us": "http://127.0.0.1:9000/"})
    balancer = entries["balancer:us"]
    assert balancer["schedule"].interval == 0.5
    assert balancer["args"][0] == {
        "region": "us",
        "url": "http://127.0.0.1:9000",
        "health_path": "/healthz",
        "expect": 200,
        "interval": 0.5,
        "timeout": 0.5,
        "rise": 5,
        "fall": 4,
    }
    assert entries["gpu-health:us/a"]["args"][0]["fall"] == 4


def test_phased_is_due_on_its_grid() -> None:
    schedule = phased(2.0, 0.5)
    assert schedule.next_fire(100.0) == 100.5
    assert schedule.next_fire(100.5) == 102.5
    now = dt.datetime.now(dt.UTC)
    due, wait = schedule.is_due(now - dt.timedelta(seconds=5))
    assert due and 0 < wait <= 2.0
    due, wait = schedule.is_due(now + dt.timedelta(seconds=1))
    assert not due and 0 < wait <= 3.0


def test_scheduler_follows_policy_changes() -> None:
    app = create_app(WorkerSettings(redis_url="redis://127.0.0.1:1/0"))
    source = StaticPolicy(POLICY)
    app.conf.director_policy_source = source
    scheduler = PolicyScheduler(app=app)  # builds the schedule; no broker connection yet
    assert "gpu-health:us/b" in scheduler.schedule
    first_run = scheduler.schedule["gpu-health:us/a"].last_run_at

    smaller = region("us", {"a": "http://127.0.1.11:8000"}, index=1)
    extra = region("ap", {"d": "http://127.0.4.11:8000"}, index=4)
    source.replace(make_policy((smaller, EU, extra)))
    assert scheduler.reload()
    names = set(scheduler.schedule)
    assert "gpu-health:us/b" not in names and "gpu-metrics:us/b" not in names
    assert {"gpu-health:ap/d", "balancer:ap", "latency:ap"} <= names
    assert scheduler.schedule["gpu-health:us/a"].last_run_at == first_run  # kept
    assert not scheduler.reload()  # unchanged: nothing to do


def test_balancer_urls_setting() -> None:
    assert parse_balancer_urls(" eu=http://a:1 , us=http://b:2") == {
        "eu": "http://a:1",
        "us": "http://b:2",
    }
    with pytest.raises(ValueError, match="expected region=url"):
        parse_balancer_urls("eu")
    settings = WorkerSettings(balancer_urls={"eu": "http://a:1"}, policy_path="p.dp")
    assert WorkerSettings.from_env(settings.to_env()) == settings
