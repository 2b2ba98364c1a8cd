# SPDX-License-Identifier: Apache-2.0
"""The running system as a drill sees it: regions, their addresses, GPUs, the DNS server.

Built from the admin API's ``/api/v1/status`` and ``/api/v1/services`` (or by hand in
tests). It maps a DNS answer's address to its region (the evidence a residency check
needs), gives the balancer port for an address, and resolves a cohort's residency into
the set of regions it may be answered and served by.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from fnmatch import fnmatchcase
from typing import Any
from urllib.parse import urlsplit

from drills.errors import DrillError
from drills.model import Residency

DEFAULT_BALANCER_PORT = 8080


@dataclass(frozen=True)
class GpuInfo:
    name: str
    url: str = ""


@dataclass(frozen=True)
class RegionInfo:
    name: str
    jurisdiction: str | None
    endpoints: tuple[str, ...]
    port: int = DEFAULT_BALANCER_PORT
    gpus: tuple[GpuInfo, ...] = ()


@dataclass(frozen=True)
class Topology:
    regions: tuple[RegionInfo, ...]
    dns: tuple[str, int]
    service: str                        # the FQDN the load asks for
    _by_address: Mapping[str, str] = field(default_factory=dict, compare=False, repr=False)

    def __post_init__(self) -> None:
        index: dict[str, str] = {}
        for region in self.regions:
            for endpoint in region.endpoints:
                index[_normal(endpoint)] = region.name
        object.__setattr__(self, "_by_address", index)

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(r.name for r in self.regions)

    def region(self, name: str) -> RegionInfo:
        for r in self.regions:
            if r.name == name:
                return r
        raise KeyError(name)

    def region_of(self, address: str) -> str | None:
        """The region whose endpoints include ``address``; None for an unknown address."""
        return self._by_address.get(_normal(address))

    def port_for(self, address: str) -> int:
        name = self.region_of(address)
        if name is not None:
            return self.region(name).port
        return self.regions[0].port if self.regions else DEFAULT_BALANCER_PORT

    def allowed(self, residency: Residency | None) -> frozenset[str] | None:
        """Regions a cohort may use: None when it has no residency (any region)."""
        if residency is None:
            return None
        allowed = set(residency.regions)
        allowed.update(r.name for r in self.regions if r.jurisdiction in residency.jurisdictions)
        return frozenset(allowed)


def _normal(address: str) -> str:
    try:
        ip = ipaddress.ip_address(address.strip("[]"))
    except ValueError:
        return address
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        return str(ip.ipv4_mapped)
    return str(ip)


def parse_hostport(text: str, default_port: int) -> tuple[str, int]:
    """``127.0.0.1:5353`` / ``[::1]:53`` / ``udp://127.0.0.1:5353`` -> (host, port)."""
    text = text.split("://", 1)[-1]
    if text.startswith("["):
        host, _, rest = text[1:].partition("]")
        port = rest.lstrip(":")
        return host, int(port) if port else default_port
    host, sep, port = text.rpartition(":")
    if not sep or ":" in host:
        return text, default_port
    return host, int(port)


def topology_from_status(status: Mapping[str, Any], services: Mapping[str, Any],
                         service: str) -> Topology:
    """The topology from ``/api/v1/status`` and ``/api/v1/services`` for one service."""
    try:
        regions = []
        for r in status["regions"]:
            url = r.get("balancer") or ""
            port = (urlsplit(url).port if url else None) or DEFAULT_BALANCER_PORT
            gpus = tuple(GpuInfo(g["name"], g.get("url") or "") for g in r.get("gpus") or ())
            regions.append(RegionInfo(r["name"], r.get("jurisdiction"),
                                      tuple(r.get("endpoints") or ()), port, gpus))
        listen = (status.get("dns") or {}).get("listen") or []
    except (KeyError, TypeError) as exc:
        raise DrillError(f"unexpected /api/v1/status answer: missing {exc}") from None
    if not listen:
        raise DrillError("/api/v1/status names no DNS listen address")
    dns = parse_hostport(str(listen[0]), 53)
    return Topology(tuple(regions), dns, service_name(services, service))


def service_name(services: Mapping[str, Any], wanted: str) -> str:
    """The FQDN of a service given as its short name (``chat``) or its FQDN."""
    zone = str(services.get("zone") or "").rstrip(".")
    names: list[str] = []
    for s in services.get("services") or ():
        fqdn = str(s.get("name") or s.get("service") or "").rstrip(".")
        short = str(s.get("service") or "")
        names.append(fqdn)
        if wanted.rstrip(".") in (fqdn, short) or (zone and f"{wanted}.{zone}" == fqdn):
            return fqdn
    raise DrillError(f"service '{wanted}' is not in the running policy "
                     f"(services: {', '.join(names) or 'none'})")


def regions_matching(topology: Topology, patterns: Iterable[str],
                     jurisdictions: Iterable[str] = ()) -> list[str]:
    """Region names matching any fnmatch pattern or jurisdiction (nothing given: all)."""
    patterns, jurisdictions = list(patterns), list(jurisdictions)
    if not patterns and not jurisdictions:
        return list(topology.names)
    return [r.name for r in topology.regions
            if any(fnmatchcase(r.name, p) for p in patterns)
            or (r.jurisdiction is not None and r.jurisdiction in jurisdictions)]
