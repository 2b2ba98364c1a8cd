"""Prometheus metrics of the admin API (``GET /metrics``), on a registry of its own that
also carries the snapshot refresher's ``director_state_*`` families."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge
from starlette.types import ASGIApp, Message, Receive, Scope, Send


class ApiMetrics:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry if registry is not None else CollectorRegistry()
        self.requests = Counter(
            "director_api_requests", "HTTP requests answered, by route template and status",
            ["method", "route", "status"], registry=self.registry)
        self.changes = Counter(
            "director_api_changes", "Changes requested (policy, drain, chaos), by outcome",
            ["action", "outcome"], registry=self.registry)
        self.policy_version = Gauge(
            "director_api_policy_version", "Version of the policy this instance serves",
            registry=self.registry)
        self.policy_reload_failures = Gauge(
            "director_api_policy_reload_failures",
            "Policy versions found in Redis that failed to load (the last good one stayed)",
            registry=self.registry)


class RequestCounter:
    """ASGI middleware counting each HTTP request by its route template (not its path, so
    the label set stays bounded)."""

    def __init__(self, app: ASGIApp, metrics: ApiMetrics) -> None:
        self.app = app
        self.metrics = metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        status = 500

        async def counted(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, counted)
        finally:
            route = scope.get("route")
            template = getattr(route, "path", None) or "unmatched"
            self.metrics.requests.labels(scope["method"], template, str(status)).inc()
