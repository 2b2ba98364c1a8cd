"""Bearer tokens with scopes, stored hashed.

Tokens file (JSON, mode 0600)::

    {"tokens": [{"name": "admin", "scopes": ["read", "admin"], "sha256": "<hex>"}]}

Only the SHA-256 of a token is stored; a request's token is hashed and compared with every
stored hash in constant time. ``admin`` implies ``read``. The file is re-read when it
changes, so ``director api token`` takes effect without a restart.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import os
import secrets
import tempfile
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger(__name__)

READ = "read"
ADMIN = "admin"
SCOPES = (READ, ADMIN)


class TokenFileError(Exception):
    """The tokens file cannot be read or is not in the expected shape."""


@dataclass(frozen=True)
class Principal:
    """Who made a request: the token's name and the scopes it grants."""

    name: str
    scopes: frozenset[str]

    def allows(self, scope: str) -> bool:
        return scope in self.scopes or ADMIN in self.scopes


@dataclass(frozen=True)
class TokenEntry:
    name: str
    scopes: frozenset[str]
    sha256: str


def hash_token(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def scopes_for(scope: str) -> list[str]:
    """The scopes a token of ``scope`` is stored with (admin implies read)."""
    if scope not in SCOPES:
        raise ValueError(f"scope: expected one of {', '.join(SCOPES)}, got {scope!r}")
    return [READ, ADMIN] if scope == ADMIN else [READ]


def read_entries(path: Path) -> list[TokenEntry]:
    """The tokens in ``path``; raises ``TokenFileError``."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise TokenFileError(f"{path}: cannot read tokens: {exc}") from exc
    items = data.get("tokens") if isinstance(data, dict) else None
    if not isinstance(items, list):
        raise TokenFileError(f'{path}: expected {{"tokens": [...]}}')
    entries = []
    for i, item in enumerate(items):
        try:
            entries.append(TokenEntry(str(item["name"]), frozenset(item["scopes"]),
                                      str(item["sha256"]).lower()))
        except (KeyError, TypeError) as exc:
            raise TokenFileError(f"{path}: tokens[{i}]: missing or bad field {exc}") from exc
    return entries


def add_token(path: Path, name: str, scope: str) -> str:
    """Append a new token named ``name`` to ``path`` (created if absent), hashed; returns the
    plaintext, which is stored nowhere."""
    entries: list[dict[str, object]] = []
    if path.exists():
        read_entries(path)  # refuse to extend a file we cannot read back
        entries = json.loads(path.read_text(encoding="utf-8"))["tokens"]
    token = secrets.token_urlsafe(32)
    entries.append({"name": name, "scopes": scopes_for(scope), "sha256": hash_token(token)})
    write_private(path, json.dumps({"tokens": entries}, indent=2) + "\n")
    return token


def write_private(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` atomically, readable by the owner only."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
        os.chmod(tmp, 0o600)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


class TokenStore:
    """The tokens of one file, re-read when its modification time or size changes."""

    def __init__(self, path: Path | None) -> None:
        self.path = path
        self._entries: list[TokenEntry] = []
        self._seen: tuple[int, int] | None = None
        self._reload()

    def _reload(self) -> None:
        if self.path is None:
            return
        try:
            stat = self.path.stat()
        except OSError as exc:
            if self._seen is None:
                raise TokenFileError(f"{self.path}: {exc.strerror}") from exc
            log.warning("api: tokens file %s unreadable, keeping the last tokens: %s",
                        self.path, exc)
            return
        seen = (stat.st_mtime_ns, stat.st_size)
        if seen == self._seen:
            return
        try:
            self._entries = read_entries(self.path)
        except TokenFileError:
            if self._seen is None:
                raise
            log.exception("api: tokens file changed but does not load; keeping the last tokens")
        self._seen = seen

    def authenticate(self, token: str) -> Principal | None:
        """The principal for ``token``, or None; compares with every hash in constant time."""
        self._reload()
        digest = hash_token(token)
        found: TokenEntry | None = None
        for entry in self._entries:
            if hmac.compare_digest(entry.sha256, digest) and found is None:
                found = entry
        return Principal(found.name, found.scopes) if found else None
