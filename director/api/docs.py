"""``/docs``: Swagger UI served from this process, so the API's docs work offline.

FastAPI's own ``/docs`` page loads Swagger UI's script and stylesheet from a CDN, which an
admin network without internet access, the usual place for this API, cannot reach: the page
stays blank. This is the same page pointed at the copy of Swagger UI 5 that the
``fastapi-offline`` package ships (MIT; Swagger UI itself Apache-2.0), mounted under
``/docs/assets``. ReDoc is not offered: its bundle still fetches its logo from a CDN.
``/openapi.json`` is unchanged.
"""

from __future__ import annotations

from importlib import resources

from fastapi import FastAPI
from fastapi.openapi.docs import get_swagger_ui_html
from fastapi.responses import HTMLResponse
from fastapi.staticfiles import StaticFiles

ASSETS = "/docs/assets"
FAVICON = "/static/favicon.svg"


def mount_docs(app: FastAPI) -> None:
    """Serve ``/docs`` for ``app.openapi_url`` with no request off the host.

    Build ``app`` with ``docs_url=None, redoc_url=None`` so that FastAPI's CDN pages are not
    registered as well.
    """
    openapi_url = app.openapi_url or "/openapi.json"
    assets = resources.files("fastapi_offline").joinpath("static")
    app.mount(ASSETS, StaticFiles(directory=str(assets)), name="docs-assets")

    @app.get("/docs", include_in_schema=False)
    async def swagger_ui() -> HTMLResponse:
        return get_swagger_ui_html(
            openapi_url=openapi_url, title=f"{app.title} - docs",
            swagger_js_url=f"{ASSETS}/swagger-ui-bundle.js",
            swagger_css_url=f"{ASSETS}/swagger-ui.css", swagger_favicon_url=FAVICON,
            # Off loopback, Swagger UI would fetch a badge from swagger.io's validator.
            swagger_ui_parameters={"validatorUrl": None})
