"""Admin-scope routes of the supervisor's processes (``router``, always mounted) and the chaos
routes that break things on purpose (``chaos_router``: kill, freeze or restore processes,
GPU server faults), mounted only when the API runs with ``--enable-chaos`` (``director up``
turns it on); without it they answer 404. Each drill is written to the audit log."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Body
from fastapi.responses import JSONResponse

from director.api.changes import audited
from director.api.control import ControlClient
from director.api.deps import Admin, Runtime
from director.api.errors import ApiError, Unavailable

router = APIRouter(prefix="/api/v1", tags=["processes"])
chaos_router = APIRouter(prefix="/api/v1", tags=["chaos"])


def _control(runtime: Runtime) -> ControlClient:
    if runtime.control is None:
        raise Unavailable("process control is not available: the API was started without "
                          "--control (run it under director up)")
    return runtime.control


@router.get("/processes", summary="Processes run by director up's supervisor")
async def get_processes(runtime: Runtime, _who: Admin) -> JSONResponse:
    """The supervisor's ``GET /processes``, passed through; 503 without ``--control``."""
    status, data = await _control(runtime).processes()
    return JSONResponse(data, status_code=status)


@chaos_router.post("/chaos/processes", summary="Kill, freeze or restore supervised processes")
async def chaos_processes(runtime: Runtime, who: Admin,
                          body: dict[str, Any] = Body(examples=[{  # noqa: B008
                              "action": "kill", "names": ["balancer/eu-west"], "ttl": 30}]),
                          ) -> JSONResponse:
    """The supervisor's ``POST /actions``: ``{"action": "kill"|"freeze"|"restore",
    "names": [patterns], "ttl": seconds}``; killed and frozen processes come back at ttl."""
    control = _control(runtime)
    names = body.get("names")
    target = ", ".join(map(str, names)) if isinstance(names, list) else str(names)

    async def act() -> tuple[int, Any]:
        status, data = await control.actions(body)
        if status >= 400:
            message = data.get("error") if isinstance(data, dict) else None
            raise ApiError(str(message or f"supervisor answered {status}"), status=status)
        return status, data

    status, data = await audited(runtime, who, f"chaos.{body.get('action')}", target, body,
                                 act())
    return JSONResponse(data, status_code=status)


@chaos_router.post("/chaos/gpus/{region}/{gpu}/fault", summary="Set a simulated GPU server's fault")
async def gpu_fault(region: str, gpu: str, runtime: Runtime, who: Admin,
                    body: dict[str, Any] = Body(examples=[{  # noqa: B008
                        "mode": "fail", "ttl": 60}])) -> dict[str, Any]:
    """Forwards the simulator fault (``{"mode": "none"|"fail"|"slow"|"hang"|"error5xx"|
    "short"|"stall"|"late", ...}``) to the server's ``/_sim/fault``; it is reverted to
    ``{"mode": "none"}`` after ``ttl`` seconds (default and maximum 600), by this API and
    by the server itself (so it ends even if the API does not outlive it). 502 when the
    server cannot be reached."""
    return await audited(runtime, who, "chaos.gpu_fault", f"gpu {region}/{gpu}", body,
                         runtime.chaos.fault(runtime.active.policy, region, gpu, body))


@chaos_router.post("/chaos/gpus/{region}/{gpu}/root",
                   summary="Swap the weights a simulated GPU server says it serves")
async def gpu_root(region: str, gpu: str, runtime: Runtime, who: Admin,
                   body: dict[str, Any] = Body(examples=[{  # noqa: B008
                       "model": "llama-3.1-8b-instruct", "root": "/weights/other", "ttl": 60}])
                   ) -> dict[str, Any]:
    """A silent revision swap: from now the server's ``/v1/models`` says ``model`` was loaded
    from ``root`` (nothing else changes); put back after ``ttl`` seconds (default and
    maximum 600) or by ``{"model": ..., "restore": true}``. 502 when it cannot be reached."""
    return await audited(runtime, who, "chaos.gpu_root", f"gpu {region}/{gpu}", body,
                         runtime.chaos.swap_root(runtime.active.policy, region, gpu, body))


disabled_router = APIRouter(prefix="/api/v1", include_in_schema=False)


@disabled_router.api_route("/chaos/{rest:path}", methods=["GET", "POST", "PUT", "DELETE"])
async def chaos_disabled(rest: str) -> JSONResponse:
    """What every chaos path answers when the routes are not mounted: 404, saying why."""
    return JSONResponse({"error": "chaos routes are off: start the API with --enable-chaos "
                                  "(director up does) to run drills that break things"},
                        status_code=404)
