"""The full path: wire bytes -> dnspython message -> handler -> wire bytes.

Drops what must not be answered (shorter than a header, or a response: QR set), answers
NOTIMP for opcodes other than QUERY from the header alone, FORMERR for anything dnspython
cannot parse, and renders the handler's response within the transport's size limit: over
UDP min(client payload, 1232) with EDNS (at least 512), 512 without; a response over the
limit is sent empty with TC set so the client retries over TCP. An internal error answers
SERVFAIL (logged) rather than crash the server.
"""

from __future__ import annotations

import logging
from typing import NamedTuple

import dns.exception
import dns.flags
import dns.message
import dns.rcode

from director.dns import wire
from director.dns.handler import Handler
from director.dns.types import OUR_PAYLOAD, TCP_LIMIT, UDP_LIMIT_NO_EDNS, Outcome

log = logging.getLogger(__name__)

NO_OUTCOME = Outcome(cacheable=False)


class Reply(NamedTuple):
    wire: bytes | None  # None: send nothing
    outcome: Outcome
    rcode: int
    qtype: int  # 0 when the question could not be read


class Responder:
    """Answers raw queries through the dnspython path."""

    def __init__(self, handler: Handler) -> None:
        self.handler = handler

    def respond(self, data: bytes, host: str, tcp: bool) -> Reply:
        """The reply to the raw query ``data`` from ``host`` over UDP or TCP."""
        if len(data) < 12 or data[2] & 0x80:
            return Reply(None, NO_OUTCOME, -1, 0)
        if data[2] & 0x78:
            return Reply(wire.header_only(data, dns.rcode.NOTIMP), NO_OUTCOME,
                         dns.rcode.NOTIMP, 0)
        try:
            query = dns.message.from_wire(data)
        except Exception:  # dnspython raises many types for malformed input
            return Reply(wire.formerr(data), NO_OUTCOME, dns.rcode.FORMERR, 0)
        qtype = query.question[0].rdtype if query.question else 0
        try:
            response, outcome = self.handler.resolve(query, host)
            return Reply(render(query, response, tcp), outcome, response.rcode(), qtype)
        except Exception:
            log.exception("internal error answering a query from %s", host)
            return Reply(wire.header_only(data, dns.rcode.SERVFAIL), NO_OUTCOME,
                         dns.rcode.SERVFAIL, qtype)


def size_limit(query: dns.message.Message, tcp: bool) -> int:
    """How large a response to ``query`` may be on this transport."""
    if tcp:
        return TCP_LIMIT
    if query.edns < 0:
        return UDP_LIMIT_NO_EDNS
    return max(UDP_LIMIT_NO_EDNS, min(query.payload, OUR_PAYLOAD))


def render(query: dns.message.Message, response: dns.message.Message, tcp: bool) -> bytes:
    """``response`` in wire format; empty with TC set when over the size limit."""
    limit = size_limit(query, tcp)
    try:
        # No shuffling: answers must be a function of the query (the caches rely on it).
        return response.to_wire(max_size=limit, want_shuffle=False)
    except dns.exception.TooBig:
        response.answer = []
        response.authority = []
        response.additional = []
        response.flags |= dns.flags.TC
        return response.to_wire(max_size=limit, want_shuffle=False)
