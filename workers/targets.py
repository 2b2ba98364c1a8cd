"""What to probe, derived from a policy: GPU servers, regional balancers, latency to regions.

Rules (the policy model has no probe section of its own):

- GPU servers use the health check named ``gpu`` when the policy declares one (scraped at
  its ``metrics`` path, or not at all without one), else ``GET /health`` expecting 200,
  every 2 s, 1 s timeout, metrics at ``/metrics``.
- A region's balancer uses the check its ``healthcheck`` names, else ``GET /healthz``
  expecting 200, every 1 s, 500 ms timeout. Its URL is ``http://{first endpoint}:{port}``
  unless ``balancer_urls`` overrides it (embedded mode and tests run balancers on free ports);
  a region with several endpoints (a balancer on each) has the others as ``alternates``:
  each is probed, its health kept per endpoint (DNS leaves a dead one out of answers), and
  the region's balancer is up while any is.
- Rise/fall come from the failover blocks of the services that serve the region: the smallest
  ``fall`` (fail fast for the most demanding service) and the largest ``rise`` (recover
  only when every service would). The balancer probe runs at the shorter of its check's
  interval and those services' failover intervals. Without a service: fall 3, rise 2.
- Latency to a region is measured at its balancer's address every 5 s (or the balancer
  interval if longer). Timeouts never exceed the interval.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any
from urllib.parse import urlsplit

from policies.model import HealthCheck, Policy, Region
from state.view import balanced_endpoints

DEFAULT_GPU_CHECK = HealthCheck("gpu", "/health", 200, 2.0, 1.0, "/metrics")
DEFAULT_BALANCER_CHECK = HealthCheck("balancer", "/healthz", 200, 1.0, 0.5, None)
DEFAULT_FALL = 3
DEFAULT_RISE = 2


@dataclass(frozen=True)
class GpuTarget:
    region: str
    name: str
    url: str
    engine: str
    health_path: str
    expect: int
    metrics_path: str | None
    interval: float
    timeout: float
    rise: int
    fall: int
    # what the version probe checks (workers.probes.versions): the models it serves, the
    # revision the policy declares of some, and the fingerprint it must report of some
    models: tuple[str, ...] = ()
    revisions: tuple[tuple[str, str], ...] = ()
    fingerprints: tuple[tuple[str, str], ...] = ()
    models_path: str = "/v1/models"

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> GpuTarget:
        fields = dict(data)
        for name in ("revisions", "fingerprints"):  # JSON made the pairs lists
            fields[name] = tuple(tuple(pair) for pair in fields.get(name, ()))
        fields["models"] = tuple(fields.get("models", ()))
        return cls(**fields)


@dataclass(frozen=True)
class BalancerTarget:
    region: str
    url: str
    health_path: str
    expect: int
    interval: float
    timeout: float
    rise: int
    fall: int
    alternates: tuple[str, ...] = ()  # the region's other balancers
    # the policy's endpoint address of ``url`` and of each alternate, in order, when the
    # region has several (state.view.balanced_endpoints): each is probed and its health
    # kept for DNS
    endpoints: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> BalancerTarget:
        fields = dict(data)
        for name in ("alternates", "endpoints"):  # JSON made them lists
            fields[name] = tuple(fields.get(name, ()))
        return cls(**fields)


@dataclass(frozen=True)
class LatencyTarget:
    region: str
    host: str
    port: int
    interval: float
    timeout: float

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> LatencyTarget:
        return cls(**data)


@dataclass(frozen=True)
class ProbeTargets:
    gpus: tuple[GpuTarget, ...]
    balancers: tuple[BalancerTarget, ...]
    latency: tuple[LatencyTarget, ...]


def probe_targets(
    policy: Policy,
    *,
    balancer_port: int = 80,
    balancer_urls: Mapping[str, str] | None = None,
) -> ProbeTargets:
    """Every probe target of ``policy``, in policy order."""
    overrides = balancer_urls or {}
    gpu_check = _named(policy, "gpu") or DEFAULT_GPU_CHECK  # its metrics_path None: no scrape
    gpus: list[GpuTarget] = []
    balancers: list[BalancerTarget] = []
    latency: list[LatencyTarget] = []
    for region in policy.regions:
        rise, fall, failover_interval = _hysteresis(policy, region.name)
        for gpu in region.gpus:
            gpus.append(
                GpuTarget(
                    region=region.name,
                    name=gpu.name,
                    url=gpu.url.rstrip("/"),
                    engine=gpu.engine,
                    health_path=gpu_check.path,
                    expect=gpu_check.expect,
                    metrics_path=gpu_check.metrics_path,
                    interval=gpu_check.interval,
                    timeout=min(gpu_check.timeout, gpu_check.interval),
                    rise=rise,
                    fall=fall,
                    models=gpu.models,
                    revisions=gpu.revisions,
                    fingerprints=gpu.fingerprints,
                )
            )
        endpoint_urls = _endpoint_urls(region, balancer_port)
        url = overrides.get(region.name) or (endpoint_urls[0][1] if endpoint_urls else None)
        if url is None:
            continue
        overridden = region.name in overrides
        check = _named(policy, region.healthcheck) or DEFAULT_BALANCER_CHECK
        interval = min(check.interval, failover_interval or check.interval)
        balancers.append(
            BalancerTarget(
                region=region.name,
                url=url.rstrip("/"),
                health_path=check.path,
                expect=check.expect,
                interval=interval,
                timeout=min(check.timeout, interval),
                rise=rise,
                fall=fall,
                alternates=() if overridden else tuple(u for _, u in endpoint_urls[1:]),
                endpoints=() if overridden else balanced_endpoints(region),
            )
        )
        parts = urlsplit(url)
        latency.append(
            LatencyTarget(
                region=region.name,
                host=parts.hostname or "",
                port=parts.port or (443 if parts.scheme == "https" else 80),
                interval=max(interval, 5.0),
                timeout=min(check.timeout, interval),
            )
        )
    return ProbeTargets(tuple(gpus), tuple(balancers), tuple(latency))


def _named(policy: Policy, name: str | None) -> HealthCheck | None:
    if name is None:
        return None
    return next((c for c in policy.healthchecks if c.name == name), None)


def _hysteresis(policy: Policy, region: str) -> tuple[int, int, float | None]:
    serving = [s for s in policy.services if not s.regions or region in s.regions]
    if not serving:
        return DEFAULT_RISE, DEFAULT_FALL, None
    return (
        max(s.failover.rise for s in serving),
        min(s.failover.fall for s in serving),
        min(s.failover.interval for s in serving),
    )


def _endpoint_urls(region: Region, port: int) -> list[tuple[str, str]]:
    """Each of the region's endpoint addresses with its balancer's URL, in the policy's
    order (its IPv4 endpoints first)."""
    return [*((a, f"http://{a}:{port}") for a in region.endpoints_v4),
            *((a, f"http://[{a}]:{port}") for a in region.endpoints_v6)]
