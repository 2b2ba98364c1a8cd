"""A service's A/AAAA answer template written by hand, without the dnspython path.

The fast path answers a query from a template (``fastpath.Template``): the response header,
then the question as sent, then everything after the question less the ECS address, then
the address as sent. The first query of each shape and decision class used to build its
template through the full dnspython path (about 250 us); after a policy swap every
template is new, so the first few hundred queries ran at that cost while the rest queued
behind them. ``service_template`` writes the same bytes directly for the common case, an
answer with addresses to a query ``wire.parse_query`` accepted, and says None for anything
else (no address for the decided regions, or a response over the transport's size limit,
which the full path truncates).

The bytes are those of ``Handler`` rendered by ``responder.render``: QR, AA and the query's
RD and CD; one question; one A or AAAA record per distinct address of the decided regions,
in region order, owner compressed to the question's name (offset 12), the decision's TTL;
then, when the query had EDNS, an OPT record with our payload size, the query's DO bit and,
when it had ECS, the ECS option echoed with the answer's scope (0 for source 0).
``tests/dns/test_dns_service_answer.py`` compares them with the full path.
"""

from __future__ import annotations

import ipaddress

from director.dns.types import OUR_PAYLOAD
from director.dns.wire import ParsedQuery

A, AAAA = 1, 28
_QR_AA = 0x8400  # QR and AA; opcode QUERY and rcode NOERROR are zero
_OPT = b"\x00\x00\x29" + OUR_PAYLOAD.to_bytes(2, "big")  # root owner, type OPT, our payload


def packed_addresses(addresses: list[str]) -> list[bytes]:
    """The addresses' wire forms, distinct, in order (equal addresses written differently,
    such as ``::1`` and ``0::1``, are one record, as in an RRset)."""
    seen: dict[bytes, None] = {}
    for address in addresses:
        seen.setdefault(ipaddress.ip_address(address).packed, None)
    return list(seen)


def service_template(parsed: ParsedQuery, packed: list[bytes], ttl: int, scope: int,
                     limit: int) -> tuple[bytes, bytes] | None:
    """(response bytes 2..12, the bytes after the question less the ECS address) of the
    answer with the records ``packed`` (all of the query's type), or None when there are
    none or the response would exceed ``limit`` bytes."""
    if not packed:
        return None
    rdtype = A if len(packed[0]) == 4 else AAAA
    record = (b"\xc0\x0c" + rdtype.to_bytes(2, "big") + b"\x00\x01" + ttl.to_bytes(4, "big")
              + len(packed[0]).to_bytes(2, "big"))
    tail = b"".join(record + address for address in packed)
    ecs = parsed.ecs
    if parsed.edns:
        flags = b"\x00\x00" + (b"\x80" if parsed.do else b"\x00") + b"\x00"
        if ecs is None:
            tail += _OPT + flags + b"\x00\x00"
        else:
            length = 4 + len(ecs.address)
            tail += (_OPT + flags + (4 + length).to_bytes(2, "big") + b"\x00\x08"
                     + length.to_bytes(2, "big") + ecs.family.to_bytes(2, "big")
                     + bytes((ecs.source, scope if ecs.source else 0)))
    size = parsed.question_end + len(tail) + (len(ecs.address) if ecs is not None else 0)
    if size > limit:
        return None
    header = ((_QR_AA | parsed.flags).to_bytes(2, "big") + b"\x00\x01"
              + len(packed).to_bytes(2, "big") + b"\x00\x00"
              + (b"\x00\x01" if parsed.edns else b"\x00\x00"))
    return header, tail
