"""JWTs naming a tenant, verified against a JWKS (PyJWT).

Verification never waits for the network. The JWKS comes from a file (re-read when its
modification time changes) or an https URL, which a background task (``Jwks``) fetches:
at start, every ``refresh_s``, and early when a token names a key id not in the set (at
most once a ``min_fetch_s``, however many such tokens arrive), so a key rotation is picked
up without a restart. A fetch follows no redirect, reads at most ``MAX_JWKS_BYTES`` (counted
while reading, after decompression) and gives up after ``FETCH_TIMEOUT_S``; one that fails,
or finds no usable key, keeps the last good key set. Until a first key set has loaded,
tokens are refused as ``jwks_unavailable`` (the balancer answers 503, not 401).

Only asymmetric algorithms are accepted, each key with its own (``alg`` of the JWK, else
the family of its ``kty``): a token cannot choose ``none`` or an HMAC keyed with a public
key. ``exp`` is required; so are ``aud`` and ``iss`` when the policy names an audience or
an issuer (the policy language requires ``audience``, ``policies.lint`` recommends
``issuer``); ``leeway`` allows clock skew.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import time
from dataclasses import dataclass
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
RETRY_S = 10.0
FETCH_TIMEOUT_S = 5.0
MAX_JWKS_BYTES = 1 << 20  # real key sets are a few KiB; this bounds a hostile answer
_CLAIM_REASON = {"aud": "audience", "iss": "issuer", "exp": "invalid"}


class JwtRefused(Exception):
    """The token does not identify a tenant; ``reason`` is a metric label."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


class JwksFetchError(Exception):
    """A JWKS URL answered with something other than a key set we read."""


@dataclass(frozen=True)
class VerifiedToken:
    tenant: str
    subject: str | None
    claims: dict[str, Any]


class Jwks:
    """The key set of one source (a file path or an https URL), read without waiting: a
    URL is fetched by a background task started by ``start`` (or by the first lookup)."""

    def __init__(self, source: str, refresh_s: float = DEFAULT_REFRESH_S,
                 min_fetch_s: float = MIN_FETCH_S, max_bytes: int = MAX_JWKS_BYTES,
                 timeout_s: float = FETCH_TIMEOUT_S, retry_s: float = RETRY_S) -> None:
        self.source = source
        self.is_url = source.startswith("https://") or source.startswith("http://")
        self.refresh_s = refresh_s
        self.min_fetch_s = min_fetch_s  # at least this long between two fetches
        self.retry_s = retry_s  # the next fetch after a failed one, unless a lookup asks
        self.max_bytes = max_bytes
        self.timeout_s = timeout_s
        self.fetches = 0  # attempts finished, good or not
        self.last_error: str | None = None  # why the last attempt failed (None: it did not)
        self._keys: dict[str, jwt.PyJWK] = {}
        self._loaded = not self.is_url  # a file is read on lookup
        self._mtime: float | None = None
        self._fetched_at = -float("inf")
        self._task: asyncio.Task[None] | None = None
        self._wanted: asyncio.Event | None = None  # a lookup missed a key id

    @property
    def loaded(self) -> bool:
        """Whether a key set has been read (always, for a file)."""
        return self._loaded

    def key(self, kid: str | None) -> jwt.PyJWK | None:
        """The key ``kid`` names (without a kid: the only key, if there is one). Never
        waits: an unknown kid asks the background task for an early fetch."""
        if not self.is_url:
            self._reread_file()
        else:
            self.start()
            if kid is not None and kid not in self._keys and self._wanted is not None:
                self._wanted.set()
        if kid is None:
            return next(iter(self._keys.values())) if len(self._keys) == 1 else None
        return self._keys.get(kid)

    def start(self) -> None:
        """Start fetching in the background (a URL, in a running event loop; idempotent)."""
        if not self.is_url or self._task is not None:
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return  # the first lookup, in the loop, starts it
        self._wanted = asyncio.Event()
        self._task = loop.create_task(self._refresh(self._wanted), name=f"jwks {self.source}")

    async def ready(self, timeout: float) -> bool:
        """Wait up to ``timeout`` seconds for a first key set; whether there is one."""
        self.start()
        deadline = time.monotonic() + timeout
        while not self._loaded and time.monotonic() < deadline:
            await asyncio.sleep(0.02)
        return self._loaded

    async def aclose(self) -> None:
        """Stop the background task."""
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    def close(self) -> None:
        """Stop the background task without waiting (from the loop it runs on)."""
        task, self._task = self._task, None
        if task is not None:
            task.cancel()

    async def _refresh(self, wanted: asyncio.Event) -> None:
        while self._task is not None:  # None once closed
            good = await self._load()
            # after a failure, try again sooner than the refresh interval
            wait = self.refresh_s if good else min(self.retry_s, self.refresh_s)
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(wait):  # (3.11's wait_for can eat a cancel)
                    await wanted.wait()
            since = time.monotonic() - self._fetched_at
            if since < self.min_fetch_s:  # unknown key ids cannot make us fetch in a loop
                await asyncio.sleep(self.min_fetch_s - since)
            wanted.clear()

    async def _load(self) -> bool:
        self._fetched_at = time.monotonic()
        try:
            keys = _parse(await fetch_jwks(self.source, self.max_bytes, self.timeout_s))
            if not keys:
                raise JwksFetchError("no usable signing key in the answer")
        except (aiohttp.ClientError, TimeoutError, JwksFetchError, ValueError) as exc:
            self.last_error = str(exc) or type(exc).__name__
            log.warning("JWKS %s: fetch failed, keeping the last %d keys: %s", self.source,
                        len(self._keys), self.last_error)
            return False
        finally:
            self.fetches += 1
        self._keys, self._loaded, self.last_error = keys, True, None
        return True

    def _reread_file(self) -> None:
        mtime = _mtime(self.source)
        if mtime != self._mtime:
            self._keys, self._mtime = _parse(_read_file(self.source, self.max_bytes)), mtime


class JwtVerifier:
    """Verifies bearer JWTs for one policy's ``identity { jwt { ... } }``."""

    def __init__(self, config: JwtIdentity) -> None:
        self.config = config
        self.jwks = Jwks(config.jwks)  # a file path the policy loader already resolved

    def start(self) -> None:
        """Start following the key set (in a running loop; a lookup starts it otherwise)."""
        self.jwks.start()

    async def aclose(self) -> None:
        await self.jwks.aclose()

    def close(self) -> None:
        self.jwks.close()

    async def verify(self, token: str) -> VerifiedToken:
        """The tenant ``token`` names; raises ``JwtRefused``. Never waits for I/O."""
        try:
            header = jwt.get_unverified_header(token)
        except jwt.InvalidTokenError:
            raise JwtRefused("malformed", "the bearer token is not a JWT") from None
        alg = header.get("alg")
        if alg not in ASYMMETRIC:
            raise JwtRefused("algorithm", f"JWT algorithm {alg!r} is not accepted")
        key = self.jwks.key(header.get("kid"))
        if key is None:
            if not self.jwks.loaded:
                raise JwtRefused("jwks_unavailable", "the JWT signing keys are not loaded "
                                 "yet; try again shortly")
            raise JwtRefused("unknown_key", "the JWT's signing key is not in the key set")
        if alg not in _algorithms(key):
            raise JwtRefused("algorithm", f"JWT algorithm {alg!r} does not match its key")
        cfg = self.config
        required = ["exp", *(["aud"] if cfg.audience is not None else []),
                    *(["iss"] if cfg.issuer is not None else [])]
        try:
            claims = jwt.decode(
                token, key.key, algorithms=[alg], audience=cfg.audience, issuer=cfg.issuer,
                leeway=cfg.leeway,
                options={"require": required, "verify_aud": cfg.audience is not None})
        except jwt.ExpiredSignatureError:
            raise JwtRefused("expired", "the JWT has expired") from None
        except jwt.MissingRequiredClaimError as exc:
            raise JwtRefused(_CLAIM_REASON.get(exc.claim, "invalid"),
                             f"the JWT has no '{exc.claim}' claim") from None
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


def _read_file(path: str, max_bytes: int) -> dict[str, Any]:
    try:
        with open(path, "rb") as handle:
            raw = handle.read(max_bytes + 1)
        if len(raw) > max_bytes:
            raise ValueError(f"larger than {max_bytes} bytes")
        data = json.loads(raw)
    except (OSError, ValueError) as exc:
        log.error("JWKS %s: unreadable: %s", path, exc)
        return {}
    return data if isinstance(data, dict) else {}


def _mtime(path: str) -> float | None:
    try:
        return os.stat(path).st_mtime
    except OSError:
        return None


async def fetch_jwks(url: str, max_bytes: int = MAX_JWKS_BYTES,
                     timeout_s: float = FETCH_TIMEOUT_S) -> dict[str, Any]:
    """The JSON object at ``url``: no redirect followed, at most ``max_bytes`` read (the
    body as decoded, so a compressed bomb is cut too), all within ``timeout_s``; raises
    ``JwksFetchError``, ``aiohttp.ClientError``, ``TimeoutError`` or ``ValueError``."""
    timeout = aiohttp.ClientTimeout(total=timeout_s)
    async with aiohttp.ClientSession(timeout=timeout) as session, session.get(
            url, allow_redirects=False, headers={"Accept": "application/json"}) as response:
        if 300 <= response.status < 400:
            raise JwksFetchError(f"answered {response.status} redirecting to "
                                 f"{response.headers.get('Location')!r}; a JWKS URL must "
                                 "answer itself (redirects are not followed)")
        if response.status != 200:
            raise JwksFetchError(f"answered HTTP {response.status}")
        if response.content_length is not None and response.content_length > max_bytes:
            raise JwksFetchError(f"answer of {response.content_length} bytes is over the "
                                 f"limit of {max_bytes}")
        body = bytearray()
        async for chunk in response.content.iter_chunked(64 * 1024):
            body += chunk
            if len(body) > max_bytes:
                raise JwksFetchError(f"answer is over the limit of {max_bytes} bytes")
    data = json.loads(body)
    if not isinstance(data, dict):
        raise ValueError("the JWKS is not a JSON object")
    return data
