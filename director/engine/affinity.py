"""Client affinity: the key hashing plugins (weighted steering, spillover) hash on.

``affinity subnet``: the client's network bucket (/24 IPv4, /56 IPv6), so every client of
that network gets the same answer while inputs (health, load band, policy) do not change.
``affinity none``: fresh random bytes from the injected generator on every decision.
"""

from __future__ import annotations

import random

from director.engine.types import Client
from policies.model import Affinity, Service


def client_key(service: Service, client: Client, rng: random.Random) -> tuple[bytes, bool]:
    """The hashing key and whether it identifies the client's network."""
    if service.affinity is Affinity.SUBNET:
        bucket = client.bucket
        return bucket.network_address.packed + bytes([bucket.prefixlen]), True
    return rng.randbytes(8), False
