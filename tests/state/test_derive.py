from __future__ import annotations

from pathlib import Path

import pytest

from director.engine.snapshot import RegionState
from director.refresh.derive import build_snapshot, same_state
from policies import load_policy
from state.keys import KeyKind, Keys, ParsedKey
from state.records import DrainFlags, HealthRecord, LatencySample, RegionLoad
from state.view import StateView, snapshot_keys
from tests.policy_text import fleet_policy as make_policy

HA = Path(__file__).resolve().parents[2] / "policies" / "examples" / "ha.dp"

NOW = 10_000.0
POLICY = make_policy({"eu": ["a", "b"], "us": ["c"]}, stale_after=30.0)


def _h(up: bool | None, age: float = 1.0, fails: int = 0) -> HealthRecord:
    return HealthRecord(up, 0, fails, checked_at=NOW - age, changed_at=NOW - age)


@pytest.mark.parametrize(
    ("balancer", "gpus", "expected"),
    [
        pytest.param(None, {}, RegionState(), id="never-probed"),
        pytest.param(_h(True), {}, RegionState(healthy=True), id="balancer-up"),
        pytest.param(_h(False), {"a": _h(True)}, RegionState(healthy=False), id="balancer-down"),
        pytest.param(
            _h(True), {"a": _h(False)}, RegionState(healthy=True, degraded=True), id="some-gpus"
        ),
        pytest.param(
            _h(True), {"a": _h(False), "b": _h(False)}, RegionState(healthy=False), id="all-gpus"
        ),
        pytest.param(None, {"a": _h(True)}, RegionState(healthy=True), id="gpus-only"),
        pytest.param(_h(True, fails=1), {"a": _h(True)}, RegionState(healthy=True, degraded=True),
                     id="balancer-failing"),
        pytest.param(_h(True), {"a": _h(True, fails=1)}, RegionState(healthy=True),
                     id="a-gpu-failing-is-not-the-region"),
        pytest.param(_h(False, fails=3), {}, RegionState(healthy=False), id="down-not-degraded"),
        pytest.param(_h(None), {"a": _h(None)}, RegionState(), id="unknown-results"),
        pytest.param(
            _h(True, age=31), {}, RegionState(healthy=True, stale=True), id="stale-kept-up"
        ),
        pytest.param(
            _h(False, age=600), {}, RegionState(healthy=False, stale=True), id="stale-kept-down"
        ),
        pytest.param(
            _h(True), {"a": _h(True, age=45)}, RegionState(healthy=True, stale=True), id="old-gpu"
        ),
    ],
)
def test_region_health(balancer, gpus, expected) -> None:
    view = StateView()
    if balancer is not None:
        view.balancer_health["eu"] = balancer
    for name, record in gpus.items():
        view.gpu_health[("eu", name)] = record
    snapshot, _ = build_snapshot(POLICY, view, now=NOW, version=1)
    assert snapshot.region("eu") == expected


def test_load_drain_latency_and_ages() -> None:
    view = StateView(
        region_load={"us": RegionLoad(1, 2, 3.0, 100, 0.9, NOW - 2)},
        drains=DrainFlags(frozenset({"us"})),
        latency={
            ("81.2.69.0/24", "us"): LatencySample("81.2.69.0/24", "us", 80.0, NOW),
            ("81.2.69.0/24", "gone"): LatencySample("81.2.69.0/24", "gone", 1.0, NOW),
        },
    )
    snapshot, ages = build_snapshot(POLICY, view, now=NOW, version=7)
    assert snapshot.version == 7
    assert snapshot.region("us") == RegionState(utilization=0.9, draining=True)
    assert dict(snapshot.latency["81.2.69.0/24"]) == {"us": 80.0}
    assert [(a.region, a.age) for a in ages] == [("eu", None), ("us", 2.0)]


def test_same_state_ignores_version() -> None:
    view = StateView(balancer_health={"eu": _h(True)})
    a, _ = build_snapshot(POLICY, view, now=NOW, version=1)
    b, _ = build_snapshot(POLICY, view, now=NOW, version=2)
    assert same_state(a, b)
    view.balancer_health["eu"] = _h(False)
    c, _ = build_snapshot(POLICY, view, now=NOW, version=3)
    assert not same_state(a, c)


def test_prune_forgets_removed_targets_only() -> None:
    view = StateView(
        balancer_health={"eu": _h(True), "old": _h(True)},
        gpu_health={("eu", "a"): _h(True), ("eu", "removed"): _h(False)},
    )
    view.prune(POLICY)
    assert set(view.balancer_health) == {"eu"}
    assert set(view.gpu_health) == {("eu", "a")}


def test_endpoints_known_down_are_named_and_unknown_ones_are_not() -> None:
    """A region with a balancer on each endpoint: those whose own record says down."""
    policy = load_policy(str(HA))
    view = StateView()
    view.balancer_health["eu-west"] = _h(True)
    view.endpoint_health[("eu-west", "127.0.2.2")] = _h(False, fails=3)
    view.endpoint_health[("us-east", "127.0.1.1")] = _h(True)
    view.endpoint_health[("us-east", "127.0.1.2")] = _h(None)
    snapshot, _ = build_snapshot(policy, view, now=NOW, version=1)
    assert snapshot.region("eu-west").down_endpoints == {"127.0.2.2"}
    assert snapshot.region("us-east").down_endpoints == frozenset()
    keys = Keys("p")
    assert keys.endpoint_health("eu-west", "127.0.2.2") in snapshot_keys(keys, policy)
    assert keys.parse(keys.endpoint_health("r", "2001:db8::1")) == ParsedKey(
        KeyKind.ENDPOINT_HEALTH, "r", address="2001:db8::1")
