"""Tenant API keys: made once, shown once, kept only as a hash in the shared state.

A key reads ``dk_<id>_<secret>``: ``id`` (12 hex digits) names it in listings, logs and the
audit trail; ``secret`` (32 random bytes, URL-safe base64) is what proves it. The state
keeps, under ``Keys.tenant_keys``, one field per id holding the tenant, the SHA-256 of the
secret, a label and the creation time; the secret itself is never stored or logged. A key
is checked by its id (a dictionary lookup) and then ``hmac.compare_digest`` of the hashes,
so the check takes the same time however much of a guessed secret is right.

``KeyTable`` is the balancer's copy of every key: loaded whole, refreshed when the change
channel names the key hash (and every ``refresh_s`` in any case), so a request never waits
on Redis and a revoked key stops working everywhere within a change notification. With a
``file`` it keeps a local copy of the table (ids and digests, ``tenants.key_table_file``)
and starts from it when the state is unreachable at start. Until a table is known (from
the state or the file) ``check`` raises ``KeysUnknown``: the balancer answers 503, never
401, to a key that may well be valid.
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
from pathlib import Path
from types import TracebackType

from state.aio import AsyncStateStore
from state.changes import listen_for_changes
from state.durability import ABSENT, NOT_ASKED, Durability, Expected
from state.errors import StateError
from state.guard import describe, redis_errors
from state.tasks import cancel_and_wait
from tenants.key_table_file import KeyTableFileError, load_table, save_table

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


class KeysUnknown(Exception):
    """No key table is known yet (the state has been unreachable since start and no local
    copy was found): a key can be neither accepted nor refused."""


async def store_key(store: AsyncStateStore, key: StoredKey) -> Durability:
    """Write ``key`` and tell every balancer; whether it reached the replicas."""
    name = store.keys.tenant_keys
    value = key.to_json()
    with redis_errors(describe(store.client)):
        async with store.client.pipeline(transaction=True) as pipe:
            pipe.hset(name, key.key_id, value)
            pipe.publish(store.keys.changes, name)
            await pipe.execute()
    return await store.confirm(Expected(name, {key.key_id: value}))


async def revoke_key(store: AsyncStateStore, key_id: str
                     ) -> tuple[StoredKey | None, Durability]:
    """Delete the key ``key_id``: what it was (None when there was none), and whether its
    removal reached the replicas."""
    name = store.keys.tenant_keys
    with redis_errors(describe(store.client)):
        raw = await store.client.hget(name, key_id)
        if raw is None:
            return None, NOT_ASKED
        async with store.client.pipeline(transaction=True) as pipe:
            pipe.hdel(name, key_id)
            pipe.publish(store.keys.changes, name)
            await pipe.execute()
    durability = await store.confirm(Expected(name, {key_id: ABSENT}))
    return StoredKey.from_json(key_id, raw), durability


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

    While the state is unreachable the last table read keeps serving (logged once); at
    start, the local copy in ``file`` when there is one."""

    def __init__(self, store: AsyncStateStore, refresh_s: float = DEFAULT_REFRESH_S,
                 file: Path | None = None) -> None:
        self.store = store
        self.refresh_s = refresh_s
        self.file = file
        self.keys: dict[str, StoredKey] = {}
        self.loaded = False  # a table is known
        self.source = ""  # where the table came from: "state" or "file"
        self._wake = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []
        self._failing = False
        self._saved: dict[str, StoredKey] | None = None  # what the file holds

    def check(self, token: str) -> StoredKey | None:
        """The stored key ``token`` proves, or None; raises ``KeysUnknown`` before any
        table is known."""
        if not self.loaded:
            raise KeysUnknown("the tenant key table is not known yet (shared state unreachable)")
        return check(token, self.keys)

    async def refresh(self) -> bool:
        """Read the table once; False (keeping the last one) when the state is unreachable."""
        try:
            keys = await load_keys(self.store)
        except StateError as exc:
            if not self._failing:
                log.warning("tenant keys: state unavailable, keeping %d known keys: %s",
                            len(self.keys), exc)
            self._failing = True
            return False
        self.keys = keys
        if self._failing:
            log.info("tenant keys: state reachable again, %d keys", len(self.keys))
        self._failing = False
        self.loaded, self.source = True, "state"
        await self._save(keys)
        return True

    async def _save(self, keys: dict[str, StoredKey]) -> None:
        if self.file is None or keys == self._saved:
            return
        entries = {key_id: json.loads(key.to_json()) for key_id, key in keys.items()}
        try:
            await asyncio.to_thread(save_table, self.file, entries)
        except OSError as exc:
            log.warning("tenant keys: cannot save the table to %s: %s", self.file, exc)
            return
        self._saved = dict(keys)

    def load_file(self) -> bool:
        """Serve the table saved in ``file`` (at start, while the state is unreachable);
        False when there is none or it cannot be read."""
        if self.file is None:
            return False
        try:
            entries, saved_at = load_table(self.file)
        except KeyTableFileError as exc:
            log.warning("tenant keys: %s", exc)
            return False
        keys = {}
        for key_id, fields in entries.items():
            try:
                keys[key_id] = StoredKey.from_json(key_id, json.dumps(fields))
            except (ValueError, KeyError, TypeError) as exc:
                log.error("tenant key %s in %s: unreadable entry left out: %s", key_id,
                          self.file, exc)
        self.keys, self._saved = keys, dict(keys)
        self.loaded, self.source = True, "file"
        log.warning("tenant keys: serving the %d keys saved in %s at %s until the state "
                    "answers", len(keys), self.file,
                    time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(saved_at)))
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
        if not await self.refresh():
            self.load_file()
        self._tasks = [asyncio.create_task(self._run(), name="tenant-keys"),
                       asyncio.create_task(self._listen(), name="tenant-keys-listen")]
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None,
                        exc: BaseException | None, tb: TracebackType | None) -> None:
        await cancel_and_wait(self._tasks)
