"""What every plugin of one decision reads: policy, service, client, snapshot, the residency
rules the client falls under and the regions they allow, the hashing key.

``decision_context`` builds it once per decision, so that plugins only look things up.
"""

from __future__ import annotations

import hashlib
import random
from dataclasses import dataclass

from director.engine.affinity import client_key
from director.engine.classify import matching_rules
from director.engine.snapshot import Snapshot
from director.engine.types import Client
from policies.model import Policy, ResidencyRule, Service
from policies.residency import allowed_for


@dataclass(frozen=True)
class DecisionContext:
    policy: Policy
    service: Service
    client: Client
    snapshot: Snapshot
    rules: tuple[ResidencyRule, ...]  # residency rules the client falls under
    client_key: bytes  # what hashing plugins hash: the client's bucket, or random bytes
    key_is_client: bool  # True when client_key identifies the client's network (affinity)
    allowed: tuple[str, ...] | None = None  # the residency-allowed regions (None: unrestricted)
    allowed_set: frozenset[str] | None = None  # the same, to look regions up in


def decision_context(policy: Policy, service: Service, client: Client, snapshot: Snapshot,
                     rng: random.Random) -> DecisionContext:
    """The context of one decision for ``client``: its residency rules (by its location) and
    the regions they allow (``policies.residency.allowed_for``), its hashing key (``rng``
    only for ``affinity none``)."""
    location = client.location if client.location and client.location.found else None
    rules = matching_rules(policy, service, location)
    key, keyed = client_key(service, client, rng)
    allowed = allowed_for(service, rules, location is not None)
    return DecisionContext(policy, service, client, snapshot, rules, key, keyed, allowed,
                           frozenset(allowed) if allowed is not None else None)


def unit_hash(*parts: bytes | str) -> float:
    """A stable hash of ``parts`` in [0, 1): the same on every process and every run."""
    digest = hashlib.blake2b(digest_size=8)
    for part in parts:
        digest.update(part.encode() if isinstance(part, str) else part)
        digest.update(b"\x00")
    return int.from_bytes(digest.digest(), "big") / 2**64
