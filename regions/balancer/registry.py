# SPDX-License-Identifier: Apache-2.0
"""The plugin registry: plugin factories by kind and name, filled once, then frozen.

``register_builtin_plugins(registry)`` fills it explicitly at start-up (no import-time
side effects); ``freeze()`` forbids later writes. ``build_profile`` turns names (as a
policy file would spell them) into a ``Profile``.

Built-in names: filters ``model``, ``health``, ``not-tried``, ``capacity``; scorers
``outstanding-work``, ``queue-depth``, ``least-requests`` (the default profile's only
scorer), ``completion-time``; pickers ``max-score``, ``power-of-two``, ``round-robin``.
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
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Literal

from regions.balancer.errors import BalancerConfigError
from regions.balancer.filters.capacity import CapacityFilter
from regions.balancer.filters.health import HealthFilter
from regions.balancer.filters.model import ModelFilter
from regions.balancer.filters.not_tried import NotTriedFilter
from regions.balancer.pickers.max_score import MaxScorePicker
from regions.balancer.pickers.power_of_two import PowerOfTwoPicker
from regions.balancer.pickers.round_robin import RoundRobinPicker
from regions.balancer.pickers.weighted_random import WeightedRandomPicker
from regions.balancer.pipeline import Profile, WeightedScorer
from regions.balancer.scorers.completion_time import CompletionTimeScorer
from regions.balancer.scorers.expected_finish import ExpectedFinishScorer
from regions.balancer.scorers.latency_ewma import LatencyEwmaScorer
from regions.balancer.scorers.least_requests import LeastRequestsScorer
from regions.balancer.scorers.outstanding_work import OutstandingWorkScorer
from regions.balancer.scorers.prefix_affinity import PrefixAffinityScorer
from regions.balancer.scorers.queue_depth import QueueDepthScorer
from regions.balancer.scorers.scraped_load import ScrapedLoadScorer
from regions.balancer.scorers.session_affinity import SessionAffinityScorer
from regions.balancer.scorers.size_aware import SizeAwareScorer

Kind = Literal["filter", "scorer", "picker"]
Factory = Callable[..., Any]

DEFAULT_FILTERS = ("model", "health", "not-tried", "capacity")
DEFAULT_SCORERS = (("least-requests", 1.0),)
DEFAULT_PICKER = "max-score"
DEFAULT_SAMPLE = 8


class Registry:
    """Factories by ``(kind, name)``; read-only once frozen."""

    def __init__(self) -> None:
        self._factories: dict[tuple[str, str], Factory] = {}
        self._frozen = False

    def register(self, kind: Kind, name: str, factory: Factory) -> None:
        if self._frozen:
            raise BalancerConfigError(f"registry: frozen; cannot register {kind} {name!r}")
        if (kind, name) in self._factories:
            raise BalancerConfigError(f"registry: {kind} {name!r} is already registered")
        self._factories[(kind, name)] = factory

    def freeze(self) -> None:
        self._frozen = True

    def create(self, kind: Kind, name: str, **params: Any) -> Any:
        try:
            factory = self._factories[(kind, name)]
        except KeyError:
            known = ", ".join(sorted(n for k, n in self._factories if k == kind))
            raise BalancerConfigError(
                f"profile: unknown {kind} {name!r} (known: {known})"
            ) from None
        try:
            return factory(**params)
        except (TypeError, ValueError) as exc:  # an unknown parameter, a value out of range
            raise BalancerConfigError(f"profile: {kind} {name!r}: {exc}") from None

    def names(self, kind: Kind) -> list[str]:
        return sorted(n for k, n in self._factories if k == kind)


def register_builtin_plugins(registry: Registry) -> Registry:
    """Register every built-in plugin and freeze the registry; returns it."""
    registry.register("filter", "model", ModelFilter)
    registry.register("filter", "health", HealthFilter)
    registry.register("filter", "not-tried", NotTriedFilter)
    registry.register("filter", "capacity", CapacityFilter)
    registry.register("scorer", "outstanding-work", OutstandingWorkScorer)
    registry.register("scorer", "queue-depth", QueueDepthScorer)
    registry.register("scorer", "least-requests", LeastRequestsScorer)
    registry.register("scorer", "completion-time", CompletionTimeScorer)
    registry.register("scorer", "latency-ewma", LatencyEwmaScorer)
    registry.register("scorer", "scraped-load", ScrapedLoadScorer)
    registry.register("scorer", "prefix-affinity", PrefixAffinityScorer)
    registry.register("scorer", "session-affinity", SessionAffinityScorer)
    registry.register("scorer", "size-aware", SizeAwareScorer)
    registry.register("scorer", "expected-finish", ExpectedFinishScorer)
    registry.register("picker", "max-score", MaxScorePicker)
    registry.register("picker", "power-of-two", PowerOfTwoPicker)
    registry.register("picker", "round-robin", RoundRobinPicker)
    registry.register("picker", "weighted-random", WeightedRandomPicker)
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
) -> Profile:
    """A ``Profile`` from plugin names; the picker and the sampling share the injected
    ``rng``; ``sample``: see ``pipeline`` (0: always every backend); ``scorer_params``:
    keyword arguments per scorer name (e.g. ``{"size-aware": {"hold": 0.5}}``)."""
    rng = rng or random.Random(0)
    params = dict(scorer_params or {})
    unused = sorted(set(params) - {s for s, _ in scorers})
    if unused:
        raise BalancerConfigError(f"profile: parameters for scorers not in it: {unused}")
    return Profile(
        name=name,
        filters=tuple(registry.create("filter", f) for f in filters),
        scorers=tuple(
            WeightedScorer(registry.create("scorer", s, **params.get(s, {})), float(w))
            for s, w in scorers
        ),
        picker=registry.create("picker", picker, rng=rng),
        sample=sample,
        rng=rng,
    )
