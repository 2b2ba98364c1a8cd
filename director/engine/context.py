"""What every plugin of one decision reads: policy, service, client, snapshot, the residency
rules the client falls under and the regions they allow (``policies.matching.coverage``),
the hashing key.

``decision_context`` builds it once per decision, so that plugins only look things up.
"""

from __future__ import annotations

import hashlib
import random
from dataclasses import dataclass

from director.engine.affinity import client_key
from director.engine.snapshot import Snapshot
from director.engine.types import Client
from policies.matching import NOWHERE, coverage
from policies.model import Policy, ResidencyRule, Service


@dataclass(frozen=True)
class DecisionContext:
    policy: Policy
    service: Service
    client: Client
    snapshot: Snapshot
    rules: tuple[ResidencyRule, ...]  # residency rules the client is or may be under
    client_key: bytes  # what hashing plugins hash: the client's bucket, or random bytes
    key_is_client: bool  # True when client_key identifies the client's network (affinity)
    allowed: tuple[str, ...] | None = None  # the residency-allowed regions (None: unrestricted)
    allowed_set: frozenset[str] | None = None  # the same, to look regions up in
    located: bool = True  # False: the unknown-location path applies to this client
    partial: tuple[ResidencyRule, ...] = ()  # of ``rules``, those it only may be under


def decision_context(policy: Policy, service: Service, client: Client, snapshot: Snapshot,
                     rng: random.Random) -> DecisionContext:
    """The context of one decision for ``client``: its residency rules (by its location) and
    the regions they allow (``policies.matching.coverage``), its hashing key (``rng`` only
    for ``affinity none``)."""
    where = client.location.place if client.location is not None else NOWHERE
    held = coverage(policy, service, where)
    key, keyed = client_key(service, client, rng)
    allowed = held.allowed
    return DecisionContext(policy, service, client, snapshot, held.rules, key, keyed, allowed,
                           frozenset(allowed) if allowed is not None else None, held.located,
                           held.partial)


def unit_hash(*parts: bytes | str) -> float:
    """A stable hash of ``parts`` in [0, 1): the same on every process and every run."""
    digest = hashlib.blake2b(digest_size=8)
    for part in parts:
        digest.update(part.encode() if isinstance(part, str) else part)
        digest.update(b"\x00")
    return int.from_bytes(digest.digest(), "big") / 2**64
