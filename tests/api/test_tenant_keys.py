"""Tenant API keys through the admin API on a real Valkey: a key is made for a declared
tenant and shown once, listed by id only, accepted by a balancer's key table, revoked; the
audit log names the key id, never the key; only the admin scope changes keys."""

from __future__ import annotations

from pathlib import Path

from api_helpers import ROOT, eventually, running_api

from director.api import PolicyDocument
from state import AsyncStateStore
from tenants.api_keys import KeyTable

TENANTS = ROOT / "policies" / "examples" / "tenants" / "tenants.dp"


async def test_make_list_use_and_revoke_a_key(tmp_path: Path, valkey, prefix: str) -> None:
    document = PolicyDocument.from_file(str(TENANTS))[0]
    balancer_state = AsyncStateStore.from_url(valkey.url, prefix=prefix)
    async with running_api(tmp_path, valkey.url, prefix, document=document) as api, \
            KeyTable(balancer_state, refresh_s=30) as table:
        status, listing = await api.get("/api/v1/tenants", token="read")
        assert status == 200 and listing["identity"] is True
        assert {t["name"] for t in listing["tenants"]} == {"acme", "batch-jobs", "free_tier"}

        status, made = await api.post("/api/v1/tenants/acme/keys",
                                      json_body={"label": "ci runner"})
        assert status == 201, made
        token = made["key"]
        assert token.startswith("dk_") and made["tenant"] == "acme"
        await eventually(lambda: _now(table.check(token) is not None), timeout=5)

        status, keys = await api.get("/api/v1/tenants/acme/keys", token="read")
        assert status == 200
        assert keys["keys"] == [{"id": made["id"], "tenant": "acme", "label": "ci runner",
                                 "created": made["created"]}]
        assert token not in str(keys)

        status, _ = await api.post("/api/v1/tenants/acme/keys", token="read")
        assert status == 403
        status, body = await api.post("/api/v1/tenants/initech/keys")
        assert status == 422 and "initech" in body["error"]

        status, body = await api.call("DELETE", f"/api/v1/tenants/acme/keys/{made['id']}")
        assert status == 200 and body["revoked"] == made["id"]
        await eventually(lambda: _now(table.check(token) is None), timeout=5)
        status, _ = await api.call("DELETE", f"/api/v1/tenants/acme/keys/{made['id']}")
        assert status == 404

        audit = api.audit_lines()
        actions = [(line["action"], line["outcome"]) for line in audit
                   if line["action"].startswith("tenant.key")]
        assert actions == [("tenant.key.create", "ok"), ("tenant.key.revoke", "ok"),
                           ("tenant.key.revoke", "rejected: tenant 'acme' has no key '"
                            f"{made['id']}'")]
        assert token not in Path(api.config.audit_path).read_text()
    await balancer_state.close()


async def _now(value: bool) -> bool:
    return value
