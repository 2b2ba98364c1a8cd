"""Tenant identity at a real balancer in front of simulated GPU servers, with its API keys
in a real Valkey: no or bad credentials get 401 with an OpenAI-style body and never reach a
GPU; a good key or JWT streams; a tenant outside its services, models or regions gets 403;
director's credential is not forwarded; a policy without ``identity`` serves everyone as
before; JWTs before the first JWKS answer get 503, not 401."""

from __future__ import annotations

import asyncio
import dataclasses
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import web
from app_server import recording_gpu, serving
from jwt_helpers import AUDIENCE, ISSUER, jwks, rsa_signer, write_jwks

from policies.model import Identity, JwtIdentity, Policy, Tenant
from regions.balancer import BackendSpec, BalancerConfig, SharedStateConfig, build_balancer
from state import AsyncStateStore, EmbeddedValkey
from tenants.api_keys import new_key, store_key
from tests.balancer.helpers import MODEL, admin_client, completion, stack
from tests.run_clock import eventually

SIGNER = rsa_signer()


def tenant_policy(base: Policy, jwks: Path | None = None) -> Policy:
    jwt = JwtIdentity(str(jwks), ISSUER, AUDIENCE) if jwks is not None else None
    return dataclasses.replace(base, identity=Identity(api_keys=True, jwt=jwt), tenants=(
        Tenant("acme"),
        Tenant("narrow", models=("another-model",)),
        Tenant("chat-only", services=("chat.infer.example.com",)),
    ))


def prompts_seen(fleet) -> int:
    return sum(server.engine.state().counters.prompt_tokens for server in fleet)


@pytest.fixture
def shared(valkey: EmbeddedValkey, prefix: str) -> SharedStateConfig:
    return SharedStateConfig(valkey.url, prefix=prefix)


async def test_credentials_decide_who_is_served(example_policy: Policy, tmp_path: Path,
                                                shared: SharedStateConfig) -> None:
    policy = tenant_policy(example_policy, write_jwks(tmp_path / "jwks.json", SIGNER))
    keys = {name: new_key(name) for name in ("acme", "narrow", "chat-only")}
    admin = AsyncStateStore.from_url(shared.url, prefix=shared.prefix)
    for made in keys.values():
        await store_key(admin, made.stored)
    await admin.close()
    async with stack(time_scale=20.0, shared_state=shared, policy=policy) as (
            fleet, balancer, client):
        for headers, reason in [({}, "missing"),
                                ({"Authorization": "Bearer dk_0123456789ab_" + "x" * 43},
                                 "invalid_key"),
                                ({"Authorization": f"Bearer {SIGNER.token(exp=-60)}"},
                                 "expired")]:
            async with client.post("/v1/completions", json=completion(5),
                                   headers=headers) as resp:
                assert resp.status == 401
                assert resp.headers["WWW-Authenticate"] == "Bearer"
                error = (await resp.json())["error"]
                assert error["code"] == "invalid_api_key" and error["type"] == (
                    "invalid_request_error")
            assert balancer.metrics.auth_refused.labels(reason)._value.get() == 1
        assert prompts_seen(fleet) == 0  # nothing refused reached a GPU

        for headers in ({"Authorization": f"Bearer {keys['acme'].token}"},
                        {"api-key": keys["acme"].token},
                        {"Authorization": f"Bearer {SIGNER.token(tenant='acme')}"}):
            async with client.post("/v1/completions", json=completion(5),
                                   headers=headers) as resp:
                assert resp.status == 200
                body = await resp.read()
                assert body.endswith(b"data: [DONE]\n\n")
        assert prompts_seen(fleet) > 0

        narrow = {"Authorization": f"Bearer {keys['narrow'].token}"}
        async with client.post("/v1/completions", json=completion(5), headers=narrow) as resp:
            assert resp.status == 403
            assert (await resp.json())["error"]["code"] == "model_not_allowed"
        chat_only = {"Authorization": f"Bearer {keys['chat-only'].token}"}
        async with client.post("/v1/completions", json=completion(5),
                               headers=chat_only) as resp:
            assert resp.status == 403  # the balancer's address names no service
            assert (await resp.json())["error"]["code"] == "service_not_allowed"
        async with client.post("/v1/completions", json=completion(5),
                               headers={**chat_only, "Host": "chat.infer.example.com"}) as resp:
            assert resp.status == 200
            await resp.read()


async def test_the_credential_is_not_forwarded_to_the_gpu(example_policy: Policy,
                                                          shared: SharedStateConfig) -> None:
    """A recording stand-in for a GPU server sees the request without director's key."""
    made = new_key("acme")
    admin = AsyncStateStore.from_url(shared.url, prefix=shared.prefix)
    await store_key(admin, made.stored)
    await admin.close()
    seen: list[dict[str, str]] = []

    async def record(request: web.Request) -> None:
        seen.append(dict(request.headers))

    async with serving(recording_gpu(record)) as url:
        balancer = build_balancer(
            "r",
            [BackendSpec("rec", url, (MODEL,), 4)],
            BalancerConfig(
                scrape_every_s=0, shared_state=shared, policy=tenant_policy(example_policy)
            ),
        )
        async with balancer, aiohttp.ClientSession(base_url=balancer.url) as client, \
                client.post("/v1/completions", json=completion(3, stream=False),
                            headers={"Authorization": f"Bearer {made.token}",
                                     "x-other": "kept"}) as resp:
            assert resp.status == 200, await resp.text()
    assert len(seen) == 1
    lower = {k.lower(): v for k, v in seen[0].items()}
    assert "authorization" not in lower and "api-key" not in lower
    assert lower["x-other"] == "kept"


async def test_without_identity_everyone_is_served_as_before(example_policy: Policy) -> None:
    async with stack(time_scale=20.0, policy=example_policy) as (_fleet, balancer, client):
        assert not balancer.tenancy.enabled
        async with client.post("/v1/completions", json=completion(5)) as resp:
            assert resp.status == 200
            await resp.read()


async def test_a_followed_policy_turns_identity_on(example_policy: Policy,
                                                   shared: SharedStateConfig) -> None:
    async with stack(time_scale=20.0, shared_state=shared, policy=example_policy) as (
            _fleet, balancer, client):
        balancer.tenancy.apply_policy(tenant_policy(example_policy))
        async with client.post("/v1/completions", json=completion(5)) as resp:
            assert resp.status == 401
        made = new_key("acme")
        admin = AsyncStateStore.from_url(shared.url, prefix=shared.prefix)
        await store_key(admin, made.stored)
        await admin.close()
        await eventually(lambda: balancer.tenancy.keys is not None and
                         made.stored.key_id in balancer.tenancy.keys.keys)
        async with client.post("/v1/completions", json=completion(5), headers={
                "Authorization": f"Bearer {made.token}"}) as resp:
            assert resp.status == 200
            await resp.read()



async def test_tenants_make_the_balancer_hold_at_capacity_for_the_fair_share(
        example_policy: Policy) -> None:
    async with stack(time_scale=20.0, policy=example_policy) as (_fleet, balancer, _client):
        assert not balancer.pool.capacity_config.late_binding
        balancer.tenancy.apply_policy(tenant_policy(example_policy))
        assert balancer.pool.capacity_config.late_binding
        assert balancer.pool.capacity_config.provisional  # until a capacity is learned
        assert all(b.capacity.config.late_binding for b in balancer.pool)
        balancer.tenancy.apply_policy(example_policy)
        assert not balancer.pool.capacity_config.late_binding
        assert not balancer.pool.capacity_config.provisional


async def test_a_tenants_tier_reaches_an_engine_that_schedules_by_priority(
        example_policy: Policy, shared: SharedStateConfig) -> None:
    """Only a GPU server declared ``scheduling priority`` gets vLLM's field, negated."""
    made = new_key("vip")
    admin = AsyncStateStore.from_url(shared.url, prefix=shared.prefix)
    await store_key(admin, made.stored)
    await admin.close()
    bodies: dict[str, list[dict]] = {"fcfs": [], "prio": []}

    def recorder(name: str) -> web.Application:
        async def record(request: web.Request) -> None:
            bodies[name].append(await request.json())
        return recording_gpu(record)

    policy = dataclasses.replace(example_policy, identity=Identity(),
                                 tenants=(Tenant("vip", priority=3),))
    async with serving(recorder("fcfs")) as fcfs, serving(recorder("prio")) as prio:
        backends = [BackendSpec("fcfs", fcfs, (MODEL,), 4),
                    BackendSpec("prio", prio, (MODEL,), 4, priority_scheduling=True)]
        balancer = build_balancer(
            "r", backends, BalancerConfig(scrape_every_s=0, shared_state=shared, policy=policy)
        )
        async with balancer, aiohttp.ClientSession(base_url=balancer.url) as client:
            for _ in range(6):
                async with client.post("/v1/completions", json=completion(3, stream=False),
                                       headers={"Authorization": f"Bearer {made.token}"}
                                       ) as resp:
                    assert resp.status == 200
    assert bodies["fcfs"] and bodies["prio"]
    assert all("priority" not in body for body in bodies["fcfs"])
    assert all(body["priority"] == -3 for body in bodies["prio"])


async def test_a_tenant_is_served_only_in_its_regions(example_policy: Policy,
                                                      shared: SharedStateConfig) -> None:
    """At the eu-west balancer: a tenant limited to another region gets 403 and never
    reaches the GPU; a tenant listing eu-west, and one without regions, are served."""
    policy = dataclasses.replace(example_policy, identity=Identity(), tenants=(
        Tenant("us-only", regions=("us-east",)),
        Tenant("eu", regions=("eu-central", "eu-west")),
        Tenant("anywhere"),
    ))
    keys = {t.name: new_key(t.name) for t in policy.tenants}
    admin = AsyncStateStore.from_url(shared.url, prefix=shared.prefix)
    for made in keys.values():
        await store_key(admin, made.stored)
    await admin.close()
    seen: list[str] = []

    async def record(request: web.Request) -> None:
        seen.append(request.path)

    async with serving(recording_gpu(record)) as url:
        balancer = build_balancer(
            "eu-west",
            [BackendSpec("rec", url, (MODEL,), 4)],
            BalancerConfig(scrape_every_s=0, shared_state=shared, policy=policy),
        )
        async with balancer, aiohttp.ClientSession(base_url=balancer.url) as client:
            def post(name: str) -> Any:
                return client.post("/v1/completions", json=completion(3, stream=False),
                                   headers={"Authorization": f"Bearer {keys[name].token}"})

            async with post("us-only") as resp:
                assert resp.status == 403
                assert "WWW-Authenticate" not in resp.headers
                error = (await resp.json())["error"]
            assert error == {
                "message": "Tenant 'us-only' may not be served in region 'eu-west' (it may "
                           "be served in us-east).",
                "type": "invalid_request_error", "param": None, "code": "region_not_allowed"}
            assert balancer.metrics.auth_refused.labels("region")._value.get() == 1
            assert seen == []  # the refused request never reached the GPU
            for name in ("eu", "anywhere"):
                async with post(name) as resp:
                    assert resp.status == 200, await resp.text()
            assert len(seen) == 2
            assert balancer.metrics.auth_refused.labels("region")._value.get() == 1
            async with admin_client(balancer) as adm, adm.get("/metrics") as resp:
                metrics = await resp.text()
            assert 'director_balancer_auth_refused_total{reason="region"} 1.0' in metrics


async def test_jwts_wait_for_a_first_key_set_with_503_never_401(example_policy: Policy) -> None:
    """The JWKS URL is fetched in the background: until it has answered once, a JWT cannot
    be checked, which is the balancer's problem (503), not the caller's (401); once it
    answers, the same token streams."""
    answer = {"status": 503}

    async def jwks_url(_request: web.Request) -> web.Response:
        if answer["status"] != 200:
            return web.Response(status=answer["status"])
        return web.json_response(jwks(SIGNER))

    app = web.Application()
    app.router.add_get("/jwks.json", jwks_url)
    async with serving(app) as base:
        policy = dataclasses.replace(tenant_policy(example_policy), identity=Identity(
            api_keys=False, jwt=JwtIdentity(f"{base}/jwks.json", ISSUER, AUDIENCE)))
        async with stack(time_scale=20.0, policy=policy) as (_fleet, balancer, client):
            verifier = balancer.tenancy.identifier.verifier
            verifier.jwks.min_fetch_s = 0.0  # a lookup missing its key asks for a fetch now
            await eventually(lambda: verifier.jwks.fetches >= 1)  # started with the balancer
            headers = {"Authorization": f"Bearer {SIGNER.token(tenant='acme')}"}
            async with client.post("/v1/completions", json=completion(5),
                                   headers=headers) as resp:
                assert resp.status == 503
                assert (await resp.json())["error"]["code"] == "jwks_unavailable"
            assert balancer.metrics.auth_refused.labels("jwks_unavailable")._value.get() == 1
            answer["status"] = 200

            async def served() -> bool:
                async with client.post("/v1/completions", json=completion(5),
                                       headers=headers) as resp:
                    await resp.read()
                    return resp.status == 200

            async with asyncio.timeout(10):
                while not await served():
                    await asyncio.sleep(0.05)


async def test_models_need_a_tenant_and_list_only_its_models(example_policy: Policy,
                                                             shared: SharedStateConfig) -> None:
    """With API keys on, ``/v1/models`` is a route like the others: 401 without a valid
    key, and a tenant limited to some models sees only those."""
    policy = tenant_policy(example_policy)
    keys = {name: new_key(name) for name in ("acme", "narrow")}
    admin = AsyncStateStore.from_url(shared.url, prefix=shared.prefix)
    for made in keys.values():
        await store_key(admin, made.stored)
    await admin.close()
    async with stack(time_scale=20.0, shared_state=shared, policy=policy) as (
            _fleet, _balancer, client):
        for headers in ({}, {"Authorization": "Bearer dk_0123456789ab_" + "x" * 43}):
            async with client.get("/v1/models", headers=headers) as resp:
                assert resp.status == 401
                assert (await resp.json())["error"]["code"] == "invalid_api_key"
        seen = {}
        for name, made in keys.items():
            headers = {"Authorization": f"Bearer {made.token}"}
            async with client.get("/v1/models", headers=headers) as resp:
                assert resp.status == 200
                seen[name] = [m["id"] for m in (await resp.json())["data"]]
        assert seen == {"acme": [MODEL], "narrow": []}  # narrow may use another-model only
