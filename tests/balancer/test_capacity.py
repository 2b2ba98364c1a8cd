# SPDX-License-Identifier: Apache-2.0
"""The capacity estimator: what it learns from scrapes and engine limits, and the floor:
it never lets the balancer hold requests for long while a backend has room."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from regions.balancer.capacity import UNBOUNDED, CapacityConfig, CapacityEstimator


def test_unknown_until_something_says_so() -> None:
    estimator = CapacityEstimator()
    capacity = estimator.current(0.0)
    assert (capacity.slots, capacity.source, capacity.limit) == (None, "unknown", UNBOUNDED)
    estimator.observe(1.0, running=12, waiting=0)  # busy, not saturated: says nothing
    assert estimator.current(1.0).limit == UNBOUNDED


def test_waiting_at_the_server_reveals_its_capacity() -> None:
    estimator = CapacityEstimator()
    estimator.observe(1.0, running=32, waiting=5)
    capacity = estimator.current(1.0)
    assert (capacity.slots, capacity.source, capacity.limit) == (32, "observed", 32 + 4)


def test_the_largest_saturated_observation_of_the_window_counts() -> None:
    estimator = CapacityEstimator(config=CapacityConfig(window_s=5.0))
    estimator.observe(1.0, running=30, waiting=2)
    estimator.observe(2.0, running=20, waiting=9)  # long prompts: KV full at 20
    assert estimator.current(2.0).slots == 30
    estimator.observe(8.0, running=21, waiting=1)
    assert estimator.current(8.0).slots == 21  # the 30 is older than the window
    assert estimator.current(100.0).slots == 21  # the newest keeps counting with no load


def test_a_server_running_more_than_the_estimate_makes_it_unknown_again() -> None:
    estimator = CapacityEstimator()
    estimator.observe(1.0, running=20, waiting=3)
    estimator.observe(2.0, running=22, waiting=0)  # the headroom all runs: it had room
    capacity = estimator.current(2.0)
    assert (capacity.slots, capacity.source, capacity.limit) == (None, "unknown", UNBOUNDED)
    estimator.observe(3.0, running=64, waiting=4)
    assert (estimator.current(3.0).slots, estimator.current(3.0).source) == (64, "observed")


def test_engine_limits_and_pins() -> None:
    estimator = CapacityEstimator()
    estimator.engine_limits(max_running=48, max_in_flight=None)
    assert (estimator.current(0).slots, estimator.current(0).source) == (48, "engine")
    estimator.observe(1.0, running=40, waiting=3)  # KV-limited below the slot count
    assert estimator.current(1.0).slots == 40
    tgi = CapacityEstimator()
    tgi.engine_limits(max_running=None, max_in_flight=128)
    assert tgi.current(0).limit == 128 and tgi.current(0).slots is None  # never a 429
    tgi.observe(1.0, running=200, waiting=10)
    assert (tgi.current(1.0).slots, tgi.current(1.0).limit) == (128, 128)
    pinned = CapacityEstimator(pinned=16)
    pinned.observe(1.0, running=64, waiting=3)
    assert (pinned.current(1.0).slots, pinned.current(1.0).limit) == (16, 16)


def test_forget_drops_what_was_learned_but_not_the_pin() -> None:
    estimator = CapacityEstimator()
    estimator.observe(1.0, running=32, waiting=1)
    estimator.forget()
    assert estimator.current(2.0).slots is None
    pinned = CapacityEstimator(pinned=8)
    pinned.forget()
    assert pinned.current(0).slots == 8


@pytest.mark.parametrize("headroom", [0.0, 0.1, 0.5])
def test_headroom(headroom: float) -> None:
    estimator = CapacityEstimator(config=CapacityConfig(headroom_share=headroom))
    estimator.observe(1.0, running=100, waiting=1)
    expected = 100 if headroom == 0 else 100 + max(1, round(headroom * 100))
    assert estimator.current(1.0).limit == expected


# The floor, as a property: a server whose capacity changes as it pleases, a balancer that
# sends it what its demand and the estimator's limit allow, one scrape per step.
@settings(max_examples=300, deadline=None)
@given(capacities=st.lists(st.integers(min_value=1, max_value=400), min_size=1, max_size=12),
       demand=st.integers(min_value=0, max_value=1000),
       steps=st.integers(min_value=1, max_value=25))
def test_holding_while_the_server_has_room_never_survives_a_scrape(
        capacities: list[int], demand: int, steps: int) -> None:
    estimator = CapacityEstimator()
    now = 0.0
    holding_with_room = 0
    for step in range(steps * len(capacities)):
        true = capacities[step // steps]
        limit = estimator.current(now).limit
        in_flight = min(demand, limit)
        running, waiting = min(in_flight, true), max(0, in_flight - true)
        held = demand > in_flight
        if held and running < true:
            holding_with_room += 1
            assert holding_with_room <= 1, "held with room over two scrapes in a row"
        else:
            holding_with_room = 0
        if waiting:  # what is held is never below what the server was just seen running
            assert limit >= running
        estimator.observe(now, running, waiting)
        now += 1.0
    assert estimator.current(now).limit >= 1
