"""Small policies for the shared-state tests, built from the policy model directly."""

from __future__ import annotations

from policies.model import (
    Affinity,
    AllDown,
    AllDownKind,
    Capacity,
    Failover,
    GpuServer,
    NoEcs,
    Policy,
    Region,
    Service,
    Soa,
    UnknownKind,
    UnknownLocation,
    Zone,
)


def make_policy(regions: dict[str, list[str]], *, stale_after: float = 30.0) -> Policy:
    """A policy with the given regions -> GPU server names, one service over all of them."""
    built = tuple(
        Region(
            name=name,
            latitude=0.0,
            longitude=0.0,
            jurisdiction="US",
            endpoints_v4=(f"127.0.{i + 1}.1",),
            endpoints_v6=(),
            capacity=Capacity(rps=100.0),
            weight=1.0,
            gpus=tuple(
                GpuServer(g, f"http://127.0.{i + 1}.{j + 11}:8000", ("m",), None, None, "vllm")
                for j, g in enumerate(gpus)
            ),
            healthcheck=None,
        )
        for i, (name, gpus) in enumerate(regions.items())
    )
    service = Service(
        name="chat.infer.example.com",
        regions=tuple(regions),
        steer=("geo",),
        priority=(),
        ttl=30.0,
        degraded_ttl=5.0,
        answers=1,
        spillover=None,
        failover=Failover(fall=2, rise=2, interval=1.0, timeout=0.5),
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
    return Policy(zone, (), (), built, (service,), stale_after)
