"""RRSIG records made directly (RFC 4034 section 3): the bytes to sign built by hand and
signed with deterministic ECDSA (RFC 6979) or Ed25519, without the per-call overhead of
``dns.dnssec.sign`` (which builds its inputs anew from objects and text each call); the
output is the same record, byte for byte (``tests/dnssec/test_rrsig.py``).
"""

from __future__ import annotations

import struct

import dns.name
import dns.rdataclass
import dns.rdatatype
import dns.rdtypes.ANY.RRSIG
import dns.rrset
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec, ed25519
from cryptography.hazmat.primitives.asymmetric.utils import decode_dss_signature

from director.dnssec.keys import ZoneKey

_ECDSA = ec.ECDSA(hashes.SHA256(), deterministic_signing=True)


class RrsetSigner:
    """Signs RRsets of the zone ``apex`` with one key."""

    def __init__(self, key: ZoneKey, apex: dns.name.Name) -> None:
        self.key = key
        self.private = key.private_key
        self.algorithm = key.algorithm
        self.tag = key.tag
        self.apex = apex
        self.signer_wire = apex.canonicalize().to_wire() or b""

    def sign(self, rrset: dns.rrset.RRset, inception: int,
             expiration: int) -> dns.rdtypes.ANY.RRSIG.RRSIG:
        """The RRSIG of ``rrset`` by this key, valid from ``inception`` to ``expiration``."""
        owner = rrset.name
        labels = len(owner) - 1 - (1 if owner.is_wild() else 0)
        signature = self.signature(owner.canonicalize().to_wire() or b"", labels,
                                   rrset.rdtype, rrset.ttl,
                                   [rdata.to_digestable(self.apex) for rdata in rrset],
                                   inception, expiration)
        return dns.rdtypes.ANY.RRSIG.RRSIG(
            dns.rdataclass.IN, dns.rdatatype.RRSIG, rrset.rdtype, self.algorithm, labels,
            rrset.ttl, expiration, inception, self.tag, self.apex, signature)

    def rrsig_rdata(self, owner: bytes, labels: int, rdtype: int, ttl: int,
                    rdatas: list[bytes], inception: int, expiration: int) -> bytes:
        """The wire RDATA of the RRSIG over the records ``rdatas`` (canonical wire) of type
        ``rdtype`` at ``owner`` (lower-case wire): for answers written by hand."""
        return (self._header(rdtype, labels, ttl, inception, expiration)
                + self.signature(owner, labels, rdtype, ttl, rdatas, inception, expiration))

    def _header(self, rdtype: int, labels: int, ttl: int, inception: int,
                expiration: int) -> bytes:
        return struct.pack("!HBBIIIH", rdtype, self.algorithm, labels, ttl, expiration,
                           inception, self.tag) + self.signer_wire

    def signature(self, owner: bytes, labels: int, rdtype: int, ttl: int,
                  rdatas: list[bytes], inception: int, expiration: int) -> bytes:
        """The signature field (RFC 4034 3.1.8.1: the RRSIG RDATA less the signature, then
        each record in canonical form and order)."""
        prefix = owner + struct.pack("!HHI", rdtype, 1, ttl)
        data = self._header(rdtype, labels, ttl, inception, expiration) + b"".join(
            prefix + struct.pack("!H", len(rd)) + rd for rd in sorted(rdatas))
        if isinstance(self.private, ed25519.Ed25519PrivateKey):
            return self.private.sign(data)
        r, s = decode_dss_signature(self.private.sign(data, _ECDSA))
        return r.to_bytes(32, "big") + s.to_bytes(32, "big")
