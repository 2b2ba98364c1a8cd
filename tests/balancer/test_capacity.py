# SPDX-License-Identifier: Apache-2.0
"""The capacity estimator: what it learns from scrapes and engine limits, and the floor:
it never lets the balancer hold requests for long while a backend has room. Most tests
hold as a region with tenants does (``HOLD``: ``late_binding``, the mode in which a learned
capacity is a limit, with the provisional limit before it is learned)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from regions.balancer.scheduling.capacity import UNBOUNDED, CapacityConfig, CapacityEstimator

HOLD = CapacityConfig(late_binding=True, provisional=True)


def saturate(estimator: CapacityEstimator, at: float, running: int, waiting: int = 3,
             kv: float | None = None, scrapes: int = 2) -> None:
    """``scrapes`` scrapes a second apart, ending at ``at``, all showing the same state."""
    for i in range(scrapes):
        estimator.observe(at - (scrapes - 1 - i), running, waiting, kv)


def test_unknown_until_something_says_so() -> None:
    estimator = CapacityEstimator(config=HOLD)
    capacity = estimator.current(0.0)
    assert (capacity.slots, capacity.source, capacity.limit) == (None, "unknown", UNBOUNDED)
    estimator.observe(1.0, running=12, waiting=0)  # busy, not saturated: no capacity yet
    capacity = estimator.current(1.0)
    assert (capacity.slots, capacity.source) == (None, "unknown")
    assert (capacity.limit, capacity.provisional) == (15, True)  # 1.25 x the most it ran


@pytest.mark.parametrize("config", [
    CapacityConfig(late_binding=True, provisional=True, provisional_growth=0),
    CapacityConfig(late_binding=True),  # plain late binding, no tenants
    CapacityConfig()], ids=["growth-0", "plain-late-binding", "not-holding"])
def test_no_provisional_limit_when_turned_off_or_not_holding(config: CapacityConfig) -> None:
    estimator = CapacityEstimator(config=config)
    estimator.observe(1.0, running=12, waiting=0)
    capacity = estimator.current(1.0)
    assert (capacity.slots, capacity.limit, capacity.provisional) == (None, UNBOUNDED, False)


def test_the_provisional_limit_grows_with_what_runs_and_doubles_while_all_of_it_runs() -> None:
    estimator = CapacityEstimator(config=HOLD)
    estimator.observe(1.0, running=8, waiting=0)
    assert estimator.current(1.0).limit == 10
    estimator.observe(2.0, running=6, waiting=0)  # below the limit: nothing to learn
    assert estimator.current(2.0).limit == 10
    for second, running, limit in ((3.0, 10, 20), (4.0, 20, 40), (5.0, 40, 80), (6.0, 50, 80)):
        estimator.observe(second, running=running, waiting=0)  # all it was given: doubled
        assert estimator.current(second).limit == limit
    estimator.observe(7.0, running=5, waiting=0)  # never shrinks while unknown
    assert estimator.current(7.0).limit == 80
    estimator.forget()
    assert estimator.current(8.0).limit == UNBOUNDED


def test_requests_waiting_beside_all_it_was_allowed_are_not_saturation() -> None:
    """An engine running all that the provisional limit allows may have room (it doubles),
    whatever waits beside (another balancer's requests): not a slot limit."""
    estimator = CapacityEstimator(config=HOLD)
    estimator.observe(1.0, running=8, waiting=0)
    assert estimator.explores(9) and not estimator.explores(8)  # 9: more than it ran
    for second, running, limit in ((2.0, 10, 20), (3.0, 20, 40), (4.0, 40, 80)):
        estimator.observe(second, running=running, waiting=1)
        capacity = estimator.current(second)
        assert (capacity.slots, capacity.limit) == (None, limit)
    unheld = CapacityEstimator()  # not holding: the old rule, saturated at what it runs
    unheld.observe(1.0, running=8, waiting=0)
    saturate(unheld, 3.0, running=10, waiting=1)
    assert unheld.current(3.0).slots == 10 and not unheld.explores(100)


def test_a_burst_at_the_provisional_limit_reveals_the_capacity() -> None:
    """A flood sent at the provisional limit overfills the engine by the margin, not by the
    flood: the engine keeps requests waiting at its slots, which is saturation."""
    estimator = CapacityEstimator(config=HOLD)
    estimator.observe(1.0, running=30, waiting=0)  # 90% load on 32 slots, a busy moment
    assert estimator.current(1.0).limit == 38
    # the flood: 38 sent, 32 run; the first scrape at 32 may be a count still climbing
    saturate(estimator, 3.0, running=32, waiting=6)
    assert estimator.current(3.0).slots is None
    estimator.observe(3.1, running=32, waiting=6)  # held still: a slot limit
    capacity = estimator.current(3.1)
    assert (capacity.slots, capacity.source, capacity.limit) == (32, "observed", 32)
    assert not estimator.explores(100)  # known now


def test_one_short_of_the_provisional_limit_with_one_waiting_is_not_saturation() -> None:
    """An arrival waiting for the engine's next iteration, or one slot fewer than the
    limit: never learned as a capacity (the engine queues one at most)."""
    estimator = CapacityEstimator(config=HOLD)
    estimator.observe(1.0, running=26, waiting=0)
    assert estimator.current(1.0).limit == 33
    saturate(estimator, 5.0, running=32, waiting=1, scrapes=5)
    capacity = estimator.current(5.0)
    assert (capacity.slots, capacity.limit) == (None, 33)


def test_a_count_still_climbing_is_not_a_slot_limit() -> None:
    """Scraped every 0.1 s while a provisional limit explores, a climbing count shows
    arrivals waiting for the engine's next iteration at each new most: not saturation."""
    estimator = CapacityEstimator(config=HOLD)
    estimator.observe(1.0, running=30, waiting=0)
    assert estimator.current(1.0).limit == 38
    assert estimator.explores(31) and not estimator.explores(30)
    for step, running in enumerate((33, 35, 36, 37)):
        estimator.observe(2.0 + step / 10, running=running, waiting=2)
    assert estimator.current(3.0).slots is None


def test_persistent_waiting_at_its_most_running_reveals_its_capacity() -> None:
    estimator = CapacityEstimator(config=HOLD)
    estimator.observe(1.0, running=32, waiting=5)
    assert estimator.current(1.0).slots is None  # one scrape: maybe an arrival between steps
    estimator.observe(2.0, running=32, waiting=4)
    capacity = estimator.current(2.0)
    assert (capacity.slots, capacity.source, capacity.limit) == (32, "observed", 32)
    assert estimator.current(10.5).limit == 33  # probing: one more, a second in ten


def test_waiting_well_below_the_most_it_ran_is_not_saturation() -> None:
    """A busy server's new arrivals wait for its next iteration: not a slot limit."""
    estimator = CapacityEstimator(config=HOLD)
    estimator.observe(1.0, running=200, waiting=0)
    saturate(estimator, 5.0, running=60, waiting=2, scrapes=3)
    assert estimator.current(5.0).slots is None
    saturate(estimator, 8.0, running=60, waiting=9, kv=0.97)  # unless its KV cache is full
    assert estimator.current(8.0).slots == 60


def test_the_largest_saturated_observation_of_the_window_counts() -> None:
    estimator = CapacityEstimator(
        config=CapacityConfig(late_binding=True, provisional=True, window_s=5.0))
    saturate(estimator, 2.0, running=30)
    saturate(estimator, 3.0, running=28, kv=0.95)  # long prompts: KV full at 28
    assert estimator.current(3.0).slots == 30
    saturate(estimator, 10.0, running=28, kv=0.95)
    assert estimator.current(10.0).slots == 28  # the 30 is older than the window
    assert estimator.current(100.0).slots == 28  # the newest keeps counting with no load


def test_a_server_running_more_than_the_estimate_makes_it_unknown_again() -> None:
    estimator = CapacityEstimator(config=HOLD)
    saturate(estimator, 2.0, running=20)
    estimator.observe(3.0, running=22, waiting=0)  # the headroom all runs: it had room
    capacity = estimator.current(3.0)
    assert (capacity.slots, capacity.source) == (None, "unknown")
    assert capacity.limit == 28  # provisional, 1.25 x the 22 it ran
    saturate(estimator, 5.0, running=64, waiting=4, scrapes=3)  # the first: a climb, maybe
    assert (estimator.current(5.0).slots, estimator.current(5.0).source) == (64, "observed")


def test_engine_limits_and_pins() -> None:
    estimator = CapacityEstimator(config=HOLD)
    estimator.engine_limits(max_running=48, max_in_flight=None)
    assert (estimator.current(0).slots, estimator.current(0).source) == (48, "engine")
    saturate(estimator, 2.0, running=40, kv=0.95)  # KV-limited below the slot count
    assert estimator.current(2.0).slots == 40
    tgi = CapacityEstimator(config=HOLD)
    tgi.engine_limits(max_running=None, max_in_flight=128)
    assert tgi.current(0).limit == 128 and tgi.current(0).slots is None  # never a 429
    saturate(tgi, 2.0, running=200, waiting=10)
    assert (tgi.current(2.0).slots, tgi.current(2.0).limit) == (128, 128)
    pinned = CapacityEstimator(pinned=16, config=HOLD)
    saturate(pinned, 2.0, running=64)
    assert (pinned.current(2.0).slots, pinned.current(2.0).limit) == (16, 16)


def test_forget_drops_what_was_learned_but_not_the_pin() -> None:
    estimator = CapacityEstimator(config=HOLD)
    saturate(estimator, 2.0, running=32)
    estimator.forget()
    assert estimator.current(3.0).slots is None
    pinned = CapacityEstimator(pinned=8, config=HOLD)
    pinned.forget()
    assert pinned.current(0).slots == 8


@pytest.mark.parametrize("headroom", [0.0, 0.1, 0.5])
def test_headroom(headroom: float) -> None:
    estimator = CapacityEstimator(config=CapacityConfig(late_binding=True, provisional=True,
                                                               headroom_share=headroom))
    saturate(estimator, 2.0, running=100, waiting=1)
    expected = 100 if headroom == 0 else 100 + max(1, round(headroom * 100))
    assert estimator.current(2.0).limit == expected


# The floor, as a property: a server whose capacity changes as it pleases, a balancer that
# sends it what its demand and the estimator's limit allow, one scrape per step. Holding
# while the server has room never outlasts one probe period (and the scrapes it takes), then
# the provisional limit's growth: one scrape per step up to what the server runs.
PROBE_EVERY = 10  # scrapes, a second apart: CapacityConfig.probe_every_s


@settings(max_examples=300)
@given(capacities=st.lists(st.integers(min_value=1, max_value=400), min_size=1, max_size=12),
       demand=st.integers(min_value=0, max_value=1000),
       steps=st.integers(min_value=1, max_value=25))
def test_holding_while_the_server_has_room_never_outlasts_a_probe_period_and_a_growth(
        capacities: list[int], demand: int, steps: int) -> None:
    estimator = CapacityEstimator(config=HOLD)
    now = 0.0
    holding_with_room = 0
    growth_steps, allowed = 1, 1
    while allowed < max(capacities):
        allowed *= 2
        growth_steps += 1
    for step in range(steps * len(capacities)):
        true = capacities[step // steps]
        limit = estimator.current(now).limit
        in_flight = min(demand, limit)
        running, waiting = min(in_flight, true), max(0, in_flight - true)
        held = demand > in_flight
        if held and running < true:
            holding_with_room += 1
            assert holding_with_room <= PROBE_EVERY + 1 + growth_steps, \
                "held with room past a probe period and the provisional limit's growth"
        else:
            holding_with_room = 0
        if waiting:  # what is held is never below what the server was just seen running
            assert limit >= running
        estimator.observe(now, running, waiting, kv_usage=None)
        now += 1.0
    assert estimator.current(now).limit >= 1


def test_by_default_a_learned_capacity_holds_nothing_and_a_pin_does() -> None:
    estimator = CapacityEstimator()
    saturate(estimator, 2.0, running=32)
    capacity = estimator.current(2.0)
    assert (capacity.slots, capacity.source, capacity.limit) == (32, "observed", UNBOUNDED)
    estimator.engine_limits(max_running=None, max_in_flight=128)  # TGI: never a 429
    assert estimator.current(2.0).limit == 128
    pinned = CapacityEstimator(pinned=16)
    assert pinned.current(0).limit == 16
