# SPDX-License-Identifier: Apache-2.0
"""Overflow: what a saturated region does with a request it would shed (429).

Modes (``OverflowConfig.mode``):

- ``off`` (default): 429 with Retry-After, as admission decided;
- ``redirect``: 307 to a sibling region's balancer, same path and query, plus the marker
  query parameter ``director-overflow=<this region>`` (the sibling strips it);
- ``proxy``: forward the request to the sibling's balancer and stream its answer back
  (headers ``x-director-region`` / ``x-director-backend`` are the sibling's; the answer
  carries ``x-director-overflow: <this region>``). If the sibling cannot be reached the
  client gets the 429.

One hop only: a request that arrives marked (header ``x-director-overflow`` or the query
parameter) is never overflowed again; it is served or shed where it landed.

Siblings come from the policy: every other region whose balancer URL is known (an explicit
``urls`` entry, else ``http://{first endpoint}:{balancer_port}``), nearest first (great
circle from this region's location). A request may go to a sibling only when

1. the request's service (its Host, when it names one of the policy's services) is served
   by the sibling, and
2. the residency re-check (``residency_check.ResidencyCheck`` for the sibling, on the client
   as this region's own check placed it, for the same model) allows the sibling: a client
   whose jurisdiction forbids a region, or that some rule may hold, is never sent where
   that rule forbids, and
3. the request's tenant (the exchange's ``caller``), when it lists ``regions``, may be served in
   the sibling: a tenant is never sent outside its regions.

Without a policy (no residency check) nothing can be proven, so nothing overflows. The
sibling sees the client through ``X-Director-Client-IP`` / ``-Country`` (the balancers'
network must be in its ``--trusted-network`` list) and re-checks residency itself.
"""

from __future__ import annotations

import enum
import math
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeGuard

from aiohttp import web

from policies.model import Policy, Region
from regions.balancer.errors import BalancerConfigError
from regions.balancer.http.exchange import CheckedClient, Exchange, Next
from regions.balancer.http.headers import upstream_request_headers
from regions.balancer.http.parse import DEADLINE_HEADER
from regions.balancer.http.proxy import BACKEND_HEADER, REGION_HEADER
from regions.balancer.http.relay import UPSTREAM_ERRORS, relay, response_for
from regions.balancer.http.request_info import PRIORITY_HEADER, SESSION_HEADER
from regions.balancer.http.upstream_pool import UpstreamPool
from regions.balancer.tenancy.residency_check import (
    CLIENT_COUNTRY_HEADER,
    CLIENT_IP_HEADER,
    ResidencyCheck,
)

OVERFLOW_HEADER = "x-director-overflow"
OVERFLOW_PARAM = "director-overflow"
FORWARDED_CONTROL = (PRIORITY_HEADER, SESSION_HEADER, DEADLINE_HEADER)


class OverflowMode(enum.Enum):
    OFF = "off"
    REDIRECT = "redirect"
    PROXY = "proxy"


@dataclass(frozen=True)
class OverflowConfig:
    """``balancer_port``: where sibling balancers listen on their region's first endpoint
    (None: only the regions named in ``urls``); ``urls``: region -> balancer URL."""

    mode: OverflowMode = OverflowMode.OFF
    balancer_port: int | None = None
    urls: Mapping[str, str] = field(default_factory=dict)
    connect_timeout_s: float = 2.0
    read_timeout_s: float = 300.0


@dataclass(frozen=True)
class Sibling:
    region: str
    url: str
    check: ResidencyCheck


def sibling_url(region: Region, config: OverflowConfig) -> str | None:
    url = config.urls.get(region.name)
    if url:
        return url.rstrip("/")
    if config.balancer_port is None:
        return None
    if region.endpoints_v4:
        return f"http://{region.endpoints_v4[0]}:{config.balancer_port}"
    if region.endpoints_v6:
        return f"http://[{region.endpoints_v6[0]}]:{config.balancer_port}"
    return None


def _distance_km(a: Region, b: Region) -> float:
    lat1, lon1, lat2, lon2 = map(math.radians, (a.latitude, a.longitude, b.latitude, b.longitude))
    h = (
        math.sin((lat2 - lat1) / 2) ** 2
        + math.cos(lat1) * math.cos(lat2) * math.sin((lon2 - lon1) / 2) ** 2
    )
    return 2 * 6371.0 * math.asin(math.sqrt(min(1.0, h)))


def siblings(residency: ResidencyCheck, config: OverflowConfig) -> tuple[Sibling, ...]:
    """The other regions of the policy with a known balancer URL, nearest first."""
    policy: Policy = residency.policy
    try:
        here = policy.region(residency.region)
    except KeyError:
        return ()
    trusted = [str(n) for n in residency.trusted]
    found = []
    for region in policy.regions:
        url = sibling_url(region, config)
        if region.name == here.name or url is None:
            continue
        check = ResidencyCheck(policy, region.name, residency.locate, trusted)
        found.append((_distance_km(here, region), Sibling(region.name, url, check)))
    return tuple(s for _, s in sorted(found, key=lambda pair: pair[0]))


def is_shed(response: web.StreamResponse) -> TypeGuard[web.Response]:
    """The proxy's own 429 (admission shed it): not yet sent, unlike a relayed answer."""
    return isinstance(response, web.Response) and not response.prepared and response.status == 429


class Overflow:
    """Sends a shed request to an allowed sibling region (redirect or proxy)."""

    def __init__(
        self, region: str, config: OverflowConfig, residency: ResidencyCheck | None
    ) -> None:
        if config.mode is not OverflowMode.OFF and residency is None:
            raise BalancerConfigError(
                f"overflow {config.mode.value}: needs the policy's residency check"
            )
        self.region = region
        self.config = config
        self.siblings: tuple[Sibling, ...] = ()
        self.services: dict[str, tuple[str, ...]] = {}
        self.counts: dict[str, int] = {}
        self.pools: dict[str, UpstreamPool] = {}  # one per sibling URL
        if residency is not None:
            self.set_residency(residency)

    @property
    def enabled(self) -> bool:
        return self.config.mode is not OverflowMode.OFF

    def describe(self) -> dict[str, Any]:
        """Mode, siblings (nearest first) and what was sent where, for ``/_admin/state``."""
        return {
            "mode": self.config.mode.value,
            "siblings": {s.region: s.url for s in self.siblings},
            "counts": dict(self.counts),
        }

    def set_residency(self, residency: ResidencyCheck) -> None:
        """Follow a new policy: its regions, addresses and residency rules."""
        self.siblings = siblings(residency, self.config)
        self.services = {s.name: s.regions for s in residency.policy.services}

    # -- deciding ------------------------------------------------------------------------

    @staticmethod
    def marked(request: web.Request) -> bool:
        return OVERFLOW_HEADER in request.headers or OVERFLOW_PARAM in request.rel_url.query

    def target(
        self,
        client: CheckedClient,
        host: str | None,
        regions: Collection[str] = (),
    ) -> Sibling | None:
        """The nearest sibling ``client``'s request may go to, or None: one serving the
        request's service and allowing the client for its model, by the residency check
        this region made of it; ``regions``: the tenant's regions (empty: no tenant limit)."""
        serving = self.services.get((host or "").split(":")[0].lower().rstrip("."))
        for sibling in self.siblings:
            if serving is not None and sibling.region not in serving:
                continue
            if regions and sibling.region not in regions:
                continue
            verdict = sibling.check.verdict(client.place, client.described, host, client.model)
            if verdict.allowed:
                return sibling
        return None

    async def handle(self, exchange: Exchange, shed: web.Response) -> web.StreamResponse:
        """What to answer instead of ``shed`` (which is returned when nothing applies).
        The caller checks ``marked`` first, before ``strip_marker``."""
        if not self.enabled:
            return shed
        request, who = exchange.request, exchange.caller
        regions = who.tenant.regions if who is not None else ()
        client = exchange.client
        sibling = self.target(client, request.host, regions) if client is not None else None
        if sibling is None:
            self._count("none-allowed")
            return shed
        if self.config.mode is OverflowMode.REDIRECT:
            self._count(f"redirect:{sibling.region}")
            location = request.rel_url.update_query({OVERFLOW_PARAM: self.region})
            return web.Response(
                status=307,
                headers={
                    "Location": sibling.url + str(location),
                    REGION_HEADER: self.region,
                    OVERFLOW_HEADER: self.region,
                },
            )
        answer = await self.forward(request, sibling, exchange.credentials)
        self._count(
            f"proxy:{sibling.region}" if answer is not None else f"unreachable:{sibling.region}"
        )
        return shed if answer is None else answer

    def _count(self, key: str) -> None:
        self.counts[key] = self.counts.get(key, 0) + 1

    # -- proxying ------------------------------------------------------------------------

    def _pool(self, sibling: Sibling) -> UpstreamPool:
        pool = self.pools.get(sibling.url)
        if pool is None:
            pool = self.pools[sibling.url] = UpstreamPool(
                sibling.url,
                connect_timeout_s=self.config.connect_timeout_s,
                read_timeout_s=self.config.read_timeout_s,
            )
        return pool

    async def close(self) -> None:
        pools, self.pools = list(self.pools.values()), {}
        for pool in pools:
            await pool.close()

    def _headers(self, request: web.Request, sibling: Sibling,
                 credentials: Iterable[tuple[str, str]]) -> dict[str, str]:
        headers = dict(upstream_request_headers(request.headers))
        for name in FORWARDED_CONTROL:
            if name in request.headers:
                headers[name] = request.headers[name]
        if sibling.check.trusts(request.remote) and (
            CLIENT_COUNTRY_HEADER in request.headers or CLIENT_IP_HEADER in request.headers
        ):
            for name in (CLIENT_COUNTRY_HEADER, CLIENT_IP_HEADER):
                if name in request.headers:
                    headers[name] = request.headers[name]
        elif request.remote:
            headers[CLIENT_IP_HEADER] = request.remote
        if request.host:
            headers["Host"] = request.host  # the sibling finds the service by it
        headers[OVERFLOW_HEADER] = self.region
        headers.update(credentials)  # the sibling identifies the tenant again
        return headers

    async def forward(self, request: web.Request, sibling: Sibling,
                      credentials: Iterable[tuple[str, str]] = ()) -> web.StreamResponse | None:
        """Stream the sibling's answer back; None when the sibling could not be reached.
        ``credentials``: the headers identification took off, for the sibling to identify
        the tenant again."""
        body = await request.read()  # already read (and cached) by the proxy
        try:
            pool = self._pool(sibling)
            upstream = await pool.request(
                "POST", request.rel_url.path_qs,
                self._headers(request, sibling, credentials).items(), body
            )
        except UPSTREAM_ERRORS:
            return None
        headers = {
            name: upstream.headers[name]
            for name in (REGION_HEADER, BACKEND_HEADER)
            if name in upstream.headers
        }
        headers[OVERFLOW_HEADER] = self.region
        resp = response_for(upstream, headers)
        await relay(request, upstream, resp)
        return resp


def strip_marker(request: web.Request) -> web.Request:
    """The request without the redirect marker parameter (never sent to a GPU server)."""
    if OVERFLOW_PARAM not in request.rel_url.query:
        return request
    return request.clone(rel_url=request.rel_url.without_query_params(OVERFLOW_PARAM))


class SpillOver:
    """Stage: a request a sibling region sent is never sent on again (its marker is taken
    off before any GPU server sees it); one this region would shed (429) goes to the
    nearest sibling that may serve it, by ``overflow`` (None: overflow off)."""

    def __init__(self, overflow: Overflow | None) -> None:
        self.overflow = overflow

    async def __call__(self, exchange: Exchange, call_next: Next) -> web.StreamResponse:
        exchange.overflowed = Overflow.marked(exchange.request)
        exchange.request = strip_marker(exchange.request)
        response = await call_next(exchange)
        if self.overflow is not None and not exchange.overflowed and is_shed(response) \
                and not exchange.walks_ladder:
            return await self.overflow.handle(exchange, response)
        return response
