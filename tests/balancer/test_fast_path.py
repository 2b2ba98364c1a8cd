# SPDX-License-Identifier: Apache-2.0
"""The lean per-request path decides exactly as the plain algorithm: filters one backend at a
time through ``check``, totals summed from zero, over randomized snapshots and requests; and
the pool's views are what their keyword constructor would build."""

from __future__ import annotations

import random
from collections.abc import Sequence

import pytest

from regions.balancer.scheduling.backend import BackendSpec, ScrapedLoad
from regions.balancer.scheduling.backends import BackendPool
from regions.balancer.scheduling.capacity import GUESS_SLOTS, UNBOUNDED, CapacityConfig
from regions.balancer.scheduling.filters.capacity import CapacityFilter
from regions.balancer.scheduling.filters.health import HealthFilter
from regions.balancer.scheduling.filters.model import ModelFilter
from regions.balancer.scheduling.filters.not_tried import NotTriedFilter
from regions.balancer.scheduling.pipeline import Profile
from regions.balancer.scheduling.registry import (
    DEFAULT_SCORERS,
    Registry,
    build_profile,
    register_builtin_plugins,
)
from regions.balancer.scheduling.scorers.prefix_affinity import PrefixAffinityScorer
from regions.balancer.scheduling.scorers.queue_depth import QueueDepthScorer
from regions.balancer.scheduling.scorers.session_affinity import (
    PREFERRED,
    SessionAffinityScorer,
    rendezvous_weight,
)
from regions.balancer.types import BackendSnapshot, RegionSnapshot, RequestInfo
from routing.combine import weighted_totals
from tests.balancer.helpers import req, snap

MODELS = ("m1", "m2", "m3")

PROFILES = {
    "default": {},
    "completion-time": {"scorers": (("completion-time", 2.0), ("queue-depth", 1.0))},
    "affinity-weighted-random": {
        "scorers": (("prefix-affinity", 2.0), ("session-affinity", 1.0), ("queue-depth", 1.0)),
        "picker": "weighted-random",
    },
    "latency-scraped-power-of-two": {
        "scorers": (("latency-ewma", 1.0), ("scraped-load", 0.5)),
        "picker": "power-of-two",
    },
    "round-robin": {"filters": ("model", "health", "not-tried"), "scorers": (),
                    "picker": "round-robin"},
    "one-scorer": {"scorers": (("outstanding-work", 1.0),)},
}


def random_view(rng: random.Random, i: int) -> BackendSnapshot:
    """A backend view with every field drawn, often at the edges the filters test."""
    cap = rng.randint(1, 5)
    ttft = rng.choice([None, rng.uniform(0.01, 2.0)])
    return snap(
        f"b{i}",
        i,
        models=frozenset(rng.sample(MODELS[:2], rng.randint(1, 2))),
        healthy=rng.random() > 0.15,
        ejected=rng.random() < 0.1,
        draining=rng.random() < 0.1,
        in_flight=rng.randint(0, cap + 1),
        cap=cap,
        prefetch=rng.randint(0, 1),
        work_tokens=rng.choice([0.0, rng.uniform(0.0, 800.0)]),
        tokens_per_s=rng.uniform(10.0, 120.0),
        ttft_ewma_s=ttft,
        ttft_samples=0 if ttft is None else rng.randint(1, 20),
        waiting=rng.choice([None, float(rng.randint(0, 8))]),
        kv_usage=rng.choice([None, rng.random()]),
    )


def random_request(rng: random.Random, n: int) -> RequestInfo:
    prompt = rng.randint(1, 4000)
    output = float(rng.randint(1, 800))
    return req(
        model=rng.choice(MODELS[:2] * 5 + MODELS[2:]),
        prompt_tokens=prompt,
        max_tokens=rng.choice([None, int(output), 1000]),
        output_tokens=output,
        cost_tokens=prompt / 150.0 + output,
        exclude=frozenset(f"b{rng.randrange(n)}" for _ in range(rng.choice([0, 0, 1, 3]))),
        session=rng.choice([None, "alice", "bob", "carol"]),
        prefix=tuple(range(rng.choice([0, 1, 4]))),
    )


def reference_run(profile: Profile, snapshot: RegionSnapshot, request: RequestInfo) -> tuple:
    """``Profile.run`` as first written: the same sampling, then each filter over each
    candidate through ``check``, the weighted totals summed from 0.0, the picker."""

    def run_on(candidates: Sequence[BackendSnapshot]) -> tuple:
        for flt in profile.filters:
            candidates = [b for b in candidates if flt.check(request, b) is None]
            if not candidates:
                return None, flt.name
        totals = [0.0] * len(candidates)
        for ws in profile.scorers:
            for i, v in enumerate(ws.scorer.score(request, candidates)):
                totals[i] += ws.weight * v
        return candidates[profile.picker.pick(candidates, totals)], None

    backends = snapshot.backends
    if profile.sample and len(backends) > profile.sample:
        n, rnd = len(backends), profile.rng.random
        picked = {int(rnd() * n) for _ in range(profile.sample)}
        for ws in profile.scorers:  # the affinity scorers' backends join the sample
            picked.update(reference_preferred(ws.scorer, backends, request))
        sampled = [backends[i] for i in picked]
        chosen, stopped_at = run_on(sampled)
        if chosen is not None:
            return chosen, stopped_at
    return run_on(backends)


def reference_preferred(scorer: object, backends: Sequence[BackendSnapshot],
                        request: RequestInfo) -> list[int]:
    """What an affinity scorer favours, by definition: the backends holding some of the
    prefix, or the session's ``PREFERRED`` highest rendezvous weights over every backend."""
    names = [b.name for b in backends]
    if isinstance(scorer, PrefixAffinityScorer) and request.prefix:
        held = scorer.index.match(request.prefix)  # names of other snapshots are left out
        return [names.index(name) for name in held if name in names]
    if isinstance(scorer, SessionAffinityScorer) and request.session:
        ranked = sorted(names, key=lambda name: rendezvous_weight(request.session, name),
                        reverse=True)
        return [names.index(name) for name in ranked[:PREFERRED]]
    return []


def paired_profiles(name: str, seed: int, sample: int) -> tuple[Profile, Profile]:
    """Two profiles alike down to their plugins' state and random streams."""
    registry = register_builtin_plugins(Registry())
    options = {"scorers": DEFAULT_SCORERS, **PROFILES[name]}

    def build() -> Profile:
        return build_profile(registry, rng=random.Random(seed), sample=sample, **options)

    return build(), build()


def bind_hooks(profile: Profile, request: RequestInfo, chosen: BackendSnapshot) -> None:
    """What the dispatcher does after a bind: the scorers that learn from binds learn."""
    for ws in profile.scorers:
        hook = getattr(ws.scorer, "on_bind", None)
        if hook is not None:
            hook(request, chosen)


@pytest.mark.parametrize("name", sorted(PROFILES))
@pytest.mark.parametrize("seed", range(6))
def test_the_lean_run_picks_what_the_plain_algorithm_picks(name: str, seed: int) -> None:
    rng = random.Random(seed)
    fast, plain = paired_profiles(name, seed, sample=rng.choice([0, 4, 8]))
    for step in range(120):
        n = rng.choice([1, 2, 6, 12, 40])
        snapshot = RegionSnapshot(tuple(random_view(rng, i) for i in range(n)), step)
        request = random_request(rng, n)
        for a, b in zip(fast.scorers, plain.scorers, strict=True):  # size-aware learns sizes
            if hasattr(a.scorer, "refine"):
                refined = a.scorer.refine(request)
                assert b.scorer.refine(request) == refined
                request = refined
        decision = fast.run(snapshot, request)
        chosen, stopped_at = reference_run(plain, snapshot, request)
        assert (decision.chosen, decision.stopped_at) == (chosen, stopped_at), step
        if chosen is not None:
            bind_hooks(fast, request, chosen)
            bind_hooks(plain, request, chosen)


@pytest.mark.parametrize("scorers", range(6))
def test_weighted_totals_are_the_running_total_from_zero(scorers: int) -> None:
    """One pass over several scorers adds the same floats as ``total += weight * value``."""
    rng = random.Random(scorers)
    for _ in range(300):
        n = rng.randint(0, 12)
        scored = [([rng.choice([0.0, 1.0, 0.5, rng.random()]) for _ in range(n)],
                   rng.choice([1.0, 2.0, 8.0, 0.5, rng.uniform(0.1, 10.0)]))
                  for _ in range(scorers)]
        expected = [0.0] * n
        for values, weight in scored:
            for i, v in enumerate(values):
                expected[i] += weight * v
        assert weighted_totals(scored, n) == expected


FILTERS = [ModelFilter(), HealthFilter(), NotTriedFilter(), CapacityFilter()]


@pytest.mark.parametrize("flt", FILTERS, ids=[f.name for f in FILTERS])
def test_keep_is_check_over_many(flt) -> None:
    rng = random.Random(flt.name)
    for _ in range(300):
        n = rng.randint(0, 12)
        candidates = [random_view(rng, i) for i in range(n)]
        request = random_request(rng, max(n, 1))
        expected = [b for b in candidates if flt.check(request, b) is None]
        assert list(flt.keep(request, candidates)) == expected


def test_queue_depth_is_the_clamped_formula() -> None:
    rng = random.Random(7)
    candidates = [snap(f"b{i}", i, in_flight=rng.randint(-1, 9), cap=rng.randint(-1, 6))
                  for i in range(400)]
    expected = [min(1.0, max(0.0, 1.0 - b.in_flight / max(b.cap, 1))) for b in candidates]
    assert QueueDepthScorer().score(req(), candidates) == expected


@pytest.mark.parametrize("late_binding", [False, True])
def test_pool_views_are_what_the_keyword_constructor_builds(late_binding: bool) -> None:
    rng = random.Random(11)
    specs = [BackendSpec(f"b{i}", f"http://127.0.0.1:{9000 + i}", ("m1", "m2")[: i % 2 + 1],
                         rng.choice([None, rng.randint(1, 8)])) for i in range(12)]
    pool = BackendPool(specs, capacity=CapacityConfig(late_binding=late_binding))
    leases = []
    for _ in range(400):
        b = pool.backends[rng.randrange(len(specs))]
        op = rng.randrange(6)
        if op == 0:
            leases.append(pool.lease(b.index, rng.uniform(1.0, 300.0)))
        elif op == 1 and leases:
            leases.pop(rng.randrange(len(leases))).release()
        elif op == 2:
            pool.record_rate(b, rng.uniform(10.0, 100.0))
        elif op == 3:  # a sample shows from the view's next rebuild (its lease's release)
            pool.record_ttft(b, rng.uniform(0.01, 0.3))
            pool.invalidate(b.index)
        elif op == 4:  # running and waiting counts: capacity observations too
            pool.set_scraped(b.name, ScrapedLoad(float(rng.randint(0, 3)),
                                                 float(rng.randint(0, 12)), rng.random()))
        else:
            pool.set_draining(b.name, rng.random() < 0.5)
        for b, view in zip(pool.backends, pool.snapshot().backends, strict=True):
            prior = pool.prior_tokens_per_s()
            known = b.cap_now.slots is not None
            cap = b.cap_now.slots if known else max(
                [o.cap_now.slots for o in pool.backends if o.cap_now.slots is not None],
                default=GUESS_SLOTS)
            unsure = late_binding and any(
                o.cap_now.slots is None and not o.cap_now.provisional
                for o in pool.backends if o.healthy)
            pinned = b.cap_now.source == "pinned"
            limit = UNBOUNDED if unsure and not pinned else b.cap_now.limit
            assert view == BackendSnapshot(
                index=b.index,
                name=b.name,
                models=b.models,
                healthy=b.healthy,
                ejected=False,
                draining=b.draining,
                in_flight=b.in_flight,
                cap=cap,
                work_tokens=b.work_tokens,
                tokens_per_s=b.rate.value if b.rate.value is not None else prior,
                rate_learned=b.rate.value is not None,
                prefetch=limit - cap,
                ttft_ewma_s=b.ttft.value,
                ttft_samples=b.ttft.samples,
                waiting=b.scraped.waiting,
                running=b.scraped.running,
                kv_usage=b.scraped.kv_usage,
                prefill_tokens=b.prefill_tokens,
                cap_known=known,
            )
