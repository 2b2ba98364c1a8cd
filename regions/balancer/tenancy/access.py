# SPDX-License-Identifier: Apache-2.0
"""Who may send a request to this region: the policy's ``identity`` and ``tenants``.

``Identify``, the first stage of a request (``Tenancy.check``): a missing or bad credential is
answered 401 with an OpenAI-style error body (``invalid_api_key``) and never proxied, an
API key that cannot be checked yet (no key table known: the state unreachable since start
and no saved copy, ``tenants.api_keys``) 503 ``state_unavailable`` with ``Retry-After``; a
tenant asking for a service (the Host) or a model it may not use, or reaching a region its
``regions`` do not list, gets 403. Refusals are
counted by reason (``director_balancer_auth_refused_total``) and logged with the reason,
never with the credential. The identified tenant travels in the request's
``Exchange`` (``caller``), and director's credential is not forwarded to the GPU servers.

A tenant that lists ``regions`` is served only there: the DNS tier does not know tenants,
so a tenant's request that reaches a region outside its list is refused here with 403
(``region_not_allowed``), and overflow never sends it to a sibling outside the list.

A JWKS URL is fetched by a background task (``tenants.jwt_auth.Jwks``), started with the
verifier and stopped when the policy drops it; until its first key set, JWTs are answered
503 (``jwks_unavailable``), never 401.

A policy without ``identity`` makes ``Tenancy`` a no-op: every request is served as before.
With tenants the balancer holds requests at the backends' learned capacities (the region
queue), because that is where the tenants' fair share orders them.
API keys live in the shared state (``tenants.api_keys.KeyTable``, followed live); JWTs are
verified against the JWKS the policy names (``tenants.jwt_auth``).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any

from aiohttp import web
from multidict import CIMultiDict

from policies.model import Policy, Tenant
from regions.balancer.http.exchange import Exchange, Next
from regions.balancer.http.request_info import host_name
from regions.balancer.scheduling.fair_share import FairShare
from state.aio import AsyncStateStore
from tenants.api_keys import KeyTable
from tenants.identify import UNAVAILABLE, Identified, Identifier, Refused
from tenants.jwt_auth import JwtVerifier

CREDENTIAL_HEADERS = ("Authorization", "api-key")
UNAVAILABLE_RETRY_S = 5  # the key table's refresh period: retry once it may be known

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Identification:
    """Who sent a request: ``request`` without its credential headers, the ``caller``
    (None without identity), and the ``credentials`` taken off (only a sibling balancer
    gets them back, never a GPU server)."""

    request: web.Request
    caller: Identified | None
    credentials: tuple[tuple[str, str], ...] = ()


class Tenancy:
    """Identity checks of one balancer; an async context manager (it follows the keys)."""

    def __init__(self, policy: Policy | None, store: AsyncStateStore | None,
                 counter: Any = None, fair: FairShare | None = None,
                 on_tenants: Callable[[bool], None] | None = None,
                 region: str | None = None) -> None:
        self.region = region  # this balancer's region (None: a tenant's regions unchecked)
        self.store = store
        self.keys = KeyTable(store) if store is not None else None
        self.counter = counter  # prometheus Counter labelled by reason, or None
        self.fair = fair  # the region queue's fair share, told the tenants' weights
        self.on_tenants = on_tenants  # told whether the policy identifies tenants
        self.identifier: Identifier | None = None
        self.tenants: Mapping[str, Tenant] = {}
        self.services: frozenset[str] = frozenset()
        self.apply_policy(policy)

    def attach(self, store: AsyncStateStore, key_file: Path | None = None) -> None:
        """Follow the API keys in ``store`` (before ``__aenter__``), with their local copy
        in ``key_file``."""
        if self.keys is None:
            self.store, self.keys = store, KeyTable(store, file=key_file)
            self.apply_policy(self._policy)

    @property
    def enabled(self) -> bool:
        return self.identifier is not None

    def apply_policy(self, policy: Policy | None) -> None:
        """Identify by ``policy`` from now on (a JWKS already loaded is kept if unchanged)."""
        self._policy = policy
        identity = policy.identity if policy is not None else None
        self.tenants = {t.name: t for t in policy.tenants} if policy is not None else {}
        self.services = frozenset(s.name for s in policy.services) if policy else frozenset()
        # the services whose deterministic answers are cached (``degrade.cache_stage``)
        self.caches = {s.name: s.cache for s in policy.services if s.cache is not None} \
            if policy else {}
        # the services that degrade, with their ladders (``degrade.ladder``)
        self.ladders = {s.name: s.degrade for s in policy.services if s.degrade} \
            if policy else {}
        if self.fair is not None:
            self.fair.set_tenants({t.name: t.weight for t in self.tenants.values()},
                                  {t.name: t.reserve for t in self.tenants.values()})
        if self.on_tenants is not None:
            self.on_tenants(identity is not None and bool(self.tenants))
        old = self.identifier.verifier if self.identifier is not None else None
        verifier = None
        if identity is not None and identity.jwt is not None:
            verifier = (old if old is not None and old.config == identity.jwt
                        else JwtVerifier(identity.jwt))
            verifier.start()  # the JWKS is fetched in the background, never per request
        if old is not None and old is not verifier:
            old.close()
        if identity is None:
            self.identifier = None
            return
        check_key = self.keys.check if self.keys is not None and identity.api_keys else None
        self.identifier = Identifier(identity, self.tenants, check_key, verifier)

    async def check(self, request: web.Request) -> Identification | web.Response:
        """Who sends ``request`` (and the request without its credential headers), or the
        refusal to answer with."""
        identifier = self.identifier
        if identifier is None:
            return Identification(request, None)
        found = await identifier.identify(request.headers)
        if isinstance(found, Refused):
            if found.reason in UNAVAILABLE:
                return self._refuse(503, found.reason, found.message, found.reason,
                                    {"Retry-After": str(UNAVAILABLE_RETRY_S)})
            return self._refuse(401, found.reason, found.message, "invalid_api_key")
        tenant = found.tenant
        if (refusal := self.region_refusal(found)) is not None:
            return refusal
        host = host_name(request.host)
        if tenant.services and host not in tenant.services:
            return self._refuse(403, "service", f"Tenant '{tenant.name}' may not use "
                                f"'{host}' (it may use {', '.join(tenant.services)}, "
                                "addressed by name).", "service_not_allowed")
        headers = CIMultiDict(request.headers)
        taken = tuple((name, value) for name in CREDENTIAL_HEADERS
                      for value in headers.popall(name, ()))
        return Identification(request.clone(headers=headers), found, taken)

    def region_refusal(self, who: Identified) -> web.Response | None:
        """403 when ``who`` lists regions and this balancer's region is not one of them."""
        regions = who.tenant.regions
        if not regions or self.region is None or self.region in regions:
            return None
        return self._refuse(403, "region", f"Tenant '{who.tenant.name}' may not be served in "
                            f"region '{self.region}' (it may be served in "
                            f"{', '.join(regions)}).", "region_not_allowed")

    def model_refusal(self, who: Identified | None, model: str | None) -> web.Response | None:
        """403 when ``who`` may not use ``model`` (checked once the body is read)."""
        if who is None or not who.tenant.models or model in who.tenant.models:
            return None
        return self._refuse(403, "model", f"Tenant '{who.tenant.name}' may not use model "
                            f"'{model}'.", "model_not_allowed")

    def _refuse(self, status: int, reason: str, message: str, code: str,
                headers: dict[str, str] | None = None) -> web.Response:
        if self.counter is not None:
            self.counter.labels(reason).inc()
        log.info("request refused (%d, %s)", status, reason)
        kind = "service_unavailable" if status == 503 else "invalid_request_error"
        body = {"error": {"message": message, "type": kind, "param": None, "code": code}}
        if status == 401:
            headers = {"WWW-Authenticate": "Bearer"}
        return web.json_response(body, status=status, headers=headers)

    async def __aenter__(self) -> Tenancy:
        identity = self._policy.identity if self._policy is not None else None
        if identity is not None and identity.api_keys and self.keys is None:
            log.warning("tenant API keys need the shared state (--redis); only JWTs identify")
        if self.keys is not None:
            await self.keys.__aenter__()
        if self.identifier is not None and self.identifier.verifier is not None:
            self.identifier.verifier.start()
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None,
                        exc: BaseException | None, tb: TracebackType | None) -> None:
        if self.identifier is not None and self.identifier.verifier is not None:
            await self.identifier.verifier.aclose()
        if self.keys is not None:
            await self.keys.__aexit__(exc_type, exc, tb)


class Identify:
    """Stage: who sends the request; 401, 403 or 503 when it may not be sent here. Passes
    every request on while the policy has no identity."""

    def __init__(self, tenancy: Tenancy) -> None:
        self.tenancy = tenancy

    async def __call__(self, exchange: Exchange, call_next: Next) -> web.StreamResponse:
        if not self.tenancy.enabled:
            return await call_next(exchange)
        checked = await self.tenancy.check(exchange.request)
        if isinstance(checked, web.Response):
            return checked
        exchange.request, exchange.caller = checked.request, checked.caller
        exchange.credentials = checked.credentials
        return await call_next(exchange)
