from __future__ import annotations

import datetime as dt
import re

import pytest

from policies.model import Failover
from tests.policy_text import make_policy, region
from workers.app import create_app
from workers.beat import PolicyScheduler
from workers.config import WorkerSettings, parse_balancer_urls
from workers.phased import phased
from workers.policy_source import StaticPolicy
from workers.schedule import (
    SLOT_SECONDS,
    build_schedule,
    phase_for,
    slot_count,
    slot_phase,
    target_phase,
)

US = region("us", {"a": "http://127.0.1.11:8000", "b": "http://127.0.1.12:8000/"}, index=1)
EU = region("eu", {"c": "http://127.0.2.11:8000"}, index=2)
POLICY = make_policy((US, EU), gpu_interval=2.0, balancer_interval=1.0)


def _gpus_of(entries: dict, prefix: str) -> dict[str, str]:
    """GPU name -> the name of the entry that probes it, over entries named ``prefix*``."""
    found: dict[str, str] = {}
    for name, entry in entries.items():
        if name.startswith(prefix):
            for target in entry["args"][0]:
                assert target["name"] not in found, f"{target['name']} probed twice"
                found[target["name"]] = name
    return found


def _as_entries(scheduler: PolicyScheduler) -> dict:
    return {name: {"args": entry.args} for name, entry in scheduler.schedule.items()}


def test_entry_names_tasks_and_queues() -> None:
    entries = build_schedule(POLICY, balancer_port=8080)
    gpu_entries = {n for n in entries if n.startswith(("gpu-health:", "gpu-metrics:"))}
    assert set(entries) - gpu_entries == {"balancer:us", "balancer:eu", "latency:us", "latency:eu",
                                          "gpu-versions:us", "gpu-versions:eu"}
    for name in gpu_entries:  # one entry per (kind, region, interval, slot)
        kind, _, rest = name.partition(":")
        assert re.fullmatch(r"(us|eu)/2s#[0-7]", rest), name
        assert entries[name]["task"] == f"director.probe.{kind.replace('-', '_')}_batch"
        assert all(t["region"] == rest.split("/")[0] for t in entries[name]["args"][0])
    assert sorted(_gpus_of(entries, "gpu-health:us/")) == ["a", "b"]
    assert sorted(_gpus_of(entries, "gpu-metrics:us/")) == ["a", "b"]
    assert sorted(_gpus_of(entries, "gpu-health:eu/")) == ["c"]
    assert sorted(_gpus_of(entries, "gpu-metrics:eu/")) == ["c"]
    b_entry = entries[_gpus_of(entries, "gpu-health:")["b"]]
    [b] = [t for t in b_entry["args"][0] if t["name"] == "b"]
    assert b["url"] == "http://127.0.1.12:8000"
    assert entries["balancer:eu"]["task"] == "director.probe.balancer"
    # the version probe: one entry per region with all its servers, at their interval
    versions = entries["gpu-versions:us"]
    assert versions["task"] == "director.probe.gpu_versions"
    assert [t["name"] for t in versions["args"][0]] == ["a", "b"]
    assert versions["options"]["queue"] == "probes.us"
    assert entries["balancer:eu"]["args"][0]["url"] == "http://127.0.2.1:8080"
    assert entries["latency:eu"]["task"] == "director.probe.latency"
    assert entries["latency:eu"]["args"][0]["port"] == 8080
    assert {e["options"]["queue"] for n, e in entries.items() if ":eu" in n} == {"probes.eu"}
    assert {e["options"]["queue"] for n, e in entries.items() if ":us" in n} == {"probes.us"}


@pytest.mark.parametrize(
    ("name", "interval", "expires"),
    [
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


@pytest.mark.parametrize("kind", ["gpu-health", "gpu-metrics"])
def test_batch_intervals_expiry_and_jitter_bounds(kind: str) -> None:
    entries = build_schedule(POLICY)
    slots = slot_count(2.0, 2)
    width = 2.0 / slots
    assert slots == 8 and width == SLOT_SECONDS
    batches = {n: e for n, e in entries.items() if n.startswith(kind + ":")}
    assert batches
    for name, entry in batches.items():
        region, slot = re.fullmatch(rf"{kind}:(\w+)/2s#(\d+)", name).groups()  # type: ignore[union-attr]
        schedule = entry["schedule"]
        assert isinstance(schedule, phased)
        assert schedule.interval == 2.0
        assert entry["options"]["expires"] == 3.0
        # the entry fires inside its slot, at a deterministic offset
        assert int(slot) * width <= schedule.phase < (int(slot) + 1) * width
        assert schedule.phase == slot_phase(kind, region, 2.0, int(slot), slots)
        assert build_schedule(POLICY)[name]["schedule"] == schedule
        # every server in it has its own phase in the same slot: probed < 1 slot from it
        for target in entry["args"][0]:
            own = target_phase(kind, region, target["name"], 2.0)
            assert int(own / width) == int(slot)
            assert abs(own - schedule.phase) < width


def test_phases_spread_probes_across_the_interval() -> None:
    phases = [phase_for(f"gpu-health:r/g{i}", 2.0) for i in range(1000)]
    buckets = [0] * 10
    for phase in phases:
        buckets[int(phase / 0.2)] += 1
    assert min(buckets) > 60  # ~100 each: no lock-step, no empty slice of the interval


def test_batches_spread_servers_over_slots_and_regions_over_each_slot() -> None:
    regions = tuple(
        region(f"r{r}", {f"r{r}g{n}": f"http://127.0.{r + 10}.{n % 250 + 2}:8000/{n}"
                         for n in range(100)}, index=r + 10)
        for r in range(10)
    )  # fmt: skip
    entries = build_schedule(make_policy(regions))
    health = {n: e for n, e in entries.items() if n.startswith("gpu-health:")}
    assert sum(len(e["args"][0]) for e in health.values()) == 1000
    for r in range(10):  # each region's 100 servers over its 8 slots: ~12 each, none empty
        sizes = [len(e["args"][0]) for n, e in health.items() if n.startswith(f"gpu-health:r{r}/")]
        assert len(sizes) == 8 and min(sizes) >= 4 and max(sizes) <= 25
    # slot k of the 10 regions: 10 distinct instants spread over the slot, not one burst
    for slot in range(8):
        phases = [health[f"gpu-health:r{r}/2s#{slot}"]["schedule"].phase for r in range(10)]
        assert len({round(p, 6) for p in phases}) == 10
        assert max(phases) - min(phases) > 0.5 * SLOT_SECONDS
    # a huge region gets more, smaller batches
    assert slot_count(2.0, 100) == 8 and slot_count(2.0, 5000) == 25 and slot_count(0.1, 1) == 1


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
        "alternates": (),  # the URL is an override: no other endpoint to ask
        "endpoints": (),
    }
    a_entry = entries[_gpus_of(entries, "gpu-health:")["a"]]
    assert [t["fall"] for t in a_entry["args"][0] if t["name"] == "a"] == [4]


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
    probed = _gpus_of(_as_entries(scheduler), "gpu-health:")
    assert {"a", "b", "c"} == set(probed)
    a_name, b_name = probed["a"], probed["b"]
    first_run = scheduler.schedule[a_name].last_run_at

    smaller = region("us", {"a": "http://127.0.1.11:8000"}, index=1)
    extra = region("ap", {"d": "http://127.0.4.11:8000"}, index=4)
    source.replace(make_policy((smaller, EU, extra)))
    assert scheduler.reload()
    names = set(scheduler.schedule)
    after = _as_entries(scheduler)
    # the removed server is no longer probed, by health or metrics; its lone slot is gone
    assert "b" not in _gpus_of(after, "gpu-health:") and "b" not in _gpus_of(after, "gpu-metrics:")
    if b_name != a_name:
        assert b_name not in names
    assert {"balancer:ap", "latency:ap"} <= names
    assert set(_gpus_of(after, "gpu-health:ap/")) == {"d"}
    assert scheduler.schedule[a_name].last_run_at == first_run  # kept
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
