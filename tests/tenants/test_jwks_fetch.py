"""A JWKS URL is followed off the request path (``tenants.jwt_auth.Jwks``), against real
HTTP servers on loopback: fetched in the background at start, on an interval and early for
an unknown key id (at most once a ``min_fetch_s``); a redirect, an oversize body, an error
or a key set without keys never replaces the last good set; a server that hangs never
delays a request. The policy language allows only https URLs; ``Jwks`` itself fetches the
plain http these loopback servers speak."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import pytest
from aiohttp import web
from app_server import serving
from jwt_helpers import AUDIENCE, ISSUER, ec_signer, jwks, rsa_signer

from policies.model import Identity, JwtIdentity, Tenant
from tenants.identify import Identified, Identifier, Refused
from tenants.jwt_auth import JwtVerifier

TENANTS = {"acme": Tenant("acme")}
RSA = rsa_signer()
EC = ec_signer()
PATIENCE = 5.0  # generous: what a request must never wait for is an unbounded fetch


class JwksServer:
    """What ``/jwks.json`` answers, switchable by the test: a handler per state."""

    def __init__(self) -> None:
        self.answer: Any = jwks(RSA)
        self.hits: list[str] = []
        self.release = asyncio.Event()  # a hanging answer waits for it

    async def handle(self, request: web.Request) -> web.StreamResponse:
        self.hits.append(request.path)
        answer = self.answer
        if callable(answer):
            return await answer(request)
        return web.json_response(answer)


@asynccontextmanager
async def jwks_server() -> AsyncIterator[tuple[JwksServer, str]]:
    server = JwksServer()
    app = web.Application()
    app.router.add_get("/jwks.json", server.handle)
    app.router.add_get("/elsewhere.json", server.handle)
    async with serving(app) as base:
        yield server, base


@asynccontextmanager
async def verifier_for(url: str, **jwks_settings: float) -> AsyncIterator[JwtVerifier]:
    verifier = JwtVerifier(JwtIdentity(url, issuer=ISSUER, audience=AUDIENCE))
    for name, value in jwks_settings.items():
        setattr(verifier.jwks, name, value)
    verifier.start()
    try:
        yield verifier
    finally:
        await verifier.aclose()


async def identify(verifier: JwtVerifier, token: str) -> Identified | Refused:
    who = Identifier(Identity(jwt=verifier.config), TENANTS, None, verifier)
    return await asyncio.wait_for(who.identify({"Authorization": f"Bearer {token}"}),
                                  PATIENCE)


async def until(condition, timeout: float = PATIENCE) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not condition():
        assert asyncio.get_running_loop().time() < deadline, "timed out"
        await asyncio.sleep(0.01)


async def test_fetched_at_start_and_again_for_an_unknown_key_id() -> None:
    async with jwks_server() as (server, base), verifier_for(
            f"{base}/jwks.json", min_fetch_s=0.0) as verifier:
        assert await verifier.jwks.ready(PATIENCE)
        assert isinstance(await identify(verifier, RSA.token()), Identified)
        assert isinstance(await identify(verifier, RSA.token()), Identified)
        assert len(server.hits) == 1  # lookups read the loaded set
        server.answer = jwks(RSA, EC)  # the issuer rotates in a new key
        first = await identify(verifier, EC.token())  # answered at once, from the old set
        assert isinstance(first, Refused) and first.reason == "unknown_key"
        await until(lambda: len(server.hits) == 2)  # ... which asked for an early fetch
        await until(lambda: verifier.jwks.key(EC.kid) is not None)
        assert isinstance(await identify(verifier, EC.token()), Identified)


async def test_unknown_key_ids_fetch_at_most_once_a_min_fetch_interval() -> None:
    async with jwks_server() as (server, base), verifier_for(
            f"{base}/jwks.json", min_fetch_s=60.0) as verifier:
        assert await verifier.jwks.ready(PATIENCE)
        for n in range(50):
            refused = await identify(verifier, RSA.token(kid=f"made-up-{n}"))
            assert isinstance(refused, Refused) and refused.reason == "unknown_key"
        await asyncio.sleep(0.2)
        assert len(server.hits) == 1


async def test_a_redirect_is_not_followed() -> None:
    async def redirect(_request: web.Request) -> web.StreamResponse:
        raise web.HTTPFound("/elsewhere.json")

    async with jwks_server() as (server, base):
        server.answer = redirect
        async with verifier_for(f"{base}/jwks.json") as verifier:
            await until(lambda: verifier.jwks.fetches == 1)
            assert not verifier.jwks.loaded
            assert "redirects are not followed" in (verifier.jwks.last_error or "")
            refused = await identify(verifier, RSA.token())
            assert isinstance(refused, Refused) and refused.reason == "jwks_unavailable"
        assert server.hits == ["/jwks.json"]


@pytest.mark.parametrize("declared", [True, False], ids=["content-length", "chunked"])
async def test_an_oversize_key_set_is_refused_and_the_last_good_one_kept(
        declared: bool) -> None:
    good = jwks(RSA)
    padded = json.dumps({**good, "padding": "x" * (1 << 20)}).encode()  # valid, but 1 MiB+

    async def oversize(request: web.Request) -> web.StreamResponse:
        if declared:
            return web.Response(body=padded, content_type="application/json")
        response = web.StreamResponse(headers={"Content-Type": "application/json"})
        response.enable_chunked_encoding()
        await response.prepare(request)
        for start in range(0, len(padded), 64 * 1024):
            await response.write(padded[start:start + 64 * 1024])
        await response.write_eof()
        return response

    async with jwks_server() as (server, base), verifier_for(
            f"{base}/jwks.json", min_fetch_s=0.0) as verifier:
        assert await verifier.jwks.ready(PATIENCE)
        server.answer = oversize
        await identify(verifier, EC.token())  # an unknown key id: fetch now
        await until(lambda: verifier.jwks.fetches == 2)
        # without a Content-Length the body is counted while it is read
        said = "answer of" if declared else "answer is over the limit"
        assert said in (verifier.jwks.last_error or ""), verifier.jwks.last_error
        assert verifier.jwks.key(EC.kid) is None
        assert isinstance(await identify(verifier, RSA.token()), Identified)


async def test_errors_and_empty_key_sets_keep_the_last_good_one() -> None:
    async def broken(_request: web.Request) -> web.StreamResponse:
        return web.Response(status=500, text="upstream down")

    async def not_json(_request: web.Request) -> web.StreamResponse:
        return web.Response(text="<html>login</html>", content_type="text/html")

    async with jwks_server() as (server, base), verifier_for(
            f"{base}/jwks.json", min_fetch_s=0.0) as verifier:
        assert await verifier.jwks.ready(PATIENCE)
        for answer in (broken, not_json, {"keys": []}, {"keys": [{"kty": "oct", "k": "c2VjcmV0",
                                                                  "kid": "hmac"}]}):
            server.answer = answer
            fetched = verifier.jwks.fetches
            await identify(verifier, EC.token())  # an unknown key id: fetch now
            await until(lambda fetched=fetched: verifier.jwks.fetches > fetched)
            assert verifier.jwks.last_error, answer
            assert isinstance(await identify(verifier, RSA.token()), Identified), answer


async def test_a_hanging_jwks_server_never_delays_a_request() -> None:
    async def hang(request: web.Request) -> web.StreamResponse:
        await server.release.wait()
        return web.json_response(jwks(RSA, EC))

    async with jwks_server() as (server, base):
        async with verifier_for(f"{base}/jwks.json", min_fetch_s=0.0) as verifier:
            assert await verifier.jwks.ready(PATIENCE)
            server.answer = hang
            await identify(verifier, EC.token())  # starts a fetch that hangs
            await until(lambda: len(server.hits) == 2)
            for _ in range(20):  # each answered while the fetch still hangs
                assert isinstance(await identify(verifier, RSA.token()), Identified)
                refused = await identify(verifier, EC.token())
                assert isinstance(refused, Refused) and refused.reason == "unknown_key"
            assert not server.release.is_set()
            server.release.set()
            await until(lambda: verifier.jwks.key(EC.kid) is not None)
        async with verifier_for(f"{base}/jwks.json") as cold:  # no key set yet
            server.release.clear()
            refused = await identify(cold, RSA.token())
            assert isinstance(refused, Refused) and refused.reason == "jwks_unavailable"
            server.release.set()
