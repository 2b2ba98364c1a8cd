"""Residency re-check at HTTP level: defence in depth behind the DNS tier.

DNS location is best effort (a resolver far from its client, truncated or absent ECS), so
each balancer checks the client itself before proxying, with the matcher the DNS engine
uses (``policies.matching.coverage``).

**Who the client is.** The TCP peer, or, when the peer is in one of the networks the
operator names as trusted edges (none by default: ``--trusted-network``, repeatable), what
the edge says in ``X-Director-Client-IP`` (an address, located with GeoIP) and
``X-Director-Client-Country`` (an ISO 3166-1 alpha-2 code; a two-character code nobody
knows, such as an edge's ``XX`` or ``T1``, places the client nowhere). From any other peer
both headers are ignored: the client is where its own address is. Given both,
the client may be at either place. A header given twice, or a value that is neither, is
refused with 400 (``ClientHeaderError``): an edge must overwrite both headers, never pass a
client's own copies through (``docs/security.md``).

**Which rules.** Residency follows the GPUs, not the Host header: a request is checked
against every service this region serves for the requested model (a service without a
``models`` list serves them all), and must be allowed by each, so naming a laxer service
reaches no GPU a stricter one forbids. A region that serves no service for the model
refuses every request for it. A client of unknown location may be any rule's client and is
served only where every rule allows (``unknown-location``); a client a rule may hold (a
continent-only location) is treated as its service's ``partial-location`` says.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

from aiohttp import web

from policies.matching import NOWHERE, Place, is_country, place, refusal, serving
from policies.model import Policy, Service
from regions.balancer.http.exchange import CheckedClient, Exchange, Next
from regions.balancer.http.refusals import error_response
from regions.balancer.http.request_info import host_name

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
Locate = Callable[[IPAddress], Place]  # where GeoIP places an address

CLIENT_IP_HEADER = "X-Director-Client-IP"
CLIENT_COUNTRY_HEADER = "X-Director-Client-Country"
# the machine itself as the edge: what ``director up`` trusts, where every client is local
LOOPBACK_EDGE = ("127.0.0.0/8", "::1/128")


class ClientHeaderError(ValueError):
    """A trusted edge sent a client-identity header twice, or one that says nothing valid."""


@dataclass(frozen=True)
class Verdict:
    allowed: bool
    client: str  # how the client was identified, e.g. "89.160.20.112 (SE, header)"
    service: str  # the service whose rule decided ("" when none serves the model)
    rules: tuple[str, ...]
    allowed_regions: tuple[str, ...] | None
    by_address: bool = False  # the request named no service: its Host is an address
    served: tuple[str, ...] = ()  # the service names the region serves for the model

    def message(self, region: str) -> str:
        if not self.service:
            return (f"region {region} serves no service for this model, so it serves no "
                    "client for it")
        rules = ", ".join(self.rules) or "unknown-location"
        allowed = ", ".join(self.allowed_regions or ()) or "none"
        text = (f"client {self.client} falls under residency {rules} of {self.service}, "
                f"which allows {allowed}; this is region {region}")
        if self.by_address and self.served:
            text += (f". This request was addressed to the balancer by IP: address the "
                     f"service by its name ({', '.join(self.served)}) so that DNS sends it "
                     "to a region this client may use")
        return text


class ResidencyCheck:
    """Decides whether this region may serve a request's client."""

    def __init__(self, policy: Policy, region: str, locate: Locate,
                 trusted_networks: Iterable[str] = ()):
        self.policy = policy
        self.region = region
        self.locate = locate
        self.trusted = tuple(ipaddress.ip_network(n) for n in trusted_networks)
        self.services = tuple(s for s in policy.services if region in s.regions)

    def serving(self, model: str | None) -> tuple[Service, ...]:
        """The services whose clients this region's GPUs serve ``model`` for (None: any)."""
        return serving(self.policy, self.region, model)

    def check(self, peer: str | None, host: str | None, headers: Mapping[str, str],
              model: str | None = None) -> Verdict:
        """The verdict for a request; raises ``ClientHeaderError`` for a bad edge header."""
        where, client = self.client(peer, headers)
        return self.verdict(where, client, host, model)

    def verdict(self, where: Place, client: str, host: str | None,
                model: str | None = None) -> Verdict:
        """The verdict for a client at ``where`` (described as ``client``)."""
        name = host_name(host)
        by_address = _is_address(host or "")
        names = tuple(s.name for s in self.serving(model))
        refused = refusal(self.policy, self.region, where, model)
        if refused is None:
            return Verdict(True, client, name, (), None, by_address, names)
        service, held = refused
        if service is None or held is None:
            return Verdict(False, client, "", (), (), by_address)
        rules = tuple(r.name for r in held.rules) if held.located else ()
        return Verdict(False, client, service.name, rules, held.allowed, by_address, names)

    def trusts(self, peer: str | None) -> bool:
        """Whether ``peer`` is one of the trusted edges, whose headers count."""
        address = _address(peer)
        return address is not None and any(
            address.version == n.version and address in n for n in self.trusted)

    def client(self, peer: str | None, headers: Mapping[str, str]) -> tuple[Place, str]:
        """Where the client may be, and how it was identified."""
        if self.trusts(peer):
            told = edge_place(headers, self.locate)
            if told is not None:
                return told
        address = _address(peer)
        if address is None:
            return NOWHERE, "unknown address"
        where = self.locate(address)
        return where, f"{address} ({where.describe()})"


def edge_place(headers: Mapping[str, str], locate: Locate) -> tuple[Place, str] | None:
    """Where a trusted edge's headers place the client (None: the edge sent neither);
    raises ``ClientHeaderError`` for a header given twice or with a value it cannot mean."""
    country = _single(headers, CLIENT_COUNTRY_HEADER)
    forwarded = _single(headers, CLIENT_IP_HEADER)
    if country is None and forwarded is None:
        return None
    places: list[Place] = []
    said: list[str] = []
    if country is not None:
        code = country.strip().upper()
        if len(code) != 2 or not code.isascii() or not code.isalnum():
            raise ClientHeaderError(
                f"{CLIENT_COUNTRY_HEADER}: {country!r} is not a country code (an ISO 3166-1 "
                "alpha-2 code such as DE, or XX for unknown)")
        places.append(place(code))
        said.append(f"country {code}" + ("" if is_country(code) else " (unknown code)"))
    if forwarded is not None:
        address = _address(forwarded.strip())
        if address is None:
            raise ClientHeaderError(f"{CLIENT_IP_HEADER}: {forwarded!r} is not one IP address")
        where = locate(address)
        places.append(where)
        said.append(f"{address} ({where.describe()})")
    if any(not p.known for p in places):
        where = NOWHERE  # one of them places the client nowhere: it could be anywhere
    else:
        where = places[0] if len(places) == 1 else places[0] | places[1]
    return where, ", ".join(said) + " (header)"


def _single(headers: Mapping[str, str], name: str) -> str | None:
    """The one value of header ``name`` (None: absent); two values are refused."""
    getall = getattr(headers, "getall", None)
    values = list(getall(name, ())) if getall is not None else (
        [headers[name]] if name in headers else [])
    if len(values) > 1:
        raise ClientHeaderError(f"{name} given {len(values)} times: an edge must send it "
                                "once, overwriting any copy the client sent")
    return values[0] if values else None


def _address(text: str | None) -> IPAddress | None:
    if not text:
        return None
    try:
        return ipaddress.ip_address(text)
    except ValueError:
        return None


def _is_address(host: str) -> bool:
    """Whether a Host header names an address (``127.0.2.1:8080``, ``[::1]:8080``)."""
    if host.startswith("["):
        return _address(host[1:].split("]", 1)[0]) is not None
    return _address(host.rsplit(":", 1)[0] if host.count(":") == 1 else host) is not None


class CheckResidency:
    """Stage: 451 when this region may not serve the request's client for its model (400
    for a bad edge header); else the placed client goes in the exchange (overflow checks
    the siblings by it) and the request on. ``refused`` counts refusals by service;
    ``check`` is replaced when the policy changes."""

    def __init__(self, check: ResidencyCheck | None, region: str,
                 refused: Callable[[str], None],
                 base_of: Callable[[str], str | None] = lambda model: None) -> None:
        """``base_of(model)``: the model a LoRA adapter adapts (None: not an adapter). A
        request for an adapter is judged as one for its base model, and also as one for
        the adapter when a service names the adapter itself: naming an adapter reaches no
        GPU the base model's rules forbid."""
        self.check = check
        self.region = region
        self.refused = refused
        self.base_of = base_of

    async def __call__(self, exchange: Exchange, call_next: Next) -> web.StreamResponse:
        check = self.check  # None: no policy to check by (tests, a bare balancer)
        if check is None:
            return await call_next(exchange)
        request = exchange.request
        model = exchange.info.model if exchange.info is not None else None
        try:
            where, client = check.client(request.remote, request.headers)
        except ClientHeaderError as exc:
            self.refused("bad-header")
            return error_response(400, str(exc), "invalid_request_error")
        exchange.client = CheckedClient(where, client, model)
        base = self.base_of(model) if model is not None else None
        verdict = check.verdict(where, client, request.host, base or model)
        if verdict.allowed and base is not None and any(model in s.models
                                                        for s in check.services):
            verdict = check.verdict(where, client, request.host, model)
        if verdict.allowed:
            return await call_next(exchange)
        self.refused(verdict.service or "no-service")
        return error_response(
            451,
            verdict.message(self.region),
            "residency_refused",
            headers={
                "x-director-allowed-regions": ",".join(verdict.allowed_regions or ()),
                "x-director-region": self.region,
            },
        )
