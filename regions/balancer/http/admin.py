# SPDX-License-Identifier: Apache-2.0
"""The balancer's admin listener: ``/metrics`` and ``/_admin/*``, apart from the public port.

The public port serves clients (inference, ``/v1/models``, ``/healthz``); what reads or
changes the balancer itself lives on a listener of its own (``AdminListen``), so that
reaching the public port (every client does) gives no access to it:

- ``GET /metrics``: Prometheus text (per-tenant usage included);
- ``POST /_admin/drain`` and ``/_admin/undrain`` (``{"backend": NAME}``); a drain with
  ``"wait_s": S`` answers once the server holds no request (its streams ended), or 504
  after S seconds (at most ``MAX_DRAIN_WAIT_S``);
- ``POST /_admin/explain`` (``{"path": "/v1/...", "body": {...}, "headers": {...}}``);
- ``GET /_admin/state``;
- ``GET /_admin/desired-replicas``: the autoscaling signal per model, in the external
  metrics API's shape (``scheduling.demand``).

Where it listens, and when it needs a token, is ``admin_listen.AdminListen``: loopback
needs none, anywhere else a bearer token. A token, once given, is required on loopback too
(``Authorization: Bearer <token>``, else 401).
"""

from __future__ import annotations

import asyncio
import hmac
import json
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import Any, Protocol

from aiohttp import web

from regions.balancer.errors import BalancerConfigError, RequestRejected
from regions.balancer.http.metrics import BalancerMetrics
from regions.balancer.http.refusals import error_response
from regions.balancer.scheduling.admission import Dispatcher
from regions.balancer.scheduling.backends import BackendPool
from regions.balancer.scheduling.pool_health import ADMIN
from regions.balancer.scheduling.region_demand import region_demand

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
MAX_DRAIN_WAIT_S = 3600.0


class Administered(Protocol):
    """What the admin routes read and change of a balancer."""

    region: str
    pool: BackendPool
    dispatcher: Dispatcher
    metrics: BalancerMetrics

    def explain(self, path: str, body: Any,
                headers: dict[str, str] | None = None) -> dict[str, Any]: ...

    def state(self) -> dict[str, Any]: ...


def build_admin_app(target: Administered, token: str | None) -> web.Application:
    """The admin listener's app for ``target``; every route requires ``token`` if given."""
    app = web.Application(middlewares=[_bearer(token)] if token is not None else [])
    routes = AdminRoutes(target)
    app.router.add_get("/metrics", routes.metrics)
    app.router.add_post("/_admin/drain", routes.drain)
    app.router.add_post("/_admin/undrain", routes.undrain)
    app.router.add_post("/_admin/explain", routes.explain)
    app.router.add_get("/_admin/state", routes.state)
    app.router.add_get("/_admin/desired-replicas", routes.desired_replicas)
    return app


def _bearer(token: str) -> Any:
    expected = f"Bearer {token}".encode()

    @web.middleware
    async def require_token(request: web.Request, handler: Handler) -> web.StreamResponse:
        given = request.headers.get("Authorization", "").encode()
        if not hmac.compare_digest(given, expected):
            return error_response(401, "admin: a valid bearer token is required",
                                  "invalid_request_error", headers={"WWW-Authenticate": "Bearer"})
        return await handler(request)

    return require_token


class AdminRoutes:
    """The handlers of the admin listener."""

    def __init__(self, target: Administered) -> None:
        self.target = target

    async def metrics(self, request: web.Request) -> web.Response:
        body, kind = self.target.metrics.render(request.headers.get("Accept", ""))
        return web.Response(body=body, headers={"Content-Type": kind})

    async def state(self, request: web.Request) -> web.Response:
        return web.json_response(self.target.state())

    async def desired_replicas(self, request: web.Request) -> web.Response:
        """The autoscaling signal in the external metrics API's shape (an
        ``ExternalMetricValueList`` of ``director_desired_replicas``, one item per model;
        ``?model=`` one), which KEDA's ``metrics-api`` scaler and an HPA's external
        metrics adapter read; ``details`` carries the reading behind each."""
        wanted = request.query.get("model")
        readings = [r for r in region_demand(self.target.dispatcher)
                    if wanted is None or r.model == wanted]
        now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        return web.json_response({
            "kind": "ExternalMetricValueList",
            "apiVersion": "external.metrics.k8s.io/v1beta1",
            "metadata": {},
            "items": [{"metricName": "director_desired_replicas",
                       "metricLabels": {"region": self.target.region, "model": r.model},
                       "timestamp": now, "value": str(r.desired)} for r in readings],
            "details": [r.to_json() for r in readings],
        })

    async def drain(self, request: web.Request) -> web.Response:
        return await self._set_drain(request, True)

    async def undrain(self, request: web.Request) -> web.Response:
        return await self._set_drain(request, False)

    async def explain(self, request: web.Request) -> web.Response:
        try:
            body = await _json_body(request)
            return web.json_response(self.target.explain(
                str(body.get("path", "/v1/completions")), body.get("body"),
                body.get("headers") or {}))
        except RequestRejected as exc:
            return error_response(exc.status, exc.message, "invalid_request_error")
        except ValueError as exc:
            return error_response(400, str(exc), "invalid_request_error")

    async def _set_drain(self, request: web.Request, draining: bool) -> web.Response:
        pool = self.target.pool
        try:
            body = await _json_body(request)
            name = body.get("backend") or request.query.get("backend")
            if not isinstance(name, str):
                raise RequestRejected(400, "admin: backend: required")
            wait = body.get("wait_s", 0) if draining else 0
            if isinstance(wait, bool) or not isinstance(wait, int | float) or \
                    not 0 <= wait <= MAX_DRAIN_WAIT_S:
                raise RequestRejected(400, f"admin: wait_s: seconds from 0 to "
                                           f"{MAX_DRAIN_WAIT_S:g}")
            pool.set_draining(name, draining, ADMIN)
        except RequestRejected as exc:
            return error_response(exc.status, exc.message, "invalid_request_error")
        except BalancerConfigError as exc:
            return error_response(404, str(exc), "not_found")
        b = pool[name]
        drained = True
        if wait:  # until the streams it holds have ended (a scale-down's preStop)
            try:
                async with asyncio.timeout(wait):
                    while b.in_flight:
                        await asyncio.sleep(0.05)
            except TimeoutError:
                drained = False
        return web.json_response({"backend": name, "draining": b.draining,
                                  "drained_by": sorted(b.drains), "in_flight": b.in_flight},
                                 status=200 if drained else 504)


async def _json_body(request: web.Request) -> dict[str, Any]:
    try:
        body = json.loads(await request.read() or b"{}")
    except (json.JSONDecodeError, UnicodeDecodeError):
        raise RequestRejected(400, "admin: body is not valid JSON") from None
    if not isinstance(body, dict):
        raise RequestRejected(400, "admin: expected a JSON object")
    return body
