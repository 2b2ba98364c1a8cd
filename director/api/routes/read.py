"""Read-scope routes: status, services, explain and the active policy."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Query, Response

from director.api.deps import Reader, Runtime
from director.api.explain import explain, make_client
from director.api.policy_etag import etag
from director.api.services import describe_services
from director.api.tenant_status import tenant_status
from director.rollouts.controller import Rollout

router = APIRouter(prefix="/api/v1", tags=["read"])


def rollout_summary(rollout: Rollout) -> dict[str, Any]:
    """What the status page shows of a rollout (``GET /api/v1/rollouts/{id}`` has all)."""
    spec = rollout.spec
    return {"id": rollout.id, "model": spec.model, "baseline": spec.baseline,
            "candidate": spec.candidate, "regions": list(spec.regions),
            "status": rollout.status, "percent": rollout.percent, "reason": rollout.reason,
            "gates": {r["gate"]: r["verdict"] for r in rollout.last_results}}


@router.get("/status", summary="Regions, health, load, traffic share, sample answers, "
                               "tenants and rollouts")
async def get_status(runtime: Runtime, _who: Reader) -> dict[str, Any]:
    """What DNS answers now: per region its health, drain, load and share of the sample
    answers, per sample location and service the regions answered, and per tenant its
    usage and throttling over the last hour, and the rollouts with their step and gates."""
    status = await runtime.status()
    status["tenants"] = await tenant_status(runtime.store, runtime.active.policy)
    status["rollouts"] = [rollout_summary(r) for r in runtime.rollouts.known.values()]
    return status


@router.get("/services", summary="Services of the active policy and their steering")
async def get_services(runtime: Runtime, _who: Reader) -> dict[str, Any]:
    """The zone and, per service, its steering chain and residency rules."""
    return describe_services(runtime.active.policy)


@router.get("/explain", summary="The decision for one client and name, step by step")
async def get_explain(
    runtime: Runtime, _who: Reader,
    name: str = Query(description="Service host name, e.g. chat.infer.example.com"),
    client: str | None = Query(None, description="Client (or resolver) address"),
    ecs: str | None = Query(None, description="EDNS Client Subnet, e.g. 81.2.69.0/24"),
) -> dict[str, Any]:
    """The engine's decision on the current snapshot, with every step's kept and dropped
    regions and why."""
    active = runtime.active
    who = make_client(runtime.locator, client, ecs)
    return explain(active.policy, active.engine, runtime.refresher.current, who, name)


@router.get("/policy", summary="The active policy's source and version")
async def get_policy(runtime: Runtime, _who: Reader, response: Response) -> dict[str, Any]:
    """The source, version, digest and epoch of the policy this instance serves; the
    ``ETag`` header is what a ``PUT`` sends back as ``If-Match``."""
    active = runtime.active
    document = active.document
    response.headers["ETag"] = etag(active.identity)
    return {"version": active.version, "name": document.name, "text": document.text,
            "files": dict(document.files), "digest": active.digest, "epoch": active.epoch,
            "etag": etag(active.identity)}
