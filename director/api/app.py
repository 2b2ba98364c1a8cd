"""``build_api(config)``: the admin API as a FastAPI app (OpenAPI at ``/docs``).

The runtime (state clients, policy, tokens, audit log) is built here, so configuration
errors surface before the server starts; it is started and stopped by the app's lifespan.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator
from importlib import resources

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from fastapi.staticfiles import StaticFiles
from starlette.exceptions import HTTPException

from director.api.config import ApiConfig
from director.api.docs import mount_docs
from director.api.errors import ApiError
from director.api.limits import BodyLimit
from director.api.metrics import RequestCounter
from director.api.routes import admin, chaos, public, read, rollouts, tenants, usage
from director.api.runtime import ApiRuntime
from state import StateError

log = logging.getLogger(__name__)

DESCRIPTION = """\
Admin API of **director**, the multi-region GeoDNS traffic director for AI inference.

Authenticate with `Authorization: Bearer <token>`; tokens carry the `read` or `admin` scope
(admin implies read). Every change is written to the audit log.
"""


def build_api(config: ApiConfig) -> FastAPI:
    """The app for ``config``; raises on a bad tokens file, GeoIP database or policy."""
    runtime = ApiRuntime(config)

    @contextlib.asynccontextmanager
    async def lifespan(_app: FastAPI) -> AsyncIterator[None]:
        await runtime.start()
        try:
            yield
        finally:
            await runtime.stop()

    app = FastAPI(title="director admin API", version="1", description=DESCRIPTION,
                  lifespan=lifespan, docs_url=None, redoc_url=None)
    app.state.runtime = runtime
    for router in (public.router, read.router, admin.router, chaos.router, tenants.router,
                   usage.router, rollouts.router):
        app.include_router(router)
    # breaking things on purpose is opt-in (director up opts in)
    app.include_router(chaos.chaos_router if config.enable_chaos else chaos.disabled_router)
    static = resources.files("director.api").joinpath("static")
    app.mount("/static", StaticFiles(directory=str(static)), name="static")
    mount_docs(app)
    _add_error_handlers(app)
    app.add_middleware(BodyLimit, max_body=config.max_body)
    app.add_middleware(RequestCounter, metrics=runtime.metrics)
    return app


def _add_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(ApiError)
    async def api_error(_request: Request, exc: ApiError) -> JSONResponse:
        headers = {"WWW-Authenticate": "Bearer"} if exc.status == 401 else None
        return JSONResponse(exc.body(), status_code=exc.status, headers=headers)

    @app.exception_handler(StateError)
    async def state_error(_request: Request, exc: StateError) -> JSONResponse:
        log.warning("api: state server error: %s", exc)
        return JSONResponse({"error": f"the shared state is unavailable: {exc}",
                             "state": {"reachable": False}}, status_code=503)

    @app.exception_handler(RequestValidationError)
    async def invalid(_request: Request, exc: RequestValidationError) -> JSONResponse:
        details = [{"where": ".".join(map(str, e.get("loc", ()))), "message": e.get("msg")}
                   for e in exc.errors()]
        text = "; ".join(f"{d['where']}: {d['message']}" for d in details)
        return JSONResponse({"error": f"invalid request: {text}", "details": details},
                            status_code=422)

    @app.exception_handler(HTTPException)
    async def http_error(_request: Request, exc: HTTPException) -> JSONResponse:
        return JSONResponse({"error": str(exc.detail)}, status_code=exc.status_code,
                            headers=getattr(exc, "headers", None))
