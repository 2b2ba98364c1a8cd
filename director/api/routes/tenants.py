"""Tenant API keys through the admin API: made (the key is shown once, in the answer),
listed (ids and labels, never secrets) and revoked. Keys live hashed in the shared state,
where every regional balancer follows them (``tenants.api_keys``); each change is audited
by key id, never by the key."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request

from director.api.changes import audited
from director.api.deps import Admin, Reader, Runtime
from director.api.errors import ApiError, NotFound
from tenants.api_keys import load_keys, new_key, revoke_key, store_key

router = APIRouter(prefix="/api/v1/tenants", tags=["tenants"])
MAX_LABEL = 200


@router.get("", summary="Tenants of the active policy")
async def list_tenants(runtime: Runtime, _who: Reader) -> dict[str, Any]:
    """Each declared tenant with its weight, priority tier, quota and what it may use."""
    policy = runtime.active.policy
    return {"identity": policy.identity is not None, "tenants": [{
        "name": t.name, "weight": t.weight, "priority": t.priority,
        "quota": {"requests_per_minute": t.quota.requests_per_minute,
                  "input_tokens_per_minute": t.quota.input_tokens_per_minute,
                  "output_tokens_per_minute": t.quota.output_tokens_per_minute,
                  "concurrent": t.quota.concurrent},
        "services": list(t.services), "models": list(t.models), "regions": list(t.regions),
        "redis_down": t.redis_down.value, "reserve": t.reserve,
    } for t in policy.tenants]}


@router.get("/{tenant}/keys", summary="A tenant's API keys (ids and labels)")
async def list_keys(tenant: str, runtime: Runtime, _who: Reader) -> dict[str, Any]:
    keys = await load_keys(runtime.store)
    return {"tenant": tenant, "keys": [k.public() for k in sorted(
        keys.values(), key=lambda k: k.created) if k.tenant == tenant]}


@router.post("/{tenant}/keys", status_code=201, summary="Make an API key for a tenant")
async def create_key(tenant: str, request: Request, runtime: Runtime,
                     who: Admin) -> dict[str, Any]:
    """A new key for a tenant the active policy declares; the answer is the only place the
    key ever appears. Body (optional): ``{"label": "..."}``."""
    if runtime.active.policy.tenant(tenant) is None:
        raise ApiError(f"no tenant '{tenant}' in the active policy", status=422)
    label = await _label(request)
    made = new_key(tenant, label)

    async def change() -> dict[str, Any]:
        durability = await store_key(runtime.store, made.stored)
        return {**made.stored.public(), "key": made.token,
                "durability": durability.to_json()}

    return await audited(runtime, who, "tenant.key.create", tenant,
                         {"id": made.stored.key_id, "label": label}, change())


@router.delete("/{tenant}/keys/{key_id}", summary="Revoke an API key")
async def delete_key(tenant: str, key_id: str, runtime: Runtime,
                     who: Admin) -> dict[str, Any]:
    """Every balancer stops accepting it within a change notification."""
    async def change() -> dict[str, Any]:
        keys = await load_keys(runtime.store)
        if key_id not in keys or keys[key_id].tenant != tenant:
            raise NotFound(f"tenant '{tenant}' has no key '{key_id}'")
        revoked, durability = await revoke_key(runtime.store, key_id)
        return {"revoked": key_id, "tenant": tenant, "existed": revoked is not None,
                "durability": durability.to_json()}

    return await audited(runtime, who, "tenant.key.revoke", tenant, {"id": key_id}, change())


async def _label(request: Request) -> str:
    body = await request.body()
    if not body.strip():
        return ""
    try:
        data = await request.json()
    except ValueError:
        raise ApiError("expected a JSON body {\"label\": \"...\"}") from None
    label = data.get("label", "") if isinstance(data, dict) else None
    if not isinstance(label, str) or len(label) > MAX_LABEL:
        raise ApiError(f"'label' must be a string of at most {MAX_LABEL} characters")
    return label
