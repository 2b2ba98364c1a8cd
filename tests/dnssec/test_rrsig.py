"""RRSIGs made by hand equal dnspython's, byte for byte (both deterministic), and
validate, for every record shape the zone signs and both algorithms."""

from __future__ import annotations

import dns.dnssec
import dns.name
import dns.rrset
import pytest

from director.dnssec.denial import nxname_nsec
from director.dnssec.keys import ED25519, Role, generate
from director.dnssec.rrsig import RrsetSigner

APEX = dns.name.from_text("z.test")
RRSETS = [
    dns.rrset.from_text_list("api.z.test.", 30, "IN", "A", ["10.0.0.2", "10.0.0.1"]),
    dns.rrset.from_text_list("Api.Z.test.", 5, "IN", "AAAA", ["2001:db8::1"]),
    dns.rrset.from_text("z.test.", 300, "IN", "SOA", "ns1.z.test. h.z.test. 1 2 3 4 5"),
    dns.rrset.from_text_list("z.test.", 300, "IN", "NS", ["ns2.z.test.", "NS1.z.test."]),
    dns.rrset.from_text("*.w.z.test.", 60, "IN", "TXT", '"wild"'),
    nxname_nsec(dns.name.from_text("missing.z.test"), 30),
]


@pytest.mark.parametrize("algorithm", [13, ED25519])
def test_hand_made_rrsigs_equal_dnspythons_and_validate(algorithm: int) -> None:
    key = generate("z.test", Role.CSK, 0.0, algorithm=algorithm)
    signer = RrsetSigner(key, APEX)
    keys = {APEX: dns.rrset.from_rdata(APEX, 300, key.dnskey)}
    for rrset in RRSETS:
        ours = signer.sign(rrset, 1_700_000_000, 1_800_000_000)
        theirs = dns.dnssec.sign(rrset, key.private_key, APEX, key.dnskey,
                                 inception=1_700_000_000, expiration=1_800_000_000)
        assert ours.to_wire() == theirs.to_wire(), rrset
        dns.dnssec.validate(rrset, dns.rrset.from_rdata(rrset.name, rrset.ttl, ours), keys,
                            now=1_750_000_000)
