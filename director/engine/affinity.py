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
        return bucket_key(int(bucket.network_address), bucket.max_prefixlen,
                          bucket.prefixlen), True
    return rng.randbytes(8), False


def bucket_key(address: int, width: int, bits: int) -> bytes:
    """The hashing key of the bucket of prefix length ``bits`` holding ``address`` (an
    integer of ``width`` bits, 32 or 128): the bucket's network address, then ``bits``.
    ``client_key`` under ``affinity subnet``, from integers (the DNS memo keys use it)."""
    return ((address >> (width - bits) << (width - bits)).to_bytes(width // 8, "big")
            + bytes((bits,)))
