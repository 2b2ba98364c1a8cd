"""Which policy a component serves: its version, its digest and the store's epoch.

A stored policy is known by its ``version`` (1, 2, ... in the order the store accepted them)
and its ``digest`` (SHA-256 of its sources: the main file's text and the included files by
their path relative to the main file, so the same sources give the same digest wherever the
file lives). The ``epoch`` is a random name the store's policy record gets when it is
created: a store that lost its data (flushed, restarted empty) starts a new epoch, so a
reader can tell "the store was reset" from "someone stored an older policy".

Versions never go back. A follower moves only forward (:func:`compare`): a stored version
lower than the one it serves, or the same number with other sources, is what a store that
lost its data looks like, and is refused; the admin API then stores the newest version it
knows again, above both (``director.api.policy_store``).
"""

from __future__ import annotations

import hashlib
import json
import posixpath
from collections.abc import Mapping
from dataclasses import dataclass
from enum import Enum


def policy_digest(name: str, text: str, files: Mapping[str, str]) -> str:
    """SHA-256 (hex) of a policy's sources; ``name`` only places the included ``files``."""
    folder = posixpath.dirname(name.replace("\\", "/")) or "."
    relative = {_relative(path, folder): body for path, body in files.items()}
    canonical = json.dumps({"text": text, "files": relative}, sort_keys=True,
                           ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()


def _relative(path: str, folder: str) -> str:
    path = path.replace("\\", "/")
    if posixpath.isabs(path) != posixpath.isabs(folder):
        return posixpath.normpath(path)
    return posixpath.relpath(path, folder)


@dataclass(frozen=True)
class PolicyIdentity:
    """A served or stored policy: ``version`` None for a local file never stored."""

    version: int | None
    digest: str
    epoch: str = ""

    def describe(self) -> str:
        where = "local file" if self.version is None else f"version {self.version}"
        return f"{where} ({self.digest[:12]})"

    def as_dict(self) -> dict[str, object]:
        return {"version": self.version, "digest": self.digest, "epoch": self.epoch}


class Order(Enum):
    """How a stored version stands against the one served (:func:`compare`)."""

    SAME = "same"  # the version served
    NEWER = "newer"  # move to it
    OLDER = "older"  # a lower version: the store went back (lost its data, or restored)
    CONFLICT = "conflict"  # the same number with other sources: the store went back too


def compare(served: PolicyIdentity | None, version: int, digest: str | None) -> Order:
    """Where a stored ``version`` (with ``digest``; None: not read yet) stands against
    ``served`` (None, or a version None: a local file, which any stored version replaces)."""
    if served is None or served.version is None or version > served.version:
        return Order.NEWER
    if version < served.version:
        return Order.OLDER
    if digest is None or digest == served.digest:
        return Order.SAME
    return Order.CONFLICT


def parse_version(raw: bytes | str | None) -> int | None:
    """A stored ``version`` field; None when absent or not a number."""
    if raw is None:
        return None
    try:
        return int(raw)
    except ValueError:
        return None

