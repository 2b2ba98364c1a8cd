"""DNS wire format by hand, for the hot path: parse a common query, build tiny responses.

``parse_query`` accepts only the common shape: a QUERY with QR, TC and AA clear, one
question with an uncompressed name, no answer or authority records, and at most an OPT
record of version 0 whose options are well-formed (one valid ECS option at most; other
options are ignored, as the full path ignores them). Anything else returns None and goes
to the full dnspython path, which decides what it deserves.
"""

from __future__ import annotations

from typing import NamedTuple

from director.dns.types import EcsSubnet

OPT = 41
ECS_CODE = 8
_FAMILY_BITS = {1: 32, 2: 128}


class ParsedQuery(NamedTuple):
    qname: bytes  # wire format, lower-cased
    qtype: int
    qclass: int
    question_end: int  # offset just past the question section
    flags: int  # the query's RD and CD bits, as in header bytes 2-3
    edns: bool
    payload: int  # the client's UDP payload size (0 without EDNS)
    do: bool
    ecs: EcsSubnet | None


def parse_query(data: bytes) -> ParsedQuery | None:
    """The query's parts when it has the common shape, else None."""
    n = len(data)
    # QR, opcode, AA and TC clear (RD may be set); one question; no answer or authority.
    if n < 17 or data[2] & 0xFE or data[4:10] != b"\x00\x01\x00\x00\x00\x00":
        return None
    return _parse(data, n)


def _parse(data: bytes, n: int) -> ParsedQuery | None:
    arcount = (data[10] << 8) | data[11]
    if arcount > 1:
        return None
    i = 12
    while True:
        length = data[i]
        if length == 0:
            break
        if length > 63:
            return None  # compression pointer or reserved label type
        i += length + 1
        if i >= n:
            return None
    end = i + 5
    if end > n or i - 11 > 255:
        return None
    qname = data[12:i + 1].lower()
    qtype = (data[i + 1] << 8) | data[i + 2]
    qclass = (data[i + 3] << 8) | data[i + 4]
    flags = ((data[2] & 0x01) << 8) | (data[3] & 0x10)
    if arcount == 0:
        if end != n:
            return None
        return ParsedQuery(qname, qtype, qclass, end, flags, False, 0, False, None)
    # The OPT record: root owner, type 41, class = payload, TTL = ext-rcode/version/flags.
    if n < end + 11 or data[end] != 0 or data[end + 1] != 0 or data[end + 2] != OPT:
        return None
    if data[end + 5] != 0 or data[end + 6] != 0:  # extended rcode, version
        return None
    payload = (data[end + 3] << 8) | data[end + 4]
    do = bool(data[end + 7] & 0x80)
    rdlen = (data[end + 9] << 8) | data[end + 10]
    pos = end + 11
    if pos + rdlen != n:
        return None
    ecs = None
    while pos < n:
        if pos + 4 > n:
            return None
        code = (data[pos] << 8) | data[pos + 1]
        olen = (data[pos + 2] << 8) | data[pos + 3]
        pos += 4
        if pos + olen > n:
            return None
        if code == ECS_CODE:
            if ecs is not None:
                return None
            ecs = _parse_ecs(data[pos:pos + olen])
            if ecs is None:
                return None
        pos += olen
    return ParsedQuery(qname, qtype, qclass, end, flags, True, payload, do, ecs)


def _parse_ecs(value: bytes) -> EcsSubnet | None:
    """A valid query ECS option (RFC 7871 section 6), else None."""
    if len(value) < 4:
        return None
    family = (value[0] << 8) | value[1]
    source, scope = value[2], value[3]
    bits = _FAMILY_BITS.get(family)
    if bits is None or source > bits or scope != 0:
        return None
    address = value[4:]
    if len(address) != (source + 7) // 8:
        return None
    rest = source % 8
    if rest and address[-1] & (0xFF >> rest):
        return None
    return EcsSubnet(family, source, address)


def header_only(data: bytes, rcode: int) -> bytes:
    """A response of just a header: the query's ID, opcode and RD, QR set, ``rcode``."""
    flags_hi = 0x80 | (data[2] & 0x79)  # QR + opcode + RD
    return data[:2] + bytes((flags_hi, rcode & 0x0F)) + b"\x00" * 8


def formerr(data: bytes) -> bytes:
    """FORMERR for a query that could not be parsed: the header, plus the question and an
    OPT record when the raw bytes still show them in the usual places."""
    base = bytearray(header_only(data, 1))
    question = _raw_question(data)
    if question is None:
        return bytes(base)
    base[5] = 1  # QDCOUNT 1
    end = 12 + len(question)
    arcount = (data[10] << 8) | data[11]
    opt = b""
    if (arcount == 1 and data[6:10] == b"\x00\x00\x00\x00" and len(data) >= end + 11
            and data[end:end + 3] == b"\x00\x00\x29"):
        do = data[end + 7] & 0x80
        opt = b"\x00\x00\x29" + (1232).to_bytes(2, "big") + bytes((0, 0, do, 0)) + b"\x00\x00"
        base[11] = 1
    return bytes(base) + question + opt


def _raw_question(data: bytes) -> bytes | None:
    if len(data) < 17 or data[4:6] != b"\x00\x01":
        return None
    i = 12
    while i < len(data):
        length = data[i]
        if length == 0:
            end = i + 5
            return data[12:end] if end <= len(data) and i - 11 <= 255 else None
        if length > 63:
            return None
        i += length + 1
    return None


def question_length(response: bytes) -> int | None:
    """The length of the (single, uncompressed) question section of ``response``."""
    return None if (q := _raw_question(response)) is None else len(q)


def truncated(message: bytes) -> bytes:
    """The reply to a query (or a response) cut to header and question with QR and TC set:
    the query's ID, opcode, RD and CD (the RRL 'slip' answer)."""
    question = _raw_question(message) or b""
    counts = b"\x00\x01" if question else b"\x00\x00"
    return (message[:2] + bytes((0x82 | (message[2] & 0x79), message[3] & 0x10)) + counts
            + b"\x00" * 6 + question)


def question_names(data: bytes, question_end: int) -> dict[bytes, int]:
    """The compression table after the question: each suffix of the question's name but the
    root (lower-cased wire) -> its offset, as dnspython's renderer records them."""
    table: dict[bytes, int] = {}
    i = 12
    end = question_end - 4
    while i < end and data[i]:
        table.setdefault(data[i:end].lower(), i)
        i += data[i] + 1
    return table


def compressed_name(name: bytes, position: int, table: dict[bytes, int]) -> bytes:
    """``name`` (wire, uncompressed) written at ``position``, as dnspython writes it: up to
    the first suffix ``table`` knows, then a pointer; each suffix written in full is added
    to ``table`` (below offset 0x4000)."""
    out = bytearray()
    i = 0
    while name[i]:
        suffix = name[i:].lower()
        known = table.get(suffix)
        if known is not None:
            return bytes(out) + (0xC000 | known).to_bytes(2, "big")
        if position + len(out) <= 0x3FFF:
            table[suffix] = position + len(out)
        out += name[i:i + name[i] + 1]
        i += name[i] + 1
    return bytes(out) + b"\x00"
