"""Tenant API keys: made once, shown once, kept only as a hash in the shared state.

A key reads ``dk_<id>_<secret>``: ``id`` (12 hex digits) names it in listings, logs and the
audit trail; ``secret`` (32 random bytes, URL-safe base64) is what proves it. The state
keeps, under ``Keys.tenant_keys``, one field per id holding the tenant, the SHA-256 of the
secret, a label and the creation time; the secret itself is never stored or logged. A key
is checked by its id (a dictionary lookup) and then ``hmac.compare_digest`` of the hashes,
so the check takes the same time however much of a guessed secret is right.

``KeyTable`` is the balancer's copy of every key: loaded whole, refreshed when the change
channel names the key hash (and every ``refresh_s`` in any case), so a request never waits
on Redis and a revoked key stops working everywhere within a change notification.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import hashlib
import hmac
import json
import logging
import re
import secrets
import time
from collections.abc import Mapping
from dataclasses import dataclass
from types import TracebackType

from state.aio import AsyncStateStore
from state.changes import listen_for_changes
from state.errors import StateError
from state.guard import describe, redis_errors
from state.tasks import cancel_and_wait

log = logging.getLogger(__name__)

KEY_PREFIX = "dk"
_KEY = re.compile(r"dk_([0-9a-f]{12})_([A-Za-z0-9_-]{43})")
DEFAULT_REFRESH_S = 5.0


@dataclass(frozen=True)
class StoredKey:
    """What the state keeps of one key: never the secret."""

    key_id: str
    tenant: str
    digest: str  # SHA-256 of the secret, hex
    label: str = ""
    created: float = 0.0

    def public(self) -> dict[str, object]:
        """What listings show: the id, never the digest."""
        return {"id": self.key_id, "tenant": self.tenant, "label": self.label,
                "created": self.created}

    def to_json(self) -> str:
        return json.dumps({"tenant": self.tenant, "digest": self.digest, "label": self.label,
                           "created": self.created})

    @classmethod
    def from_json(cls, key_id: str, text: str | bytes) -> StoredKey:
        data = json.loads(text)
        return cls(key_id, str(data["tenant"]), str(data["digest"]), str(data.get("label", "")),
                   float(data.get("created", 0.0)))


@dataclass(frozen=True)
class NewKey:
    """A key just made: ``token`` is shown to the operator once, then only ``stored`` is."""

    token: str
    stored: StoredKey


def digest_of(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


def new_key(tenant: str, label: str = "", now: float | None = None) -> NewKey:
    """A fresh random key for ``tenant``."""
    key_id = secrets.token_hex(6)
    secret = base64.urlsafe_b64encode(secrets.token_bytes(32)).decode().rstrip("=")
    stored = StoredKey(key_id, tenant, digest_of(secret), label,
                       time.time() if now is None else now)
    return NewKey(f"{KEY_PREFIX}_{key_id}_{secret}", stored)


def split_token(token: str) -> tuple[str, str] | None:
    """(id, secret) of a token shaped like a key, else None."""
    match = _KEY.fullmatch(token)
    return (match.group(1), match.group(2)) if match else None


def looks_like_key(token: str) -> bool:
    return token.startswith(KEY_PREFIX + "_")


def check(token: str, keys: Mapping[str, StoredKey]) -> StoredKey | None:
    """The stored key ``token`` proves, or None."""
    parts = split_token(token)
    if parts is None:
        return None
    stored = keys.get(parts[0])
    if stored is None:
        return None
    return stored if hmac.compare_digest(stored.digest, digest_of(parts[1])) else None


async def store_key(store: AsyncStateStore, key: StoredKey) -> None:
    """Write ``key`` and tell every balancer."""
    name = store.keys.tenant_keys
    with redis_errors(describe(store.client)):
        async with store.client.pipeline(transaction=True) as pipe:
            pipe.hset(name, key.key_id, key.to_json())
            pipe.publish(store.keys.changes, name)
            await pipe.execute()


async def revoke_key(store: AsyncStateStore, key_id: str) -> StoredKey | None:
    """Delete the key ``key_id``; what it was, or None when there was none."""
    name = store.keys.tenant_keys
    with redis_errors(describe(store.client)):
        raw = await store.client.hget(name, key_id)
        if raw is None:
            return None
        async with store.client.pipeline(transaction=True) as pipe:
            pipe.hdel(name, key_id)
            pipe.publish(store.keys.changes, name)
            await pipe.execute()
    return StoredKey.from_json(key_id, raw)


async def load_keys(store: AsyncStateStore) -> dict[str, StoredKey]:
    """Every stored key by id; a malformed entry is logged and left out."""
    with redis_errors(describe(store.client)):
        raw = await store.client.hgetall(store.keys.tenant_keys)
    keys: dict[str, StoredKey] = {}
    for field, value in raw.items():
        key_id = field.decode() if isinstance(field, bytes) else str(field)
        try:
            keys[key_id] = StoredKey.from_json(key_id, value)
        except (ValueError, KeyError, TypeError) as exc:
            log.error("tenant key %s: unreadable entry left out: %s", key_id, exc)
    return keys


class KeyTable:
    """The stored keys, kept current in memory; an async context manager.

    While the state is unreachable the last table read keeps serving (logged once)."""

    def __init__(self, store: AsyncStateStore, refresh_s: float = DEFAULT_REFRESH_S) -> None:
        self.store = store
        self.refresh_s = refresh_s
        self.keys: dict[str, StoredKey] = {}
        self.loaded = False
        self._wake = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []
        self._failing = False

    def check(self, token: str) -> StoredKey | None:
        return check(token, self.keys)

    async def refresh(self) -> bool:
        """Read the table once; False (keeping the last one) when the state is unreachable."""
        try:
            self.keys = await load_keys(self.store)
        except StateError as exc:
            if not self._failing:
                log.warning("tenant keys: state unavailable, keeping %d known keys: %s",
                            len(self.keys), exc)
            self._failing = True
            return False
        if self._failing:
            log.info("tenant keys: state reachable again, %d keys", len(self.keys))
        self._failing = False
        self.loaded = True
        return True

    async def _run(self) -> None:
        while True:
            self._wake.clear()
            await self.refresh()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), self.refresh_s)

    async def _listen(self) -> None:
        name = self.store.keys.tenant_keys

        def on_key(key: str) -> None:
            if key == name:
                self._wake.set()

        def on_error(exc: Exception) -> None:
            log.debug("tenant keys: change channel unavailable: %s", exc)

        await listen_for_changes(self.store, on_key, on_subscribed=self._wake.set,
                                 on_error=on_error)

    async def __aenter__(self) -> KeyTable:
        await self.refresh()
        self._tasks = [asyncio.create_task(self._run(), name="tenant-keys"),
                       asyncio.create_task(self._listen(), name="tenant-keys-listen")]
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None,
                        exc: BaseException | None, tb: TracebackType | None) -> None:
        await cancel_and_wait(self._tasks)
