"""Usage through the admin API: summed rows as JSON and CSV for a tenant and a range, and
the usage log page by page; a bad range is refused."""

from __future__ import annotations

import time
from pathlib import Path

from api_helpers import running_api

from state import AsyncStateStore
from tenants.usage import UsageEvent, UsageKey, UsageLedger
from tenants.usage_log import log_lag


async def test_usage_as_json_csv_and_log(tmp_path: Path, valkey, prefix: str) -> None:
    store = AsyncStateStore.from_url(valkey.url, prefix=prefix)
    ledger = UsageLedger(store)
    now = time.time()
    for n, tenant in enumerate(("acme", "acme", "globex")):
        ledger.record(UsageEvent(now - 30, UsageKey(tenant, "chat.infer.example.com", "m",
                                                    "eu-west", "gpu0"), 10 + n, 5, False,
                                 0.25, f"r{n}"))
    await ledger.flush()
    async with running_api(tmp_path, valkey.url, prefix) as api:
        status, body = await api.get(f"/api/v1/usage?tenant=acme&from={now - 120}"
                                     f"&to={now + 60}", token="read")
        assert status == 200, body
        assert [(r["tenant"], r["requests"], r["input_tokens"]) for r in body["rows"]] == [
            ("acme", 2, 21)]
        status, text = await api.get(f"/api/v1/usage?from={now - 120}&format=csv",
                                     token="read")
        assert status == 200
        lines = text.strip().splitlines()
        assert lines[0].startswith("tenant,service,model") and len(lines) == 3
        status, page = await api.get("/api/v1/usage/log?count=2", token="read")
        assert status == 200 and [e["request_id"] for e in page["entries"]] == ["r0", "r1"]
        status, rest = await api.get(f"/api/v1/usage/log?after={page['next']}", token="read")
        assert [e["request_id"] for e in rest["entries"]] == ["r2"]
        # a reader that names itself is followed: how far it has read, and its lag
        status, _ = await api.get("/api/v1/usage/log?consumer=billing", token="read")
        assert status == 200
        assert (await log_lag(store)).consumers["billing"] > 0  # nothing read yet
        status, _ = await api.get(f"/api/v1/usage/log?consumer=billing&after={rest['next']}",
                                  token="read")
        assert status == 200 and (await log_lag(store)).consumers["billing"] == 0
        status, _ = await api.get("/api/v1/usage/log?consumer=bad%20name", token="read")
        assert status == 422
        status, text = await api.get("/metrics", token=None)
        assert "director_usage_log_retention_seconds 86400.0" in text
        status, body = await api.get(f"/api/v1/usage?from={now}&to={now - 10}", token="read")
        assert status == 422
        status, _ = await api.get("/api/v1/usage", token=None)
        assert status == 401
    await store.close()
