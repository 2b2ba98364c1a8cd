# SPDX-License-Identifier: Apache-2.0
"""The pool: exact in-flight accounting, ejection with a time limit, slow start, drain."""

from __future__ import annotations

import pytest

from regions.balancer.errors import BalancerConfigError
from regions.balancer.scheduling.backend import BackendSpec, OutlierConfig
from regions.balancer.scheduling.backends import BackendPool
from regions.balancer.scheduling.speed import Ewma, StreamMeter, decode_step
from regions.balancer.signals.pool_update import apply_specs


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def pool(n: int = 2, clock: FakeClock | None = None, **outliers: float) -> BackendPool:
    specs = [BackendSpec(f"b{i}", f"http://127.0.0.1:{9000 + i}", ("m",), 4) for i in range(n)]
    return BackendPool(specs, outliers=OutlierConfig(**outliers), clock=clock or FakeClock())


def test_lease_accounting_is_exact_and_idempotent() -> None:
    p = pool()
    lease = p.lease(0, 12.5)
    assert (p["b0"].in_flight, p["b0"].work_tokens) == (1, 12.5)
    assert p.snapshot().backends[0].in_flight == 1
    with lease:
        pass
    lease.release()
    assert (p["b0"].in_flight, p["b0"].work_tokens) == (0, 0.0)
    assert p.snapshot().backends[0].in_flight == 0


def test_prefill_backlog_counts_prompts_until_their_first_byte() -> None:
    p = pool()
    a = p.lease(0, 30.0, prefill_tokens=20.0)
    b = p.lease(0, 12.0, prefill_tokens=2.0)
    assert p.snapshot().backends[0].prefill_tokens == pytest.approx(22.0)
    a.started()
    a.started()  # once only
    assert p.snapshot().backends[0].prefill_tokens == pytest.approx(2.0)
    assert p.snapshot().backends[0].work_tokens == pytest.approx(42.0)  # still in flight
    a.release()
    b.release()  # released before its first byte: its prompt leaves the backlog too
    b.started()  # a late first byte after the release changes nothing
    view = p.snapshot().backends[0]
    assert (view.in_flight, view.work_tokens, view.prefill_tokens) == (0, 0.0, 0.0)


def test_prefill_backlog_is_exact_over_many_interleavings() -> None:
    import random

    rng = random.Random(7)
    p = pool()
    open_leases = []
    for _ in range(2000):
        if open_leases and rng.random() < 0.5:
            lease = open_leases.pop(rng.randrange(len(open_leases)))
            if rng.random() < 0.5:
                lease.started()
            lease.release()
        else:
            lease = p.lease(rng.randrange(2), rng.uniform(1, 50), rng.uniform(0, 30))
            if rng.random() < 0.3:
                lease.started()
            open_leases.append(lease)
    expected = sum(x.prefill_tokens for x in open_leases if x.backend.index == 0)
    assert p["b0"].prefill_tokens == pytest.approx(expected, abs=1e-6)
    for lease in open_leases:
        lease.release()
    assert [b.prefill_tokens for b in p] == [0.0, 0.0]


def test_snapshot_is_reused_until_something_changes() -> None:
    p = pool()
    first = p.snapshot()
    assert p.snapshot() is first
    p.lease(1, 1.0)
    assert p.snapshot() is not first


def test_backends_serving_the_same_models_share_one_set() -> None:
    specs = [BackendSpec(f"b{i}", f"http://127.0.0.1:{9000 + i}", models, 4)
             for i, models in enumerate([("m", "n"), ("n", "m"), ("m",), ("n", "m")])]
    p = BackendPool(specs)
    views = p.snapshot().backends
    assert [v.models for v in views] == [{"m", "n"}, {"m", "n"}, {"m"}, {"m", "n"}]
    assert views[0].models is views[1].models is views[3].models
    assert views[2].models is not views[0].models
    specs[2] = BackendSpec("b2", "http://127.0.0.1:9002", ("n", "m"), 4)  # models changed
    apply_specs(p, specs)
    assert p.snapshot().backends[2].models is views[0].models


def test_ejection_after_consecutive_errors_then_slow_start() -> None:
    clock = FakeClock()
    p = pool(4, clock, consecutive_errors=3, base_ejection_s=10.0, slow_start_s=8.0)
    b = p["b0"]
    assert not p.record_failure(b)
    p.record_success(b)  # a success resets the count
    assert not p.record_failure(b)
    assert not p.record_failure(b)
    assert p.record_failure(b)
    assert p.snapshot().backends[0].ejected
    clock.now += 9.9
    assert p.snapshot().backends[0].ejected
    clock.now += 0.2  # ejection over: slow start from cap 1
    view = p.snapshot().backends[0]
    assert not view.ejected and view.cap == 1
    clock.now += 4.0
    assert p.snapshot().backends[0].cap == 2
    clock.now += 4.0
    assert p.snapshot().backends[0].cap == 4


def test_second_ejection_lasts_twice_as_long() -> None:
    clock = FakeClock()
    p = pool(4, clock, consecutive_errors=1, base_ejection_s=10.0, slow_start_s=0.0)
    b = p["b0"]
    p.record_failure(b)
    clock.now += 10.1
    assert not p.snapshot().backends[0].ejected
    p.record_failure(b)
    clock.now += 15.0
    assert p.snapshot().backends[0].ejected
    clock.now += 5.2
    assert not p.snapshot().backends[0].ejected


def test_an_error_rate_ejects_a_backend_that_never_fails_twice_in_a_row() -> None:
    clock = FakeClock()
    p = pool(4, clock, error_rate=0.5, error_rate_min_requests=20)
    b = p["b0"]
    ejected = []
    for _ in range(30):
        clock.now += 0.1
        p.record_success(b)
        ejected.append(p.record_failure(b))
        if any(ejected):
            break
    assert ejected.count(True) == 1 and len(ejected) == 10  # at 20 answers, half errors
    p2 = pool(4, clock, error_rate=0.5, error_rate_min_requests=20)
    for _ in range(40):  # one error in three: under the rate
        clock.now += 0.1
        p2.record_success(p2["b0"])
        p2.record_success(p2["b0"])
        assert not p2.record_failure(p2["b0"])


def test_errors_older_than_the_window_are_forgotten() -> None:
    clock = FakeClock()
    p = pool(4, clock, error_rate=0.5, error_rate_min_requests=20, consecutive_errors=100)
    b = p["b0"]
    for _ in range(15):
        p.record_failure(b)
    clock.now += 11
    for _ in range(10):
        p.record_success(b)
    assert not p.record_failure(b)


def test_the_first_error_on_probation_ejects_again_at_once() -> None:
    clock = FakeClock()
    p = pool(4, clock, consecutive_errors=3, base_ejection_s=10.0, slow_start_s=0.0)
    b = p["b0"]
    for _ in range(3):
        p.record_failure(b)
    clock.now += 10.1  # back, half-open
    assert p.record_failure(b)  # one error is enough
    assert b.ejected_until == pytest.approx(clock.now + 20.0)
    clock.now += 20.1
    p.record_success(b)  # the probe passed: closed again
    assert not p.record_failure(b)
    assert not p.record_failure(b)
    assert p.record_failure(b)


def test_never_ejects_more_than_the_allowed_fraction() -> None:
    p = pool(2, consecutive_errors=1, max_ejected_fraction=0.5)
    assert p.record_failure(p["b0"])
    assert not p.record_failure(p["b1"])
    assert [v.ejected for v in p.snapshot().backends] == [True, False]


def test_drain_and_health_flags_reach_the_snapshot() -> None:
    p = pool()
    p.set_draining("b1", True)
    p.set_healthy("b0", False)
    views = p.snapshot().backends
    assert (views[0].healthy, views[1].draining) == (False, True)
    with pytest.raises(BalancerConfigError, match="no such backend"):
        p.set_draining("nope", True)


def test_drains_by_source_are_independent() -> None:
    p = pool()
    p.set_draining("b0", True, "state")
    p.set_draining("b0", True, "admin")
    p.set_draining("b0", False, "admin")
    assert p.snapshot().backends[0].draining and p["b0"].drains == {"state"}
    p.set_draining("b0", False, "state")
    assert not p.snapshot().backends[0].draining


def test_unlearned_backends_use_the_fleet_mean_rate() -> None:
    p = pool(3)
    assert p.snapshot().backends[0].tokens_per_s == 50.0
    p.record_rate(p["b0"], 100.0)
    p.record_rate(p["b1"], 40.0)
    views = p.snapshot().backends
    assert [v.tokens_per_s for v in views] == [100.0, 40.0, 70.0]
    assert [v.rate_learned for v in views] == [True, True, False]


def test_stream_meter_counts_tokens_after_the_first() -> None:
    meter = StreamMeter()
    meter.observe(b'data: {"choices":[{"text":"a"}]}\n\n', 1.0)
    meter.observe(b'data: {"choices":[{"text":"b"}]}\n\ndata: {"choices":[{"text":"c"}]}\n\n', 1.5)
    meter.observe(b'data: {"choices":[{"text":"d"}]}\n\n', 2.0)
    meter.observe(b'data: {"choices":[],"usage":{}}\n\ndata: [DONE]\n\n', 2.0)
    assert meter.events == 4
    assert meter.rate() == pytest.approx(3 / 1.0)


def test_stream_meter_takes_the_median_gap_so_iterations_that_prefilled_stay_out() -> None:
    """Tokens every 20 ms, two chunks of two tokens 40 ms apart (20 ms a token), and one
    gap of 300 ms where the engine prefilled others' prompts: the median is 20 ms a token,
    the mean rate is pulled down by the stall."""
    meter = StreamMeter()
    at = 1.0
    meter.observe(b'data: {"choices":[{"text":"a"}]}\n\n', at)
    for gap, tokens in ((0.02, 1), (0.02, 1), (0.3, 1), (0.04, 2), (0.02, 1), (0.04, 2)):
        at += gap
        meter.observe(b'data: {"choices":[{"text":"x"}]}\n\n' * tokens, at)
    assert meter.step_seconds() == pytest.approx(0.02)
    assert meter.rate() == pytest.approx(8 / 0.44)
    short = StreamMeter()
    short.observe(b'data: {"choices":[{"text":"a"}]}\n\n', 1.0)
    short.observe(b'data: {"choices":[{"text":"b"}]}\n\n', 1.1)
    assert short.step_seconds() is None  # too few gaps to say


def test_a_decode_step_leaves_out_gaps_that_held_a_prefill_even_most_of_them() -> None:
    """Short answers on a busy engine: five of nine gaps held another prompt's prefill
    (300 ms), four are decode steps of 20-24 ms. A plain median would say 300 ms."""
    gaps = [0.3, 0.02, 0.3, 0.022, 0.3, 0.024, 0.3, 0.021, 0.3]
    assert decode_step(gaps) == pytest.approx(0.0215)
    assert decode_step([0.02, 0.02]) is None  # too few to say


def test_ewma() -> None:
    e = Ewma(alpha=0.5)
    assert e.update(10.0) == 10.0
    assert e.update(20.0) == 15.0


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"name": "", "url": "http://x", "models": ("m",)}, "name"),
        ({"name": "a", "url": "ftp://x", "models": ("m",)}, "url"),
        ({"name": "a", "url": "http://x", "models": ()}, "models"),
        (
            {"name": "a", "url": "http://x", "models": ("m",), "max_concurrency": 0},
            "max_concurrency",
        ),
    ],
    ids=["name", "url", "models", "cap"],
)
def test_backend_spec_validation(kwargs, match) -> None:
    with pytest.raises(BalancerConfigError, match=match):
        BackendSpec(**kwargs)


@pytest.mark.parametrize(("chunks", "finish"), [
    ([b'data: {"choices":[{"text":"a","finish_reason":null}]}\n\n',
      b'data: {"choices":[{"text":"b","finish_reason":"stop"}]}\n\ndata: [DONE]\n\n'], "stop"),
    ([b'data: {"choices": [{"delta": {}, "finish_reason": "length"}]}\n\n'], "length"),
    ([b'data: {"choices":[{"text":"a","finish_reason":null}]}\n\n'], None),
    ([b'data: {"choices":[{"text":"a","finish_reason":"' + b"x" * 60 + b'"}]}\n\n'], None),
    ([b'data: {"choices":[{"text":"a","finish_reason":"tool_calls"}]}\n\n'], "tool_calls"),
])
def test_the_stream_meter_reads_the_finish_reason(chunks: list[bytes], finish) -> None:
    meter = StreamMeter()
    for i, chunk in enumerate(chunks):
        meter.observe(chunk, float(i))
    assert meter.finish == finish
