# SPDX-License-Identifier: Apache-2.0
"""Large regions: incremental snapshots and sampled picks stay exact."""

from __future__ import annotations

import random

from hypothesis import given, settings
from hypothesis import strategies as st

from regions.balancer.scheduling.backend import BackendSpec
from regions.balancer.scheduling.backends import BackendPool
from regions.balancer.scheduling.name_positions import NamePositions
from regions.balancer.scheduling.registry import Registry, build_profile, register_builtin_plugins
from regions.balancer.scheduling.scorers.session_affinity import rendezvous_weight
from regions.balancer.types import RegionSnapshot
from tests.balancer.helpers import MODEL, req, snap


def pool(n: int, models=lambda i: (MODEL,)) -> BackendPool:
    return BackendPool([BackendSpec(f"b{i}", f"http://127.0.0.1:{1000 + i}", models(i), 4)
                        for i in range(n)])


OPS = st.lists(st.tuples(st.sampled_from(["lease", "release", "rate", "drain", "fail"]),
                         st.integers(0, 7), st.floats(1.0, 500.0)), max_size=80)


@settings(max_examples=80)
@given(ops=OPS)
def test_incremental_snapshot_equals_a_full_rebuild(ops) -> None:
    p = pool(8)
    leases = []
    for op, i, x in ops:
        if op == "lease":
            leases.append(p.lease(i, x))
        elif op == "release" and leases:
            leases.pop(i % len(leases)).release()
        elif op == "rate":
            p.record_rate(p.backends[i], x)
        elif op == "drain":
            p.set_draining(f"b{i}", x > 250)
        elif op == "fail":
            p.record_failure(p.backends[i])
        incremental = p.snapshot().backends
        p.invalidate()
        assert p.snapshot().backends == incremental


def profile(sample: int):
    return build_profile(register_builtin_plugins(Registry()), rng=random.Random(3),
                         sample=sample)


def test_a_sampled_pick_considers_a_bounded_subset_and_says_so() -> None:
    region = RegionSnapshot(tuple(snap(f"b{i}", i) for i in range(200)), 1)
    decision = profile(16).run(region, req(), explain=True)
    first = decision.steps[0]
    assert first["stage"] == "sample" and first["of"] == 200
    assert 8 <= len(first["kept"]) <= 16  # drawn with replacement
    assert decision.chosen is not None and decision.chosen.name in first["kept"]
    assert decision.steps[1]["kept"] == first["kept"]  # the model filter saw only the sample


def test_sampling_falls_back_to_every_backend_when_the_sample_cannot_serve() -> None:
    # one backend of 500 serves the model, one has a free slot: always found
    backends = [snap(f"b{i}", i, models=frozenset({"other"})) for i in range(500)]
    backends[317] = snap("b317", 317)
    region = RegionSnapshot(tuple(backends), 1)
    p = profile(16)
    assert {p.run(region, req()).chosen.name for _ in range(20)} == {"b317"}
    full = [snap(f"b{i}", i, in_flight=4) for i in range(500)]
    full[42] = snap("b42", 42, in_flight=3)
    assert profile(16).run(RegionSnapshot(tuple(full), 1), req()).chosen.name == "b42"


def test_small_regions_are_never_sampled() -> None:
    region = RegionSnapshot(tuple(snap(f"b{i}", i) for i in range(16)), 1)
    assert profile(16).run(region, req(), explain=True).steps[0]["stage"] == "filter"


def affinity_profile(scorer: str):
    """Affinity first, then the default scorers' tie-breaking, sampling 8 of a large region."""
    return build_profile(register_builtin_plugins(Registry()), rng=random.Random(5), sample=8,
                         scorers=((scorer, 10.0), ("outstanding-work", 1.0)))


def test_prefix_affinity_finds_its_backend_in_a_sampled_region() -> None:
    region = RegionSnapshot(tuple(snap(f"b{i}", i) for i in range(300)), 1)
    p = affinity_profile("prefix-affinity")
    request = req(prefix=(11, 22, 33, 44))
    scorer = p.scorers[0].scorer
    scorer.on_bind(request, region.backends[137])
    # without the held backend in the sample, 8 draws of 300 would find it ~3% of the time
    assert {p.run(region, request).chosen.name for _ in range(40)} == {"b137"}


def test_session_affinity_keeps_a_session_on_one_backend_in_a_sampled_region() -> None:
    region = RegionSnapshot(tuple(snap(f"b{i}", i) for i in range(300)), 1)
    p = affinity_profile("session-affinity")
    owner = max(region.backends, key=lambda b: rendezvous_weight("alice", b.name)).name
    assert {p.run(region, req(session="alice")).chosen.name for _ in range(40)} == {owner}
    # the owner full: its sessions spill to their next choice, again one backend
    backends = list(region.backends)
    at = next(b.index for b in backends if b.name == owner)
    backends[at] = snap(owner, at, in_flight=4)
    spilled = RegionSnapshot(tuple(backends), 2)
    picks = {p.run(spilled, req(session="alice")).chosen.name for _ in range(40)}
    assert len(picks) == 1 and picks != {owner}


def test_name_positions_follow_the_region_and_skip_names_not_in_it() -> None:
    positions = NamePositions()
    first = [snap(f"b{i}", i) for i in range(5)]
    assert positions.of(first, ["b3", "gone", "b0"]) == [3, 0]
    generation = positions.generation
    assert positions.of(first, ["gone"]) == [] and positions.generation == generation
    # same length, other membership (a new list, as the pool builds one): found again
    second = [snap(f"b{i}", i) for i in (0, 1, 2, 7, 4)]
    assert positions.of(second, ["b7", "b3"]) == [3]
    assert positions.generation == generation + 1


def test_a_session_finds_a_new_top_backend_that_replaced_another_of_the_same_count() -> None:
    """300 backends; one the session did not prefer is replaced by a new name that outranks
    all of them for the session: the very next pick goes to it (same region size, so only
    the names tell the layout changed)."""
    p = affinity_profile("session-affinity")
    session = "alice"
    names = [f"b{i}" for i in range(300)]
    ranked = sorted(names, key=lambda n: rendezvous_weight(session, n), reverse=True)
    newcomer = next(f"n{i}" for i in range(10_000)
                    if rendezvous_weight(session, f"n{i}") > rendezvous_weight(session, ranked[0]))
    region = RegionSnapshot(tuple(snap(n, i) for i, n in enumerate(names)), 1)
    assert p.run(region, req(session=session)).chosen.name == ranked[0]
    replaced = names.index(ranked[-1])  # the session's last choice: not in its memo
    names[replaced] = newcomer
    region = RegionSnapshot(tuple(snap(n, i) for i, n in enumerate(names)), 2)
    assert p.run(region, req(session=session)).chosen.name == newcomer


def test_name_positions_notice_a_same_length_list_with_other_names() -> None:
    positions = NamePositions()
    first = [snap(f"b{i}", i) for i in range(5)]
    positions.sync(first)
    generation = positions.generation
    positions.sync(list(first))  # another list, the same names: nothing to rebuild
    assert positions.generation == generation
    positions.sync([snap(f"b{i}", i) for i in (0, 1, 2, 7, 4)])
    assert positions.generation == generation + 1
