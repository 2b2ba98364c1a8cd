"""Routes without authentication: liveness, Prometheus metrics and the status page.

The page carries no data of its own: its script reads a token from the URL fragment
(``/#token=...``, never sent to the server), keeps it in sessionStorage and polls
``/api/v1/status`` with it.
"""

from __future__ import annotations

from importlib import resources
from typing import Any

from fastapi import APIRouter
from fastapi.responses import HTMLResponse, Response
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from director.api.deps import Runtime

router = APIRouter()

PAGE_HEADERS = {
    "Content-Security-Policy": "default-src 'none'; script-src 'self'; style-src 'self'; "
                               "img-src 'self' data:; connect-src 'self'; "
                               "base-uri 'none'; frame-ancestors 'none'",
    "Cache-Control": "no-cache",
    "Referrer-Policy": "no-referrer",
    "X-Content-Type-Options": "nosniff",
}


@router.get("/healthz", tags=["public"], summary="Liveness, and the policy version served")
async def healthz(runtime: Runtime) -> dict[str, Any]:
    active = runtime.active
    return {"ok": True, "policy": {"version": active.version, "digest": active.digest,
                                   "epoch": active.epoch}}


@router.get("/metrics", tags=["public"], summary="Prometheus metrics",
            response_class=Response)
async def metrics(runtime: Runtime) -> Response:
    return Response(generate_latest(runtime.metrics.registry), media_type=CONTENT_TYPE_LATEST)


@router.get("/", tags=["public"], summary="Status page", response_class=HTMLResponse)
async def status_page() -> HTMLResponse:
    """The live status page (open it as ``/#token=<read token>``)."""
    page = resources.files("director.api").joinpath("static/index.html").read_text("utf-8")
    return HTMLResponse(page, headers=PAGE_HEADERS)
