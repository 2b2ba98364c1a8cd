# SPDX-License-Identifier: Apache-2.0
"""The regional plugins in the routing core's registry (``routing.Registry``), and the
profile built from their names.

``register_builtin_plugins(registry)`` fills it explicitly at start-up (no import-time
side effects) and freezes it. Each plugin is one ``PluginSpec`` line: its kind, factory,
declared parameters and the roles it fills beyond its kind (nominator, refiner, hold
policy, bind observer; ``waitable`` for the filter whose drops mean "wait"), so admission
and the balancer read the roles from the profile instead of inspecting plugins.
``build_profile`` turns names (as a policy file would spell them) into a ``Profile``.

Built-in names: filters ``model``, ``health``, ``not-tried``, ``capacity``; scorers
``outstanding-work``, ``queue-depth``, ``least-requests`` (the default profile's, with
``prefix-affinity`` at weight 2), ``completion-time``; pickers ``max-score``,
``power-of-two``, ``round-robin``.
Scorer ``latency-ewma``: lowest time to first token (EWMA), unmeasured backends neutral.
Scorer ``scraped-load``: freest KV cache and shortest queue the servers' metrics report.
Scorers ``prefix-affinity`` (KV cache reuse), ``session-affinity`` (rendezvous, bounded
load); picker ``weighted-random`` (probability proportional to the total score).
Scorer ``size-aware``: long requests to the fast GPUs, holds for them (opt-in; weight it
above the others' sum). Scorer ``expected-finish``: soonest predicted end, with
speeds learned per concurrency.
"""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence

from regions.balancer.errors import BalancerConfigError
from regions.balancer.scheduling.filters.capacity import CapacityFilter
from regions.balancer.scheduling.filters.health import HealthFilter
from regions.balancer.scheduling.filters.model import ModelFilter
from regions.balancer.scheduling.filters.not_tried import NotTriedFilter
from regions.balancer.scheduling.filters.revision import RevisionFilter
from regions.balancer.scheduling.pickers.max_score import MaxScorePicker
from regions.balancer.scheduling.pickers.power_of_two import PowerOfTwoPicker
from regions.balancer.scheduling.pickers.round_robin import RoundRobinPicker
from regions.balancer.scheduling.pickers.weighted_random import WeightedRandomPicker
from regions.balancer.scheduling.pipeline import Profile
from regions.balancer.scheduling.scorers import (
    expected_finish,
    latency_ewma,
    prefix_affinity,
    scraped_load,
    session_affinity,
    size_aware,
)
from regions.balancer.scheduling.scorers.completion_time import CompletionTimeScorer
from regions.balancer.scheduling.scorers.least_requests import LeastRequestsScorer
from regions.balancer.scheduling.scorers.outstanding_work import OutstandingWorkScorer
from regions.balancer.scheduling.scorers.queue_depth import QueueDepthScorer
from routing import Kind, PluginSpec, PluginTimings, Registry, RegistryError, Role, WeightedScorer
from routing import Profile as CoreProfile

DEFAULT_FILTERS = ("model", "revision", "health", "not-tried", "capacity")
# prefix-affinity scores nothing where no backend holds the prompt's first block, so without
# shared prefixes the default orders exactly as least-requests alone
DEFAULT_SCORERS = (("least-requests", 1.0), ("prefix-affinity", 2.0))
DEFAULT_PICKER = "max-score"
DEFAULT_SAMPLE = 8

FILTER, SCORER, PICKER = Kind.FILTER, Kind.SCORER, Kind.PICKER
NOMINATOR, REFINER, HOLD, BIND = Role.NOMINATOR, Role.REFINER, Role.HOLD_POLICY, Role.BIND_OBSERVER

BUILTIN = (
    PluginSpec(FILTER, "model", ModelFilter),
    PluginSpec(FILTER, "revision", RevisionFilter),
    PluginSpec(FILTER, "health", HealthFilter),
    PluginSpec(FILTER, "not-tried", NotTriedFilter),
    PluginSpec(FILTER, "capacity", CapacityFilter, roles=frozenset({Role.WAITABLE})),
    PluginSpec(SCORER, "outstanding-work", OutstandingWorkScorer),
    PluginSpec(SCORER, "queue-depth", QueueDepthScorer),
    PluginSpec(SCORER, "least-requests", LeastRequestsScorer),
    PluginSpec(SCORER, "completion-time", CompletionTimeScorer),
    PluginSpec(SCORER, "latency-ewma", latency_ewma.LatencyEwmaScorer, latency_ewma.PARAMS),
    PluginSpec(SCORER, "scraped-load", scraped_load.ScrapedLoadScorer, scraped_load.PARAMS),
    PluginSpec(SCORER, "prefix-affinity", prefix_affinity.PrefixAffinityScorer,
               prefix_affinity.PARAMS, frozenset({NOMINATOR, BIND})),
    PluginSpec(SCORER, "session-affinity", session_affinity.SessionAffinityScorer,
               session_affinity.PARAMS, frozenset({NOMINATOR})),
    PluginSpec(SCORER, "size-aware", size_aware.SizeAwareScorer, size_aware.PARAMS,
               frozenset({REFINER, HOLD, BIND})),
    PluginSpec(SCORER, "expected-finish", expected_finish.ExpectedFinishScorer,
               expected_finish.PARAMS, frozenset({HOLD})),
    PluginSpec(PICKER, "max-score", MaxScorePicker),
    PluginSpec(PICKER, "power-of-two", PowerOfTwoPicker),
    PluginSpec(PICKER, "round-robin", RoundRobinPicker),
    PluginSpec(PICKER, "weighted-random", WeightedRandomPicker),
)


def register_builtin_plugins(registry: Registry) -> Registry:
    """Register every built-in plugin and freeze the registry; returns it."""
    for spec in BUILTIN:
        registry.register(spec)
    registry.freeze()
    return registry


def build_profile(
    registry: Registry,
    *,
    name: str = "default",
    filters: Sequence[str] = DEFAULT_FILTERS,
    scorers: Sequence[tuple[str, float]] = DEFAULT_SCORERS,
    picker: str = DEFAULT_PICKER,
    rng: random.Random | None = None,
    sample: int = DEFAULT_SAMPLE,
    scorer_params: Mapping[str, Mapping[str, float]] | None = None,
    timings: PluginTimings | None = None,
) -> Profile:
    """A ``Profile`` from plugin names; the picker and the sampling share the injected
    ``rng``; ``sample``: see ``routing.profile`` (0: always every backend);
    ``scorer_params``: parameters per scorer name (e.g. ``{"size-aware": {"hold": 0.5}}``),
    checked against each scorer's declaration and clamped; ``timings``: where the profile
    records its plugins' run times."""
    rng = rng or random.Random(0)
    params = dict(scorer_params or {})
    unused = sorted(set(params) - {s for s, _ in scorers})
    if unused:
        raise BalancerConfigError(f"profile: parameters for scorers not in it: {unused}")
    try:
        built_filters = [registry.create(FILTER, f) for f in filters]
        built_scorers = [(registry.create(SCORER, s, params.get(s, {})), float(w))
                         for s, w in scorers]
        built_picker = registry.create(PICKER, picker, rng=rng)
    except RegistryError as exc:
        raise BalancerConfigError(f"profile: {exc}") from None
    core = CoreProfile(
        name=name,
        filters=tuple(b.plugin for b in built_filters),
        scorers=tuple(WeightedScorer(b.plugin, w) for b, w in built_scorers),
        picker=built_picker.plugin,
        nominators=tuple(b.plugin for b, _ in built_scorers if b.has(NOMINATOR)),
        sample=sample,
        rng=rng,
        timings=timings,
    )
    scorer_plugins = [b for b, _ in built_scorers]
    return Profile(
        core,
        refiners=tuple(b.plugin for b in scorer_plugins if b.has(REFINER)),
        hold_policies=tuple(b.plugin for b in scorer_plugins if b.has(HOLD)),
        bind_observers=tuple(b.plugin for b in scorer_plugins if b.has(BIND)),
        waits_at=frozenset(b.spec.name for b in built_filters if b.has(Role.WAITABLE)),
        notes=tuple(note for b in (*built_filters, *scorer_plugins) for note in b.notes),
    )
