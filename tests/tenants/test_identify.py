"""Identifying tenants (``tenants.identify``): API keys kept hashed in a real Valkey and
followed by every balancer's key table, and JWTs verified against a JWKS file with real
RSA and EC signatures (a JWKS URL: test_jwks_fetch.py): good, expired, wrong or missing
audience and issuer, wrong signature, unknown key, ``alg`` tricks, unknown tenants."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import hmac
import json
import os
import time
from pathlib import Path

import jwt
import pytest
from jwt_helpers import AUDIENCE, ISSUER, ec_signer, jwks, rsa_signer, write_jwks

from policies.model import Identity, JwtIdentity, Tenant
from state import AsyncStateStore, EmbeddedValkey
from tenants.api_keys import (
    KeyTable,
    check,
    load_keys,
    new_key,
    revoke_key,
    split_token,
    store_key,
)
from tenants.identify import Identified, Identifier, Refused, credential
from tenants.jwt_auth import JwtVerifier

TENANTS = {"acme": Tenant("acme"), "globex": Tenant("globex", weight=2.0)}
RSA = rsa_signer()
EC = ec_signer()
STRANGER = rsa_signer("rsa-1")  # same kid as RSA, another key: a forged signature


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def test_a_key_is_shown_once_and_kept_only_as_a_hash() -> None:
    made = new_key("acme", "ci")
    key_id, secret = split_token(made.token)
    assert key_id == made.stored.key_id and len(secret) == 43
    assert secret not in made.stored.to_json() and made.token not in made.stored.to_json()
    assert "digest" not in made.stored.public()
    keys = {key_id: made.stored}
    assert check(made.token, keys) == made.stored
    wrong = made.token[:-1] + ("A" if made.token[-1] != "A" else "B")
    assert check(wrong, keys) is None
    assert check(f"dk_{key_id}_short", keys) is None
    assert check(new_key("acme").token, keys) is None  # an id nobody stored


def test_credentials_come_from_bearer_or_api_key_headers() -> None:
    assert credential({"Authorization": "Bearer abc"}) == "abc"
    assert credential({"authorization": "bearer  abc "}) == "abc"
    assert credential({"api-key": "abc"}) == "abc"
    assert credential({"Authorization": "Basic abc"}) is None
    assert credential({"Authorization": "Bearer "}) is None
    assert credential({}) is None


async def test_keys_in_valkey_identify_on_every_balancer_and_revocation_reaches_them(
        valkey: EmbeddedValkey, prefix: str) -> None:
    admin = AsyncStateStore.from_url(valkey.url, prefix=prefix)
    balancers = [AsyncStateStore.from_url(valkey.url, prefix=prefix) for _ in range(2)]
    made = new_key("acme", "laptop")
    other = new_key("removed-tenant")
    try:
        async with KeyTable(balancers[0], refresh_s=30) as one, \
                KeyTable(balancers[1], refresh_s=30) as two:
            identifiers = [Identifier(Identity(), TENANTS, table.check, None)
                           for table in (one, two)]
            for who in identifiers:
                refused = await who.identify(bearer(made.token))
                assert isinstance(refused, Refused) and refused.reason == "invalid_key"
            await store_key(admin, made.stored)
            await store_key(admin, other.stored)
            assert (await load_keys(admin))[made.stored.key_id] == made.stored
            await _until(lambda: all(k.stored.key_id in table.keys for k in (made, other)
                                     for table in (one, two)))
            for who in identifiers:
                found = await who.identify(bearer(made.token))
                assert isinstance(found, Identified)
                assert (found.tenant.name, found.via, found.credential) == (
                    "acme", "api-key", made.stored.key_id)
                gone = await who.identify({"api-key": other.token})
                assert isinstance(gone, Refused) and gone.reason == "unknown_tenant"
            assert (await revoke_key(admin, made.stored.key_id))[0] == made.stored
            assert (await revoke_key(admin, made.stored.key_id))[0] is None
            await _until(lambda: made.stored.key_id not in one.keys and
                         made.stored.key_id not in two.keys)
            refused = await identifiers[1].identify(bearer(made.token))
            assert isinstance(refused, Refused) and refused.reason == "invalid_key"
    finally:
        for store in (admin, *balancers):
            await store.close()


async def test_the_key_table_keeps_serving_its_last_keys_when_the_state_is_gone() -> None:
    made = new_key("acme")
    with EmbeddedValkey() as own:
        store = AsyncStateStore.from_url(own.url, prefix="keys")
        await store_key(store, made.stored)
        table = KeyTable(store, refresh_s=30)
        assert await table.refresh()
        own.stop()
        assert not await table.refresh()
        assert table.check(made.token) == made.stored
        await store.close()


async def test_an_unreadable_stored_key_is_left_out(valkey: EmbeddedValkey,
                                                     prefix: str) -> None:
    store = AsyncStateStore.from_url(valkey.url, prefix=prefix)
    made = new_key("acme")
    await store_key(store, made.stored)
    await store.client.hset(store.keys.tenant_keys, "0123456789ab", "not json")
    assert list(await load_keys(store)) == [made.stored.key_id]
    await store.close()


def _verifier(path: Path, **changes: object) -> JwtVerifier:
    config = JwtIdentity(str(path), issuer=ISSUER, audience=AUDIENCE)
    for name, value in changes.items():
        config = JwtIdentity(**{**config.__dict__, name: value})
    return JwtVerifier(config)


@pytest.mark.parametrize(("token", "reason"), [
    (lambda: RSA.token(exp=-120), "expired"),
    (lambda: RSA.token(aud="someone-else"), "audience"),
    (lambda: RSA.token(aud=None), "audience"),
    (lambda: RSA.token(iss=None), "issuer"),
    (lambda: RSA.token(iss="https://evil.example.com"), "issuer"),
    (lambda: STRANGER.token(), "signature"),
    (lambda: RSA.token(kid="rotated-away"), "unknown_key"),
    (lambda: RSA.token(exp=None), "invalid"),
    (lambda: RSA.token(tenant=None), "no_tenant"),
    (lambda: RSA.token(tenant="initech"), "unknown_tenant"),
    (lambda: "not.a.jwt", "malformed"),
])
async def test_bad_tokens_are_refused_with_their_reason(tmp_path: Path, token,
                                                         reason: str) -> None:
    verifier = _verifier(write_jwks(tmp_path / "jwks.json", RSA, EC))
    who = Identifier(Identity(jwt=verifier.config), TENANTS, None, verifier)
    refused = await who.identify(bearer(token()))
    assert isinstance(refused, Refused), refused
    assert refused.reason == reason, refused.message


async def test_good_tokens_identify_their_tenant(tmp_path: Path) -> None:
    verifier = _verifier(write_jwks(tmp_path / "jwks.json", RSA, EC))
    who = Identifier(Identity(jwt=verifier.config), TENANTS, None, verifier)
    for token in (RSA.token(), EC.token(tenant="globex")):
        found = await who.identify(bearer(token))
        assert isinstance(found, Identified), found
        assert found.via == "jwt" and found.credential == "user-1"
    leeway = _verifier(tmp_path / "jwks.json", leeway=60.0)
    found = await Identifier(Identity(jwt=leeway.config), TENANTS, None,
                             leeway).identify(bearer(RSA.token(exp=-5)))
    assert isinstance(found, Identified)
    org = _verifier(tmp_path / "jwks.json", tenant_claim="org")
    found = await Identifier(Identity(jwt=org.config), TENANTS, None,
                             org).identify(bearer(RSA.token(claim="org", tenant="acme")))
    assert isinstance(found, Identified) and found.tenant.name == "acme"


async def test_alg_none_and_hmac_with_the_public_key_are_refused(tmp_path: Path) -> None:
    verifier = _verifier(write_jwks(tmp_path / "jwks.json", RSA))
    who = Identifier(Identity(jwt=verifier.config), TENANTS, None, verifier)
    claims = {"tenant": "acme", "exp": int(time.time()) + 300, "aud": AUDIENCE, "iss": ISSUER}
    unsigned = jwt.encode(claims, None, algorithm="none", headers={"kid": "rsa-1"})
    public_pem = jwks(RSA)["keys"][0]["n"].encode()
    header = base64.urlsafe_b64encode(json.dumps(
        {"alg": "HS256", "kid": "rsa-1", "typ": "JWT"}).encode()).rstrip(b"=").decode()
    payload = base64.urlsafe_b64encode(json.dumps(claims).encode()).rstrip(b"=").decode()
    signature = base64.urlsafe_b64encode(hmac.new(
        public_pem, f"{header}.{payload}".encode(), hashlib.sha256).digest()).rstrip(b"=")
    confused = f"{header}.{payload}.{signature.decode()}"
    ps = jwt.encode(claims, RSA.private, algorithm="PS256", headers={"kid": "rsa-1"})
    for token in (unsigned, confused, ps):  # PS256: not the key's declared RS256
        refused = await who.identify(bearer(token))
        assert isinstance(refused, Refused) and refused.reason == "algorithm", refused


async def test_a_jwks_file_rotation_is_picked_up(tmp_path: Path) -> None:
    path = write_jwks(tmp_path / "jwks.json", RSA)
    verifier = _verifier(path)
    who = Identifier(Identity(jwt=verifier.config), TENANTS, None, verifier)
    assert isinstance(await who.identify(bearer(EC.token())), Refused)
    await asyncio.sleep(0.01)
    write_jwks(path, RSA, EC)
    os.utime(path, (time.time() + 5, time.time() + 5))
    assert isinstance(await who.identify(bearer(EC.token())), Identified)


async def test_an_identifier_without_jwt_refuses_tokens_and_without_keys_refuses_keys(
        ) -> None:
    made = new_key("acme")
    keys_only = Identifier(Identity(), TENANTS, lambda token: check(token, {
        made.stored.key_id: made.stored}), None)
    refused = await keys_only.identify(bearer(RSA.token()))
    assert isinstance(refused, Refused) and refused.reason == "jwt_disabled"
    refused = await keys_only.identify(bearer("sk-something"))
    assert isinstance(refused, Refused) and refused.reason == "malformed"
    refused = await keys_only.identify({})
    assert isinstance(refused, Refused) and refused.reason == "missing"
    no_keys = Identifier(Identity(api_keys=False), TENANTS, None, None)
    refused = await no_keys.identify(bearer(made.token))
    assert isinstance(refused, Refused) and refused.reason == "keys_disabled"


async def _until(condition, timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        await asyncio.sleep(0.01)
