"""JWTs naming a tenant, verified against a JWKS (PyJWT).

The JWKS comes from a file (re-read when it changes) or an https URL (fetched at start,
every ``refresh_s``, and at most once a ``min_fetch_s`` when a token names a key id not in
the set, so a key rotation is picked up without a restart). Only asymmetric algorithms are
accepted, each key with its own (``alg`` of the JWK, else the family of its ``kty``): a
token cannot choose ``none`` or an HMAC keyed with a public key. ``exp`` is required;
``iss`` and ``aud`` are checked when the policy names them; ``leeway`` allows clock skew.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import jwt

from policies.model import JwtIdentity

log = logging.getLogger(__name__)

ASYMMETRIC = frozenset({"RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256",
                        "ES384", "ES512", "EdDSA"})
_BY_KTY = {"RSA": ("RS256", "RS384", "RS512", "PS256", "PS384", "PS512"),
           "EC": ("ES256", "ES384", "ES512"), "OKP": ("EdDSA",)}
DEFAULT_REFRESH_S = 300.0
MIN_FETCH_S = 10.0
FETCH_TIMEOUT_S = 5.0


class JwtRefused(Exception):
    """The token does not identify a tenant; ``reason`` is a metric label."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


@dataclass(frozen=True)
class VerifiedToken:
    tenant: str
    subject: str | None
    claims: dict[str, Any]


class Jwks:
    """The key set: from a file path or an https URL."""

    def __init__(self, source: str, refresh_s: float = DEFAULT_REFRESH_S,
                 min_fetch_s: float = MIN_FETCH_S) -> None:
        self.source = source
        self.is_url = source.startswith("https://") or source.startswith("http://")
        self.refresh_s = refresh_s
        self.min_fetch_s = min_fetch_s
        self._keys: dict[str, jwt.PyJWK] = {}
        self._loaded_at = 0.0
        self._mtime: float | None = None
        self._lock = asyncio.Lock()

    async def key(self, kid: str | None) -> jwt.PyJWK | None:
        """The key ``kid`` names (without a kid: the only key, if there is one)."""
        await self._maybe_reload(kid)
        if kid is None:
            return next(iter(self._keys.values())) if len(self._keys) == 1 else None
        return self._keys.get(kid)

    async def _maybe_reload(self, kid: str | None) -> None:
        now = time.monotonic()
        if not self.is_url:
            mtime = _mtime(self.source)
            if mtime != self._mtime:
                self._keys, self._mtime = _parse(_read_file(self.source)), mtime
            return
        stale = now - self._loaded_at >= self.refresh_s
        unknown = kid is not None and kid not in self._keys
        if not (stale or (unknown and now - self._loaded_at >= self.min_fetch_s)):
            return
        async with self._lock:
            if time.monotonic() - self._loaded_at < min(self.min_fetch_s, self.refresh_s):
                return
            self._loaded_at = time.monotonic()
            try:
                self._keys = _parse(await _fetch(self.source))
            except (aiohttp.ClientError, TimeoutError, ValueError) as exc:
                log.warning("JWKS %s: fetch failed, keeping %d keys: %s", self.source,
                            len(self._keys), exc)


class JwtVerifier:
    """Verifies bearer JWTs for one policy's ``identity { jwt { ... } }``."""

    def __init__(self, config: JwtIdentity) -> None:
        self.config = config
        self.jwks = Jwks(config.jwks)  # a file path the policy loader already resolved

    async def verify(self, token: str) -> VerifiedToken:
        """The tenant ``token`` names; raises ``JwtRefused``."""
        try:
            header = jwt.get_unverified_header(token)
        except jwt.InvalidTokenError:
            raise JwtRefused("malformed", "the bearer token is not a JWT") from None
        alg = header.get("alg")
        if alg not in ASYMMETRIC:
            raise JwtRefused("algorithm", f"JWT algorithm {alg!r} is not accepted")
        key = await self.jwks.key(header.get("kid"))
        if key is None:
            raise JwtRefused("unknown_key", "the JWT's signing key is not in the key set")
        if alg not in _algorithms(key):
            raise JwtRefused("algorithm", f"JWT algorithm {alg!r} does not match its key")
        cfg = self.config
        try:
            claims = jwt.decode(
                token, key.key, algorithms=[alg], audience=cfg.audience, issuer=cfg.issuer,
                leeway=cfg.leeway,
                options={"require": ["exp"], "verify_aud": cfg.audience is not None})
        except jwt.ExpiredSignatureError:
            raise JwtRefused("expired", "the JWT has expired") from None
        except jwt.InvalidAudienceError:
            raise JwtRefused("audience", "the JWT is not for this audience") from None
        except jwt.InvalidIssuerError:
            raise JwtRefused("issuer", "the JWT's issuer is not trusted") from None
        except jwt.InvalidSignatureError:
            raise JwtRefused("signature", "the JWT's signature does not verify") from None
        except jwt.InvalidTokenError as exc:
            raise JwtRefused("invalid", f"the JWT is not valid: {exc}") from None
        tenant = claims.get(cfg.tenant_claim)
        if not isinstance(tenant, str) or not tenant:
            raise JwtRefused("no_tenant", f"the JWT has no '{cfg.tenant_claim}' claim")
        subject = claims.get("sub")
        return VerifiedToken(tenant, subject if isinstance(subject, str) else None, claims)


def _algorithms(key: jwt.PyJWK) -> tuple[str, ...]:
    alg = key._jwk_data.get("alg")  # PyJWK keeps the JWK it was made from
    if isinstance(alg, str):
        return (alg,) if alg in ASYMMETRIC else ()
    return _BY_KTY.get(str(key._jwk_data.get("kty")), ())


def _parse(data: dict[str, Any]) -> dict[str, jwt.PyJWK]:
    """Usable signing keys of a JWKS document by kid (a key without kid under "")."""
    keys: dict[str, jwt.PyJWK] = {}
    for entry in data.get("keys", []) if isinstance(data, dict) else []:
        if not isinstance(entry, dict) or entry.get("use", "sig") != "sig":
            continue
        if entry.get("kty") not in _BY_KTY:
            continue  # symmetric ("oct") keys are never accepted
        try:
            key = jwt.PyJWK(entry)
        except (jwt.PyJWKError, jwt.InvalidKeyError, ValueError) as exc:
            log.warning("JWKS: key %s left out: %s", entry.get("kid"), exc)
            continue
        keys[str(entry.get("kid", ""))] = key
    return keys


def _read_file(path: str) -> dict[str, Any]:
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        log.error("JWKS %s: unreadable: %s", path, exc)
        return {}
    return data if isinstance(data, dict) else {}


def _mtime(path: str) -> float | None:
    try:
        return os.stat(path).st_mtime
    except OSError:
        return None


async def _fetch(url: str) -> dict[str, Any]:
    timeout = aiohttp.ClientTimeout(total=FETCH_TIMEOUT_S)
    async with aiohttp.ClientSession(timeout=timeout) as session, session.get(url) as response:
        response.raise_for_status()
        data = await response.json(content_type=None)
    if not isinstance(data, dict):
        raise ValueError("the JWKS is not a JSON object")
    return data
