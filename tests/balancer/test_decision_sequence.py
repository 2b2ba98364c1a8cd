# SPDX-License-Identifier: Apache-2.0
"""The decisions of ``bench/proxy_overhead.py``'s timed loop (``Dispatcher.try_bind``, the
default profile as it was when they were recorded, a lease released and one taken before
each pick) are pinned: a faster decision path must choose the same backends for the same
inputs and seeds. The digests were recorded with
the code before the decision-speed work (commit 64f6131); the two ``varied`` digests with cap
16 again when the ``size-aware`` scorer gained its first-token rule (an intended change of
decisions: re-record them only for one). ``varied`` also refines requests
of mixed sizes through the dispatcher and runs the bind hooks, so that the ``size-aware``
scorer learns, scores and holds; with a cap of 5 the region is mostly full (capacity stops,
holds, samples that fall back to every backend)."""

from __future__ import annotations

import hashlib
import random

import pytest

from regions.balancer.scheduling.admission import Dispatcher
from regions.balancer.scheduling.backend import BackendSpec
from regions.balancer.scheduling.backends import BackendPool
from regions.balancer.scheduling.registry import Registry, build_profile, register_builtin_plugins
from regions.balancer.types import Endpoint, RequestInfo

MODEL = "sim-model"
RECORDED_SCORERS = (("size-aware", 8.0), ("outstanding-work", 2.0), ("queue-depth", 1.0))


def decisions(backends: int, rounds: int, varied: bool, cap: int = 16) -> list[str]:
    specs = [BackendSpec(f"gpu{i}", f"http://127.0.0.1:{10000 + i}", (MODEL,), cap)
             for i in range(backends)]
    pool = BackendPool(specs)
    rng = random.Random(1)
    for b in pool:
        pool.record_rate(b, rng.uniform(20, 120))
    # the profile as it was the default when the digests were recorded, so that holds and
    # every scorer's fast path are still exercised (the default profile has neither the
    # size-aware hold nor outstanding-work since the routing matrix)
    profile = build_profile(register_builtin_plugins(Registry()), rng=random.Random(0),
                            scorers=RECORDED_SCORERS,
                            scorer_params={"size-aware": {"hold": 1.0}})
    dispatcher = Dispatcher(pool, profile)
    if varied:  # as the balancer wires them: size-aware learns the backends' rates
        dispatcher.on_bind.extend(ws.scorer.on_bind for ws in profile.scorers
                                  if hasattr(ws.scorer, "on_bind"))
    held = [pool.lease(rng.randrange(backends), rng.uniform(50, 500)) for _ in range(backends * 8)]
    request = RequestInfo(Endpoint.COMPLETIONS, MODEL, 1000, 1000, 211.0, 217.7, True)
    out = []
    for i in range(rounds):
        held[i % len(held)].release()
        held[i % len(held)] = pool.lease(rng.randrange(backends), 200.0)
        if varied:
            cap = rng.choice([64, 256, 1000, 4000])
            output = float(rng.randint(1, cap))
            prompt = rng.randint(1, 4000)
            request = dispatcher.refine(RequestInfo(
                Endpoint.COMPLETIONS, MODEL, prompt, cap, output, prompt / 150 + output, True))
        lease, decision = dispatcher.try_bind(request, waited_s=rng.choice([0.0, 5.0]))
        out.append(f"{decision.chosen.index if decision.chosen else None} {decision.stopped_at} "
                   f"{lease is not None}")
        if lease is not None:
            lease.release()
    return out


@pytest.mark.parametrize(
    ("backends", "cap", "varied", "digest"),
    [
        (6, 16, False, "57b01960defc5c7b"),
        (1000, 16, False, "104c4a575218b093"),
        (6, 16, True, "98315ab07f345011"),
        (1000, 16, True, "2b62e0f23b428151"),
        (6, 5, True, "97f29957891a39df"),  # half find every backend full, 3% held
        (1000, 5, True, "a4e8ac9ba4df1da9"),  # samples often full (the fallback), 3% held
    ],
    ids=["6-bench", "1000-bench", "6-varied", "1000-varied", "6-full", "1000-full"],
)
def test_the_bench_loop_decides_as_before(backends: int, cap: int, varied: bool,
                                          digest: str) -> None:
    got = decisions(backends, 2000, varied, cap)
    assert hashlib.sha256("\n".join(got).encode()).hexdigest()[:16] == digest
