"""Admin-scope routes that change the deployment: the policy and drains. Each change is
written to the audit log."""

from __future__ import annotations

import json
from typing import Any

from fastapi import APIRouter, Request, Response

from director.api.changes import audited
from director.api.config import PolicyDocument
from director.api.deps import Admin, Runtime
from director.api.errors import ApiError, PolicyRejected
from director.api.policy_etag import etag, parse_if_match

router = APIRouter(prefix="/api/v1", tags=["admin"])

_POLICY_BODY = {
    "requestBody": {
        "required": True,
        "content": {
            "text/plain": {"schema": {"type": "string"},
                           "example": "zone infer.example.com { ... }"},
            "application/json": {"schema": {
                "type": "object", "required": ["text"],
                "properties": {"text": {"type": "string"}, "name": {"type": "string"},
                               "files": {"type": "object",
                                         "additionalProperties": {"type": "string"}}}}},
        },
    },
}


@router.put("/policy", summary="Replace the active policy", openapi_extra=_POLICY_BODY)
async def put_policy(request: Request, response: Response, runtime: Runtime,
                     who: Admin) -> dict[str, Any]:
    """Validate, prove residency, store in Redis and the policy store, then swap in.

    A plain-text body is the main file (its includes resolve against the current policy's
    files); a JSON body is ``{"text", "name"?, "files"?}``. Send ``If-Match`` with the
    ``ETag`` of the ``GET`` you edited (or its version number): when another version was
    stored since, 412 with the stored version and its ETag, and nothing changes. Without
    ``If-Match`` (or with ``*``) the policy replaces whatever is stored. On any error: 422
    with the positioned message and diagnostics, and the old policy stays active.
    """
    expect = parse_if_match(request.headers.get("if-match"))
    current = runtime.active.document
    document = _document(await request.body(), request.headers.get("content-type", ""),
                         current)
    detail = {"name": document.name, "bytes": len(document.text.encode()),
              "files": sorted(document.files),
              "if_match": None if expect is None else request.headers.get("if-match")}
    active = await audited(runtime, who, "policy.put", "policy", detail,
                           runtime.holder.replace(document, expect))
    sources = {active.document.name: active.document.text, **active.document.files}
    response.headers["ETag"] = etag(active.identity)
    return {"version": active.version, "name": active.document.name,
            "digest": active.digest, "epoch": active.epoch, "etag": etag(active.identity),
            "durability": active.durability.to_json(),
            "warnings": [{**w.as_dict(), "text": w.render(sources)} for w in active.warnings]}


def _document(body: bytes, content_type: str, current: PolicyDocument) -> PolicyDocument:
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError:
        raise PolicyRejected("policy: the body is not UTF-8 text", diagnostics=[]) from None
    if content_type.split(";")[0].strip().lower() != "application/json":
        return PolicyDocument(current.name, text, dict(current.files))
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise PolicyRejected(f"policy: the body is not valid JSON: {exc}",
                             diagnostics=[]) from None
    if not isinstance(data, dict) or not isinstance(data.get("text"), str):
        raise PolicyRejected('policy: expected {"text": "...", "name"?: "...", "files"?: {}}',
                             diagnostics=[])
    name = data.get("name", current.name)
    files = data.get("files", current.files)
    if not isinstance(name, str) or not isinstance(files, dict) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in files.items()):
        raise PolicyRejected("policy: 'name' must be a string and 'files' an object of "
                             "path -> text", diagnostics=[])
    return PolicyDocument(name, data["text"], files)


async def _ttl(request: Request) -> Any:
    body = await request.body()
    if not body.strip():
        return None
    try:
        data = json.loads(body)
    except ValueError:
        data = None
    if not isinstance(data, dict):
        raise ApiError('expected a JSON object, e.g. {"ttl": 300}', status=422)
    return data.get("ttl")


@router.post("/regions/{region}/drain", summary="Drain a region (optional JSON {\"ttl\": s})")
async def drain_region(region: str, request: Request, runtime: Runtime,
                       who: Admin) -> dict[str, Any]:
    """No new DNS answers go to the region; with a ttl it is undrained after that many
    seconds."""
    ttl = await _ttl(request)
    return await audited(runtime, who, "drain", f"region {region}", {"ttl": ttl},
                         runtime.drains.set(runtime.active.policy, region, None,
                                            draining=True, ttl=ttl))


@router.post("/regions/{region}/undrain", summary="Undrain a region")
async def undrain_region(region: str, runtime: Runtime, who: Admin) -> dict[str, Any]:
    return await audited(runtime, who, "undrain", f"region {region}", {},
                         runtime.drains.set(runtime.active.policy, region, None,
                                            draining=False))


@router.post("/regions/{region}/gpus/{gpu}/drain", summary="Drain a GPU server")
async def drain_gpu(region: str, gpu: str, request: Request, runtime: Runtime,
                    who: Admin) -> dict[str, Any]:
    """The region's balancer sends the GPU server no new requests."""
    ttl = await _ttl(request)
    return await audited(runtime, who, "drain", f"gpu {region}/{gpu}", {"ttl": ttl},
                         runtime.drains.set(runtime.active.policy, region, gpu,
                                            draining=True, ttl=ttl))


@router.post("/regions/{region}/gpus/{gpu}/undrain", summary="Undrain a GPU server")
async def undrain_gpu(region: str, gpu: str, runtime: Runtime, who: Admin) -> dict[str, Any]:
    return await audited(runtime, who, "undrain", f"gpu {region}/{gpu}", {},
                         runtime.drains.set(runtime.active.policy, region, gpu,
                                            draining=False))
