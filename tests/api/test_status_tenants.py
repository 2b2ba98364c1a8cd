"""The status document's tenants section on a real Valkey: per tenant of the policy its
usage over the last hour (from the usage buckets the balancers flush) and its throttling
(from the refusal counters), a tenant the policy no longer declares listed apart, nothing
older than the hour; without tenants the section is empty; with the state down it says so
and the status still answers."""

from __future__ import annotations

import time
from pathlib import Path

from api_helpers import ROOT, running_api

from director.api import PolicyDocument
from state import AsyncStateStore, EmbeddedValkey
from tenants.throttles import ThrottleLedger
from tenants.usage import UsageEvent, UsageKey, UsageLedger

TENANTS = ROOT / "policies" / "examples" / "tenants" / "tenants.dp"


def usage(at: float, tenant: str, inp: int, out: int, *, cancelled: bool = False,
          region: str = "eu-west") -> UsageEvent:
    return UsageEvent(at, UsageKey(tenant, "chat.infer.example.com", "llama-3-8b", region,
                                   "gpu0"), inp, out, cancelled, 0.25)


async def record(store: AsyncStateStore, now: float) -> None:
    ledger = UsageLedger(store)
    ledger.record(usage(now - 30, "acme", 100, 20))
    ledger.record(usage(now - 600, "acme", 50, 10, cancelled=True, region="eu-central"))
    ledger.record(usage(now - 90, "free_tier", 7, 3))
    ledger.record(usage(now - 60, "initech", 1, 1))            # no longer declared
    ledger.record(usage(now - 2 * 3600, "acme", 1000, 1000))  # older than the hour
    await ledger.flush()
    throttles = ThrottleLedger(store)
    for _ in range(3):
        throttles.record("acme", "eu-west", 429, "requests", at=now - 20)
    throttles.record("acme", "eu-central", 429, "output_tokens", at=now - 200)
    throttles.record("acme", "eu-west", 503, "state_unavailable", at=now - 10)
    throttles.record("batch-jobs", "us-east", 429, "concurrent", at=now - 2 * 3600)
    await throttles.flush()


async def test_status_lists_each_tenants_usage_and_throttling(tmp_path: Path,
                                                              valkey: EmbeddedValkey,
                                                              prefix: str) -> None:
    store = AsyncStateStore.from_url(valkey.url, prefix=prefix)
    now = time.time()
    await record(store, now)
    document = PolicyDocument.from_file(str(TENANTS))[0]
    async with running_api(tmp_path, valkey.url, prefix, document=document) as api:
        status, body = await api.get("/api/v1/status", token="read")
    assert status == 200, body
    section = body["tenants"]
    assert section["identity"] is True and section["available"] is True
    assert section["window_s"] == 3600 and section["to"] - section["from"] == 3600
    tenants = {t["name"]: t for t in section["tenants"]}
    assert list(tenants) == ["acme", "batch-jobs", "free_tier", "initech"]
    acme = tenants["acme"]
    assert acme["declared"] and (acme["weight"], acme["priority"]) == (2.0, 1)
    assert acme["quota"] == {"requests_per_minute": 600.0,
                             "input_tokens_per_minute": 200_000.0,
                             "output_tokens_per_minute": 100_000.0, "concurrent": 16,
                             "requests_burst": 600.0, "input_tokens_burst": 200_000.0,
                             "output_tokens_burst": 100_000.0}
    assert acme["usage"] == {"requests": 2, "input_tokens": 150, "output_tokens": 30,
                             "cancelled": 1, "gpu_seconds": 0.5}
    assert acme["throttled"] == {"over_quota": 4, "state_unavailable": 1,
                                 "by_limit": {"output_tokens": 1, "requests": 3}}
    batch = tenants["batch-jobs"]
    assert batch["usage"]["requests"] == 0 and batch["throttled"]["over_quota"] == 0
    assert tenants["free_tier"]["usage"]["input_tokens"] == 7
    assert tenants["free_tier"]["quota"]["requests_per_minute"] == 50.0  # 3000/h
    assert tenants["free_tier"]["quota"]["requests_burst"] == 100.0  # burst 100
    assert tenants["batch-jobs"]["quota"]["requests_burst"] == 10.0  # 10/s: ten at once
    initech = tenants["initech"]
    assert not initech["declared"] and initech["quota"] is None
    assert initech["usage"]["requests"] == 1
    await store.close()


async def test_a_policy_without_tenants_has_an_empty_section(tmp_path: Path,
                                                             valkey: EmbeddedValkey,
                                                             prefix: str) -> None:
    store = AsyncStateStore.from_url(valkey.url, prefix=prefix)
    await record(store, time.time())
    async with running_api(tmp_path, valkey.url, prefix) as api:
        status, body = await api.get("/api/v1/status", token="read")
    assert status == 200
    assert body["tenants"]["identity"] is False and body["tenants"]["tenants"] == []
    await store.close()


async def test_with_the_state_down_the_section_says_so(tmp_path: Path) -> None:
    document = PolicyDocument.from_file(str(TENANTS))[0]
    with EmbeddedValkey() as own:
        async with running_api(tmp_path, own.url, "down", document=document) as api:
            own.stop()
            started = time.monotonic()
            status, body = await api.get("/api/v1/status", token="read")
            took = time.monotonic() - started
    assert status == 200 and took < 10
    section = body["tenants"]
    assert section["available"] is False and section["error"]
    assert [t["name"] for t in section["tenants"]] == ["acme", "batch-jobs", "free_tier"]
    assert all(t["usage"]["requests"] == 0 for t in section["tenants"])
