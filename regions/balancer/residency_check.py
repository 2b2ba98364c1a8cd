"""Residency re-check at HTTP level: defence in depth behind the DNS tier.

DNS location is best effort (a resolver far from its client, truncated or absent ECS), so
each balancer checks the client itself before proxying. The client is the TCP peer, or,
when the peer is one of the operator's trusted edge networks, the address in
``X-Director-Client-IP`` (or the country in ``X-Director-Client-Country``). The service is
the request's Host; a request for an unknown host is checked against every service, so it
is served only where every service would serve it. A client of unknown location may be any
rule's client and is served only by regions every rule allows (``unknown-location``).
"""

from __future__ import annotations

import ipaddress
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

from policies.model import Policy, Service
from policies.residency import allowed_for, rules_for
from regions.balancer.request_info import host_name

# address -> (country, continent), (None, None) when the address cannot be located
Locate = Callable[[ipaddress.IPv4Address | ipaddress.IPv6Address], tuple[str | None, str | None]]

CLIENT_IP_HEADER = "X-Director-Client-IP"
CLIENT_COUNTRY_HEADER = "X-Director-Client-Country"
DEFAULT_TRUSTED = ("127.0.0.0/8", "::1/128")


@dataclass(frozen=True)
class Verdict:
    allowed: bool
    client: str  # how the client was identified, e.g. "89.160.20.112 (SE/EU, header)"
    service: str
    rules: tuple[str, ...]
    allowed_regions: tuple[str, ...] | None

    def message(self, region: str) -> str:
        rules = ", ".join(self.rules) or "unknown-location"
        allowed = ", ".join(self.allowed_regions or ()) or "none"
        return (f"client {self.client} falls under residency {rules} of {self.service}, "
                f"which allows {allowed}; this is region {region}")


class ResidencyCheck:
    """Decides whether this region may serve a request's client."""

    def __init__(self, policy: Policy, region: str, locate: Locate,
                 trusted_networks: Iterable[str] = DEFAULT_TRUSTED):
        self.policy = policy
        self.region = region
        self.locate = locate
        self.trusted = tuple(ipaddress.ip_network(n) for n in trusted_networks)
        self.services = {s.name: s for s in policy.services if region in s.regions}

    def check(self, peer: str | None, host: str | None, headers: Mapping[str, str]) -> Verdict:
        country, continent, client = self._client(peer, headers)
        name = host_name(host)
        services = [self.services[name]] if name in self.services else self.services.values()
        located = country is not None or continent is not None
        for service in services:
            verdict = self._check_service(service, country, continent, located, client)
            if not verdict.allowed:
                return verdict
        return Verdict(True, client, name, (), None)

    def _check_service(self, service: Service, country: str | None, continent: str | None,
                       located: bool, client: str) -> Verdict:
        rules = rules_for(self.policy, service, country, continent) if located else ()
        allowed = allowed_for(service, rules, located)
        ok = allowed is None or self.region in allowed
        return Verdict(ok, client, service.name, tuple(r.name for r in rules), allowed)

    def _client(self, peer: str | None,
                headers: Mapping[str, str]) -> tuple[str | None, str | None, str]:
        address = _address(peer)
        trusted = address is not None and any(
            address.version == n.version and address in n for n in self.trusted)
        if trusted and headers.get(CLIENT_COUNTRY_HEADER):
            told = headers[CLIENT_COUNTRY_HEADER].strip().upper()
            return told, None, f"country {told} (header)"
        if trusted and headers.get(CLIENT_IP_HEADER):
            forwarded = _address(headers[CLIENT_IP_HEADER].strip())
            if forwarded is not None:
                address = forwarded
        if address is None:
            return None, None, "unknown address"
        country, continent = self.locate(address)
        where = f"{country}/{continent}" if country or continent else "not located"
        return country, continent, f"{address} ({where})"


def _address(text: str | None):
    if not text:
        return None
    try:
        return ipaddress.ip_address(text)
    except ValueError:
        return None
