"""Rollouts as Prometheus metrics: each rollout's candidate share and status, read at
scrape time from the last list the controller loop read."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence

from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from director.rollouts.controller import Rollout

STATUSES = ("running", "paused", "completed", "rolled-back", "aborted")


class RolloutCollector(Collector):
    """``director_rollout_candidate_percent`` and ``director_rollout_status`` (1 for the
    rollout's status, 0 for the others), labelled by rollout, model and revisions."""

    def __init__(self, rollouts: Callable[[], Sequence[Rollout]]) -> None:
        self.rollouts = rollouts

    def collect(self) -> Iterator[Metric]:
        labels = ["rollout", "model", "baseline", "candidate"]
        percent = GaugeMetricFamily("director_rollout_candidate_percent",
                                    "The candidate revision's share of its model's traffic",
                                    labels=labels)
        status = GaugeMetricFamily("director_rollout_status",
                                   "1 for the rollout's status", labels=[*labels, "status"])
        for rollout in self.rollouts():
            spec = rollout.spec
            names = [rollout.id, spec.model, spec.baseline, spec.candidate]
            percent.add_metric(names, rollout.percent)
            for name in STATUSES:
                status.add_metric([*names, name], 1.0 if rollout.status == name else 0.0)
        yield percent
        yield status
