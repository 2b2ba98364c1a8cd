"""Several balancers of one region: each writes its record, readers add them up (against a
real server: the stores, the refresher's view; the rules: state.region_load)."""

from __future__ import annotations

import json
import time

import pytest

from state.errors import RecordError
from state.records import RegionLoad
from state.region_load import (
    SPREAD_S,
    SourcedLoad,
    combined,
    combined_from_hash,
    parse_records,
    pool_digest,
    stale_sources,
)
from state.store import StateStore

NOW = 1_000_000.0


def load(in_flight: float, capacity: float, utilization: float, at: float = NOW,
         queue: float = 0.0, outstanding: float = 0.0) -> RegionLoad:
    return RegionLoad(queue, in_flight, outstanding, capacity, utilization, at)


def test_balancers_of_one_pool_add_their_load_and_share_its_capacity() -> None:
    pool = pool_digest(["gpu-a", "gpu-b"])
    total = combined([SourcedLoad("b1", load(3, 16.0, 0.25, queue=1, outstanding=2.0), pool),
                      SourcedLoad("b2", load(5, 16.0, 0.5, NOW - 1, outstanding=1.5), pool)])
    assert total == RegionLoad(1, 8, 3.5, 16.0, 0.75, NOW)


def test_balancers_of_different_pools_add_their_capacities() -> None:
    total = combined([SourcedLoad("b1", load(3, 10.0, 0.5), "p1"),
                      SourcedLoad("b2", load(1, 30.0, 0.1), "p2")])
    assert total is not None
    assert total.capacity == 40.0
    assert total.utilization == pytest.approx((0.5 * 10 + 0.1 * 30) / 40)
    without = combined([SourcedLoad("b1", load(3, 0.0, 0.5), "p1"),
                        SourcedLoad("b2", load(1, 0.0, 0.1), "p2")])
    assert without is not None and without.utilization == pytest.approx(0.3)


def test_a_balancer_that_stopped_writing_stops_counting() -> None:
    total = combined([SourcedLoad("alive", load(2, 8.0, 0.2)),
                      SourcedLoad("dead", load(50, 8.0, 0.9, NOW - SPREAD_S - 1))])
    assert total == load(2, 8.0, 0.2)


def test_the_pool_digest_ignores_order() -> None:
    assert pool_digest(["b", "a"]) == pool_digest(["a", "b"]) != pool_digest(["a"])


def test_malformed_records_are_left_out_and_only_malformed_is_an_error() -> None:
    good = dict([SourcedLoad("b1", load(1, 8.0, 0.1)).to_field()])
    shapes = ["nope", "[]", json.dumps({"in_flight": "x"}),
              json.dumps({**json.loads(good["b1"]), "utilization": float("nan")}),
              json.dumps({**json.loads(good["b1"]), "pool": 3}),
              json.dumps({**json.loads(good["b1"]), "capacity": True})]
    for shape in shapes:
        assert [r.source for r in parse_records({**good, "bad": shape})] == ["b1"]
        with pytest.raises(RecordError, match="bad"):
            parse_records({"bad": shape})


def test_the_one_record_layout_still_reads() -> None:
    """A hash written before records had sources (an older balancer during an upgrade)."""
    old = load(4, 8.0, 0.5, NOW - 1)
    raw = {**old.to_fields(), **dict([SourcedLoad("new", load(2, 8.0, 0.25)).to_field()])}
    assert combined_from_hash(raw) == load(6, 8.0, 0.75)
    assert combined_from_hash({k.encode(): v.encode() for k, v in old.to_fields().items()}
                              ) == old


def test_records_not_renewed_are_named_for_removal() -> None:
    raw = dict([SourcedLoad("fresh", load(1, 8.0, 0.1, NOW - 10)).to_field(),
                SourcedLoad("gone", load(1, 8.0, 0.1, NOW - 400)).to_field(),
                ("broken", "{")])
    assert sorted(stale_sources(raw, NOW)) == ["broken", "gone"]
    legacy = load(1, 8.0, 0.1, NOW - 400).to_fields()
    assert sorted(stale_sources(legacy, NOW)) == sorted(RegionLoad.FIELDS)
    assert stale_sources(load(1, 8.0, 0.1, NOW - 10).to_fields(), NOW) == []


def test_two_writers_through_a_real_server(store: StateStore) -> None:
    """The stores write one record each; the region's load is their sum, not the last."""
    now = time.time()
    store.write_region_load("eu", load(3, 16.0, 0.25, now), source="b1", pool="p")
    store.write_region_load("eu", load(5, 16.0, 0.5, now), source="b2", pool="p")
    assert store.region_load("eu") == load(8, 16.0, 0.75, now)
    store.write_region_load("eu", load(1, 16.0, 0.125, now), source="b1", pool="p")
    assert store.region_load("eu") == load(6, 16.0, 0.625, now)
