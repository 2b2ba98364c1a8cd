"""Policies for the worker tests, built from the policy model directly (no parser needed)."""

from __future__ import annotations

from policies.model import (
    Affinity,
    AllDown,
    AllDownKind,
    Capacity,
    Failover,
    GpuServer,
    HealthCheck,
    NoEcs,
    Policy,
    Region,
    Service,
    Soa,
    UnknownKind,
    UnknownLocation,
    Zone,
)


def region(name: str, gpus: dict[str, str], *, index: int = 1, engine: str = "vllm") -> Region:
    """A region with the given GPU server names -> URLs, its balancer on 127.0.<index>.1."""
    return Region(
        name=name,
        latitude=0.0,
        longitude=0.0,
        jurisdiction="US",
        endpoints_v4=(f"127.0.{index}.1",),
        endpoints_v6=(),
        capacity=Capacity(rps=100.0),
        weight=1.0,
        gpus=tuple(
            GpuServer(gpu, url, ("llama",), "H100", None, engine) for gpu, url in gpus.items()
        ),
        healthcheck="balancer",
    )


def make_policy(
    regions: tuple[Region, ...],
    *,
    gpu_interval: float = 2.0,
    balancer_interval: float = 1.0,
    failover: Failover | None = None,
    stale_after: float = 30.0,
) -> Policy:
    checks = (
        HealthCheck("gpu", "/health", 200, gpu_interval, min(1.0, gpu_interval), "/metrics"),
        HealthCheck("balancer", "/healthz", 200, balancer_interval, balancer_interval / 2, None),
    )
    service = Service(
        name="chat.infer.example.com",
        regions=(),
        steer=("geo",),
        priority=(),
        ttl=30.0,
        degraded_ttl=5.0,
        answers=1,
        spillover=None,
        failover=failover or Failover(fall=3, rise=2, interval=1.0, timeout=0.5),
        residency=(),
        all_down=AllDown(AllDownKind.ANSWER_NOTHING),
        unknown_location=UnknownLocation(UnknownKind.ANY),
        no_ecs=NoEcs.RESOLVER,
        affinity=Affinity.NONE,
        healthcheck=None,
    )
    zone = Zone(
        apex="infer.example.com",
        ttl=30.0,
        soa=Soa("ns1.infer.example.com", "hostmaster.infer.example.com", 1, 3600, 600, 86400, 60),
        nameservers=(),
        admin_networks=(),
    )
    return Policy(zone, (), checks, regions, (service,), stale_after)
