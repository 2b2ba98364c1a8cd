"""The answer for a name under the apex that does not exist, written by hand for the fast
path: a flood of random names (the usual attack on an authoritative server) never reaches
the dnspython path, which builds and renders message objects for each, and a template,
which is per name, would never be reused.

- **Unsigned** (no DO, or no signer): NXDOMAIN, AA, the query's RD and CD, the question as
  sent, the zone's negative SOA. Byte for byte what the full path sends: the SOA's names
  are compressed into the question's as dnspython does (``wire.compressed_name``).
- **Signed** (DO and a ``ZoneSigner``): a compact denial (RFC 9824). NOERROR, the negative
  SOA and its RRSIGs (written once per signing epoch, names in full), the NSEC
  ``qname -> \\000.qname`` with RRSIG, NSEC and NXNAME, and its RRSIGs, one signature per
  zone signer made here; their owners point to the question's name (offset 12).

Both end with the OPT record when the query had EDNS: our payload, the query's DO, and
for an ECS query the option echoed with scope 0. ``answer`` says None when the response
would exceed the transport's limit (the full path truncates it).
``tests/dns/test_dns_denial_answer.py`` validates the answers and compares them with the
full path's.
"""

from __future__ import annotations

import struct

import dns.rdatatype

from director.dns.types import OUR_PAYLOAD
from director.dns.wire import ParsedQuery, compressed_name, question_names
from director.dns.zone import ZoneData
from director.dnssec.denial import nxname_nsec
from director.dnssec.signer import ZoneSigner

_QR_AA = 0x8400
_NXDOMAIN = 3
_OPT = b"\x00\x00\x29" + OUR_PAYLOAD.to_bytes(2, "big")
_NSEC, _RRSIG = int(dns.rdatatype.NSEC), int(dns.rdatatype.RRSIG)


class DenialAnswer:
    """Answers for names one zone does not hold, signed with ``signer`` when asked."""

    def __init__(self, zone: ZoneData, signer: ZoneSigner | None) -> None:
        self.zone = zone
        self.signer = signer
        self.ttl = zone.negative_ttl
        self.apex = zone.apex.canonicalize().to_wire() or b""
        (soa,) = list(zone.negative_soa)
        self._apex_name = zone.apex.to_wire() or b""
        self._mname = soa.mname.to_wire() or b""
        self._rname = soa.rname.to_wire() or b""
        self._soa_numbers = struct.pack("!IIIII", soa.serial, soa.refresh, soa.retry,
                                        soa.expire, soa.minimum)
        self._epoch: tuple | None = None
        self._signed_soa = b""
        self._signed_soa_count = 0
        (nsec,) = list(nxname_nsec(zone.apex, self.ttl))
        self._bitmap = b"".join(bytes((window, len(bits))) + bits
                                for window, bits in nsec.windows)

    def covers(self, parsed: ParsedQuery) -> bool:
        """Whether ``parsed`` (a name the zone does not hold) is under the apex, so that its
        answer is a denial (not REFUSED: a name that only ends in the apex's bytes)."""
        qname, apex = parsed.qname, self.apex
        if not qname.endswith(apex) or len(qname) == len(apex):
            return False
        i, cut = 0, len(qname) - len(apex)
        while i < cut:
            i += qname[i] + 1
        return i == cut

    def answer(self, data: bytes, parsed: ParsedQuery, limit: int) -> bytes | None:
        """The response to ``data``, a query ``covers`` accepts, or None when over
        ``limit`` bytes."""
        if parsed.do and self.signer is not None:
            tail, authority, rcode = self._signed(parsed.qname, self.signer)
        else:
            tail, authority, rcode = self._unsigned(data, parsed), 1, _NXDOMAIN
        ecs = parsed.ecs
        if parsed.edns:
            tail += _OPT + (b"\x00\x00\x80\x00" if parsed.do else b"\x00\x00\x00\x00")
            if ecs is None:
                tail += b"\x00\x00"
            else:
                length = 4 + len(ecs.address)
                tail += ((4 + length).to_bytes(2, "big") + b"\x00\x08"
                         + length.to_bytes(2, "big") + ecs.family.to_bytes(2, "big")
                         + bytes((ecs.source, 0)) + ecs.address)
        if parsed.question_end + len(tail) > limit:
            return None
        header = struct.pack("!HHHHH", _QR_AA | parsed.flags | rcode, 1, 0, authority,
                             1 if parsed.edns else 0)
        return data[:2] + header + data[12:parsed.question_end] + bytes(tail)

    def _unsigned(self, data: bytes, parsed: ParsedQuery) -> bytearray:
        """The negative SOA compressed as the full path compresses it (its names point
        into the question's), so both paths send the same bytes."""
        table = question_names(data, parsed.question_end)
        start = parsed.question_end
        owner = compressed_name(self._apex_name, start, table)
        rdata_at = start + len(owner) + 10
        mname = compressed_name(self._mname, rdata_at, table)
        rname = compressed_name(self._rname, rdata_at + len(mname), table)
        rdata = mname + rname + self._soa_numbers
        return bytearray(owner + struct.pack("!HHIH", 6, 1, self.ttl, len(rdata)) + rdata)

    def _signed(self, qname: bytes, signer: ZoneSigner) -> tuple[bytearray, int, int]:
        """The authority section of a compact denial, its record count and rcode."""
        if signer.epoch() is not self._epoch:
            self._epoch = signer.epoch()
            soa = self.zone.negative_soa
            soa_sigs = signer.sign(soa)
            rrsets = (soa,) if soa_sigs is None else (soa, soa_sigs)
            self._signed_soa = _records(rrsets, self.zone.apex.to_wire() or b"")
            self._signed_soa_count = sum(len(rrset) for rrset in rrsets)
        nsec = b"\x01\x00" + qname + self._bitmap
        sigs = signer.rrsig_rdatas(qname, _labels(qname), _NSEC, self.ttl, [nsec])
        ttl = struct.pack("!I", self.ttl)
        tail = bytearray(self._signed_soa)
        tail += b"\xc0\x0c" + struct.pack("!HH", _NSEC, 1) + ttl + struct.pack(
            "!H", len(nsec)) + nsec
        for sig in sigs:
            tail += b"\xc0\x0c" + struct.pack("!HH", _RRSIG, 1) + ttl + struct.pack(
                "!H", len(sig)) + sig
        return tail, self._signed_soa_count + 1 + len(sigs), 0


def _records(rrsets, owner: bytes) -> bytes:
    """``rrsets`` (all owned by ``owner``) in wire form, names in full."""
    out = bytearray()
    for rrset in rrsets:
        for rdata in rrset:
            rd = rdata.to_wire() or b""
            out += owner + struct.pack("!HHIH", rrset.rdtype, 1, rrset.ttl, len(rd)) + rd
    return bytes(out)


def _labels(qname: bytes) -> int:
    """The number of labels of a wire name (the root's not counted)."""
    count, i = 0, 0
    while qname[i]:
        count += 1
        i += qname[i] + 1
    return count
