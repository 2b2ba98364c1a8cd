"""Prometheus metrics of the snapshot refresher (fail-static is visible here)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge


class RefresherMetrics:
    """One metric family per fact; registered on ``registry`` (a fresh one by default)."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry if registry is not None else CollectorRegistry()
        self.reachable = Gauge(
            "director_state_reachable",
            "1 when the last read of the shared state succeeded, else 0",
            registry=self.registry,
        )
        self.stale_regions = Gauge(
            "director_state_stale_regions",
            "Regions whose state is kept past its freshness bound (fail-static)",
            registry=self.registry,
        )
        self.region_stale = Gauge(
            "director_state_region_stale",
            "1 when the region's state is older than the policy's stale-after bound",
            ["region"],
            registry=self.registry,
        )
        self.region_age = Gauge(
            "director_state_region_age_seconds",
            "Age of the oldest record behind the region's state",
            ["region"],
            registry=self.registry,
        )
        self.version = Gauge(
            "director_state_snapshot_version",
            "Version of the snapshot consumers currently read",
            registry=self.registry,
        )
        self.read_errors = Counter(
            "director_state_read_errors",
            "Reads of the shared state that failed (server unreachable or erroring)",
            registry=self.registry,
        )
