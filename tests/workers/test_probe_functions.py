from __future__ import annotations

import json
import socket

from fake_gpu import FakeGpu

from state import StateStore
from state.hysteresis import ProbeOutcome
from state.ports import free_port
from workers.probes.balancer_check import check_balancer, load_from_body
from workers.probes.http_health import check, probe_gpu_health
from workers.probes.latency import connect_ms, measure_latency
from workers.targets import BalancerTarget, GpuTarget, LatencyTarget


def test_check_status_timeout_and_refused(fake_gpu: FakeGpu) -> None:
    ok, result = check(fake_gpu.url, "/health", expect=200, timeout=1.0)
    assert ok and result.status == 200 and result.elapsed_ms > 0
    fake_gpu.status = 503
    ok, result = check(fake_gpu.url, "/health", expect=200, timeout=1.0)
    assert not ok and result.status == 503
    fake_gpu.delay = 0.5
    ok, result = check(fake_gpu.url, "/health", expect=200, timeout=0.1)
    assert not ok and result.status is None and "timed out" in result.error
    ok, result = check(f"http://127.0.0.1:{free_port()}", "/health", expect=200, timeout=0.5)
    assert not ok and result.status is None and "Connection" in result.error


def test_gpu_health_probe_applies_fall(store: StateStore, fake_gpu: FakeGpu) -> None:
    target = GpuTarget("eu", "g1", fake_gpu.url, "vllm", "/health", 200, None, 1.0, 0.5, 2, 2)
    assert probe_gpu_health(store, target, probe_id="1") is ProbeOutcome.CHANGED
    fake_gpu.status = 500
    assert probe_gpu_health(store, target, probe_id="2") is ProbeOutcome.RECORDED
    assert probe_gpu_health(store, target, probe_id="2") is ProbeOutcome.IGNORED
    assert probe_gpu_health(store, target, probe_id="3") is ProbeOutcome.CHANGED
    record = store.gpu_health("eu", "g1")
    assert record is not None and record.up is False
    assert (record.status, record.error) == (500, "status 500, expected 200")


def test_balancer_check_records_health_and_reported_load(
    store: StateStore, fake_gpu: FakeGpu
) -> None:
    fields = {"queue_depth": 3, "in_flight": 9, "outstanding_seconds": 14.5}
    fake_gpu.health_body = json.dumps({**fields, "capacity": 24, "utilization": 0.7}).encode()
    target = BalancerTarget("eu", fake_gpu.url, "/healthz", 200, 1.0, 0.5, 2, 3)
    status = check_balancer(store, target)
    assert status.outcome is ProbeOutcome.CHANGED
    assert status.load is not None and status.load.utilization == 0.7
    assert store.region_load("eu") == status.load
    record = store.balancer_health("eu")
    assert record is not None and record.up is True


def test_a_region_is_up_while_any_of_its_balancers_answers(
    store: StateStore, fake_gpu: FakeGpu
) -> None:
    dead = f"http://127.0.0.1:{free_port()}"
    target = BalancerTarget("eu", dead, "/healthz", 200, 1.0, 0.5, 1, 1,
                            alternates=(fake_gpu.url,))
    assert check_balancer(store, target).outcome is ProbeOutcome.CHANGED
    record = store.balancer_health("eu")
    assert record is not None and record.up is True
    fake_gpu.status = 503  # now none answers
    check_balancer(store, target)
    record = store.balancer_health("eu")
    assert record is not None and record.up is False and record.status == 503


def test_load_from_body_needs_every_field() -> None:
    assert load_from_body(b"ok", now=1.0) is None
    assert load_from_body(b'{"queue_depth": 1}', now=1.0) is None
    assert load_from_body(b"[1, 2]", now=1.0) is None


def test_latency_is_connect_time(store: StateStore) -> None:
    with socket.create_server(("127.0.0.1", 0)) as listener:
        port = listener.getsockname()[1]
        ms = measure_latency(
            store, LatencyTarget("eu", "127.0.0.1", port, 5.0, 0.5), vantage="81.2.69.0/24"
        )
    assert ms is not None and 0 < ms < 500
    [sample] = store.latency()
    assert (sample.vantage, sample.region, sample.ms) == ("81.2.69.0/24", "eu", ms)
    assert connect_ms("127.0.0.1", free_port(), timeout=0.5) is None


def test_each_endpoint_of_a_region_is_probed_and_kept(store: StateStore,
                                                      fake_gpu: FakeGpu) -> None:
    """A region with a balancer on each endpoint: every one is probed each round (not only
    when the first fails) and its health kept apart, for DNS to leave a dead one out."""
    dead = f"http://127.0.0.1:{free_port()}"
    target = BalancerTarget("eu", fake_gpu.url, "/healthz", 200, 1.0, 0.5, 1, 1,
                            alternates=(dead,), endpoints=("10.0.0.1", "10.0.0.2"))
    check_balancer(store, target)
    region, alive, gone = (store.balancer_health("eu"), store.endpoint_health("eu", "10.0.0.1"),
                           store.endpoint_health("eu", "10.0.0.2"))
    assert region is not None and region.up is True
    assert alive is not None and alive.up is True
    assert gone is not None and gone.up is False and "Connection" in gone.error
    assert BalancerTarget.from_dict(json.loads(json.dumps(target.to_dict()))) == target
