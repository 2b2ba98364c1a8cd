# SPDX-License-Identifier: Apache-2.0
"""The tenants a drill sends as: their quotas, their flood rates, and their API keys.

``read_tenants`` reads the running policy's tenants from ``GET /api/v1/tenants`` (a drill
that names a tenant the policy does not declare, or runs against a policy without an
``identity`` block, cannot run); ``flood_rates`` turns each ``tenant.flood`` into requests
per second: ``multiplier`` times ``rate``, or times the tenant's request quota per second.

``TenantKeys`` makes one API key per tenant when the run starts (``POST
/api/v1/tenants/<t>/keys``: the admin API stores it hashed in the shared state, where every
balancer follows it) and revokes them all when it ends, whatever ended it. The keys
themselves live only in memory: the journal names them by id, never by secret.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from drills.admin import AdminClient
from drills.errors import AdminApiError, DrillError
from drills.model import Drill, FaultType

TENANTS = "/api/v1/tenants"


@dataclass(frozen=True)
class TenantInfo:
    """A tenant of the running policy, as the admin API lists it."""

    name: str
    requests_per_minute: float | None = None
    concurrent: int | None = None


async def read_tenants(drill: Drill, admin: AdminClient) -> dict[str, TenantInfo]:
    """The running policy's tenants (empty when the drill names none); raises
    ``DrillError`` when a tenant the drill sends as is not declared there."""
    names = drill.tenant_names
    if not names:
        return {}
    data = await admin.request("GET", TENANTS, log=False)
    if not isinstance(data, dict) or not isinstance(data.get("tenants"), list):
        raise AdminApiError(f"GET {TENANTS}: expected a JSON object with tenants")
    if not data.get("identity"):
        raise DrillError("the running policy has no identity block: its balancers identify "
                         f"no tenant, so the drill cannot send as {', '.join(names)}")
    tenants = {}
    for item in data["tenants"]:
        quota = item.get("quota") or {}
        tenants[str(item["name"])] = TenantInfo(str(item["name"]),
                                                quota.get("requests_per_minute"),
                                                quota.get("concurrent"))
    unknown = [n for n in names if n not in tenants]
    if unknown:
        raise DrillError(f"tenant(s) {', '.join(unknown)} not in the running policy "
                         f"(tenants: {', '.join(tenants) or 'none'})")
    return tenants


def flood_rates(drill: Drill, tenants: Mapping[str, TenantInfo]) -> dict[str, float]:
    """Each ``tenant.flood`` fault's total rate for its tenant, requests per second."""
    rates = {}
    for fault in drill.faults:
        if fault.type is not FaultType.TENANT_FLOOD:
            continue
        name = str(fault.params["tenant"])
        base = fault.params.get("rate")
        if base is None:
            rpm = tenants[name].requests_per_minute if name in tenants else None
            if not rpm:
                raise DrillError(f"fault {fault.id}: tenant {name} has no requests quota to "
                                 "multiply; give params.rate (requests per second)")
            base = rpm / 60.0
        rates[fault.id] = float(fault.params["multiplier"]) * float(base)
    return rates


@dataclass
class TenantKeys:
    """The API keys one run made, by tenant; revoked by ``revoke``."""

    admin: AdminClient
    label: str
    keys: dict[str, str] = field(default_factory=dict)            # tenant -> key (secret)
    made: list[dict[str, Any]] = field(default_factory=list)      # {tenant, id, revoked}

    async def make(self, tenants: Iterable[str]) -> dict[str, str]:
        """One new key per tenant; raises ``AdminApiError`` (the keys made so far stay in
        ``made``, for ``revoke``)."""
        for tenant in tenants:
            # log=False: the answer holds the key, which must not reach the journal
            answer = await self.admin.request("POST", f"{TENANTS}/{tenant}/keys",
                                              {"label": self.label}, log=False)
            if not isinstance(answer, dict) or not isinstance(answer.get("key"), str):
                raise AdminApiError(f"POST {TENANTS}/{tenant}/keys: no key in the answer")
            self.keys[tenant] = answer["key"]
            self.made.append({"tenant": tenant, "id": answer.get("id"), "revoked": False})
        return dict(self.keys)

    async def revoke(self) -> list[str]:
        """Revoke every key made; returns the errors (each key is tried)."""
        errors = []
        for entry in self.made:
            if entry["revoked"]:
                continue
            try:
                await self.admin.request(
                    "DELETE", f"{TENANTS}/{entry['tenant']}/keys/{entry['id']}", log=False)
            except AdminApiError as exc:
                errors.append(f"revoking the drill's key {entry['id']} of tenant "
                              f"{entry['tenant']} failed: {exc}")
                continue
            entry["revoked"] = True
        self.keys.clear()
        return errors
