# SPDX-License-Identifier: Apache-2.0
"""A real system for load-generator tests, all on loopback: the GeoDNS server over the
example policy (snapshot settable), and one real balancer per region in front of simulated
GPU servers, each balancer on its region's endpoint address (127.0.N.1) on a free port."""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator, Sequence
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass

from director.dns.app import DnsApp
from director.dns.server import ServerConfig, ServerThread
from director.dns.snapshot_source import StaticSnapshotSource
from director.engine.snapshot import RegionState
from director.geo import GeoLocator
from drills.topology import GpuInfo, RegionInfo, Topology
from policies.model import Policy
from regions.balancer import BackendSpec, Balancer, BalancerConfig, build_balancer
from regions.balancer.tenancy.residency_check import LOOPBACK_EDGE, ResidencyCheck
from regions.simulator import Fleet, ServerSpec

MODEL = "llama-3.1-8b-instruct"
SERVICE = "chat.infer.example.com"


@dataclass
class Stack:
    topology: Topology
    snapshots: StaticSnapshotSource
    balancers: dict[str, Balancer]
    fleets: dict[str, Fleet]

    def set_down(self, *regions: str) -> None:
        """Mark regions unhealthy in the DNS server's snapshot (as the probes would)."""
        self.snapshots.update({r.name: RegionState(healthy=r.name not in regions)
                               for r in self.topology.regions})


@asynccontextmanager
async def running_stack(policy: Policy, geo: GeoLocator,
                        regions: Sequence[str] = ("us-east", "eu-west", "eu-central"),
                        gpus_per_region: int = 2, time_scale: float = 10.0,
                        residency: bool = True, cap: int = 16,
                        config: BalancerConfig | None = None,
                        balancer_policy: Policy | None = None) -> AsyncIterator[Stack]:
    """``balancer_policy``: the policy the balancers re-check residency with (default: the
    DNS server's)."""
    snapshots = StaticSnapshotSource()
    snapshots.update({name: RegionState(healthy=True) for name in policy.region_names})
    app = DnsApp(policy, geo, snapshots)

    def locate(address):
        return geo.locate(address).place

    async with AsyncExitStack() as stack:
        dns = stack.enter_context(ServerThread(app, ServerConfig(listen=(("127.0.0.1", 0),))))
        infos, balancers, fleets = [], {}, {}
        for name in regions:
            spec = policy.region(name)
            host = spec.endpoints_v4[0]
            servers = [ServerSpec(f"{name}-gpu{i}", host, 0, (MODEL,))
                       for i in range(gpus_per_region)]
            fleet = await stack.enter_async_context(Fleet(servers, time_scale=time_scale))
            backends = [BackendSpec(s.spec.name, s.url, (MODEL,), cap) for s in fleet]
            # the drill client is the edge: it names its clients in X-Director-Client-IP
            check = ResidencyCheck(balancer_policy or policy, name, locate,
                                   LOOPBACK_EDGE) if residency else None
            balancer = build_balancer(
                name,
                backends,
                dataclasses.replace(config or BalancerConfig(), listen=(host, 0),
                                    jurisdiction=spec.jurisdiction, residency=check),
            )
            await stack.enter_async_context(balancer)
            balancers[name], fleets[name] = balancer, fleet
            infos.append(RegionInfo(name, spec.jurisdiction, tuple(spec.endpoints_v4),
                                    balancer.port,
                                    tuple(GpuInfo(s.spec.name, s.url) for s in fleet)))
        topology = Topology(tuple(infos), dns.addresses[0], SERVICE)
        yield Stack(topology, snapshots, balancers, fleets)
