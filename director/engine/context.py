"""What every plugin of one decision reads: policy, service, client, snapshot, hashing key."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

from director.engine.snapshot import Snapshot
from director.engine.types import Client
from policies.model import Policy, ResidencyRule, Service


@dataclass(frozen=True)
class DecisionContext:
    policy: Policy
    service: Service
    client: Client
    snapshot: Snapshot
    rules: tuple[ResidencyRule, ...]  # residency rules the client falls under
    client_key: bytes  # what hashing plugins hash: the client's bucket, or random bytes
    key_is_client: bool  # True when client_key identifies the client's network (affinity)


def unit_hash(*parts: bytes | str) -> float:
    """A stable hash of ``parts`` in [0, 1): the same on every process and every run."""
    digest = hashlib.blake2b(digest_size=8)
    for part in parts:
        digest.update(part.encode() if isinstance(part, str) else part)
        digest.update(b"\x00")
    return int.from_bytes(digest.digest(), "big") / 2**64
