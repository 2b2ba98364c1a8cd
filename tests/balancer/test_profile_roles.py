# SPDX-License-Identifier: Apache-2.0
"""The regional extension points come from what each plugin declares in the registry
(nominator, refiner, hold policy, bind observer, waitable filter), parameters are clamped
at load and said so, and the balancer exports its plugins' run times."""

from __future__ import annotations

import random

from regions.balancer import BalancerConfig
from regions.balancer.scheduling.registry import Registry, build_profile, register_builtin_plugins
from regions.balancer.scheduling.scorers.prefix_affinity import PrefixAffinityScorer
from regions.balancer.scheduling.scorers.session_affinity import SessionAffinityScorer
from regions.balancer.scheduling.scorers.size_aware import SizeAwareScorer
from tests.balancer.helpers import admin_client, completion, stack, stream_completion


def build(scorers: tuple[tuple[str, float], ...], **kwargs: object):
    return build_profile(register_builtin_plugins(Registry()), rng=random.Random(0),
                         scorers=scorers, **kwargs)  # type: ignore[arg-type]


def test_each_extension_point_holds_the_plugins_that_declare_it() -> None:
    profile = build((("prefix-affinity", 1.0), ("session-affinity", 1.0), ("size-aware", 8.0),
                     ("expected-finish", 1.0), ("least-requests", 1.0)))
    assert [type(n) for n in profile.core.nominators] == [PrefixAffinityScorer,
                                                          SessionAffinityScorer]
    assert [type(r) for r in profile.refiners] == [SizeAwareScorer]
    assert [type(h).__name__ for h in profile.hold_policies] == ["SizeAwareScorer",
                                                                 "ExpectedFinishScorer"]
    assert [type(o) for o in profile.bind_observers] == [PrefixAffinityScorer, SizeAwareScorer]
    assert profile.waits_at == {"capacity"}
    plain = build((("least-requests", 1.0),))
    assert not (plain.core.nominators or plain.refiners or plain.hold_policies
                or plain.bind_observers)
    assert build((("least-requests", 1.0),), filters=("model", "health")).waits_at == set()


def test_parameters_are_clamped_at_load_and_the_clamp_is_said() -> None:
    profile = build((("size-aware", 8.0), ("least-requests", 1.0)),
                    scorer_params={"size-aware": {"hold": 50.0, "lead": 2.0}})
    size_aware = profile.refiners[0]
    assert isinstance(size_aware, SizeAwareScorer)
    assert (size_aware.hold, size_aware.lead) == (10.0, 2.0)
    assert profile.notes == ("hold 50 clamped to 10",)


async def test_the_balancer_exports_its_plugins_run_times() -> None:
    config = BalancerConfig(scorers=(("queue-depth", 1.0), ("least-requests", 1.0)))
    async with stack((1.0, 1.0), config=config) as (_, balancer, client):
        for _ in range(20):
            status, _, _ = await stream_completion(client, completion(2))
            assert status == 200
        async with admin_client(balancer) as adm, adm.get("/metrics") as resp:
            text = await resp.text()
    # one decision in 16 is timed: 20 requests time two
    for stage, plugin in [("filter", "model"), ("filter", "capacity"),
                          ("scorer", "queue-depth"), ("picker", "max-score")]:
        line = f'director_balancer_plugin_seconds_count{{plugin="{plugin}",stage="{stage}"}} 2.0'
        assert line in text.splitlines(), (stage, plugin)
