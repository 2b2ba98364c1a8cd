"""Types shared by the decision engine's plugins: the client, explain steps, the decision."""

from __future__ import annotations

import functools
import ipaddress
from dataclasses import dataclass, field

from director.geo import IPAddress, IPNetwork, Location


class ClientSource:
    ECS = "ecs"  # EDNS Client Subnet from the resolver
    RESOLVER = "resolver"  # no ECS: the resolver's own address
    GIVEN = "given"  # an address given directly (explain, HTTP tier)


BUCKET_PREFIX = {4: 24, 6: 56}  # by IP version: the networks whose clients hash alike


@dataclass(frozen=True)
class Client:
    """Who asks: the address that locates them, how we got it, and where it is."""

    address: IPAddress
    network: IPNetwork  # the ECS source network, or the address as a host network
    source: str
    location: Location | None  # None: cannot be located (not in the database, or opted out)

    @functools.cached_property
    def bucket(self) -> IPNetwork:
        """The network whose clients share hashing decisions: /24 for IPv4, /56 for IPv6."""
        prefix = min(BUCKET_PREFIX[self.address.version], self.network.prefixlen)
        kind = ipaddress.IPv4Network if self.address.version == 4 else ipaddress.IPv6Network
        return kind((int(self.address), prefix), strict=False)  # an int: no text round trip


@dataclass(frozen=True)
class Step:
    """One plugin's effect on the candidate list, for explain and metrics."""

    stage: str  # "filter", "score", "spillover", "pick", ...
    plugin: str
    kept: tuple[str, ...]
    dropped: dict[str, str] = field(default_factory=dict)  # region -> reason
    note: str = ""

    def as_dict(self) -> dict[str, object]:
        return {"stage": self.stage, "plugin": self.plugin, "kept": list(self.kept),
                "dropped": dict(self.dropped), "note": self.note}


@dataclass(frozen=True)
class Decision:
    service: str
    regions: tuple[str, ...]  # answered regions, best first; empty: answer nothing
    reason: str  # primary | failover | spillover | all-down | unknown-location | refused
    rules: tuple[str, ...]  # residency rules that applied to the client
    allowed: tuple[str, ...] | None  # the residency-allowed set (None: unrestricted)
    ttl: float
    location_dependent: bool  # False: any client would get the same answer (ECS scope 0)
    scope_prefix: int  # ECS scope the answer is valid for
    steps: tuple[Step, ...]
    # the part of scope_prefix that is not the client's location network (a scorer's
    # network, the hashing bucket): the scope for a client of the same location class
    # in another network is max(that network's prefix, scope_floor) (director.dns.scope)
    scope_floor: int = 0

    def as_dict(self) -> dict[str, object]:
        return {
            "service": self.service, "regions": list(self.regions), "reason": self.reason,
            "rules": list(self.rules),
            "allowed": list(self.allowed) if self.allowed is not None else None,
            "ttl": self.ttl, "location_dependent": self.location_dependent,
            "scope_prefix": self.scope_prefix, "steps": [s.as_dict() for s in self.steps],
        }
