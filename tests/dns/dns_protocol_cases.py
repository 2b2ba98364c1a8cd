"""The protocol corpus: one query per rcode and record case, answered over UDP and TCP.

Each case builds its query; its golden answer is ``golden/<case>.txt`` (the response's
``to_text()`` with the ID set to 0). ``regen_goldens.py`` rewrites them from a live server.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import dns.edns
import dns.message
import dns.name
import dns.opcode
import dns.rdataclass
import dns.rdatatype
import dns.rrset
from dns_helpers import make_query


@dataclass(frozen=True)
class Case:
    name: str
    build: Callable[[], dns.message.Message]
    transports: tuple[str, ...] = ("udp", "tcp")


def _two_questions() -> dns.message.Message:
    query = make_query("chat.infer.example.com", "A", edns=False)
    query.question.append(dns.rrset.RRset(dns.name.from_text("embed.infer.example.com."),
                                          dns.rdataclass.IN, dns.rdatatype.A))
    return query


def _opcode(opcode: dns.opcode.Opcode) -> Callable[[], dns.message.Message]:
    def build() -> dns.message.Message:
        query = make_query("chat.infer.example.com", "A", edns=False)
        query.set_opcode(opcode)
        return query
    return build


def _edns_version(version: int) -> Callable[[], dns.message.Message]:
    def build() -> dns.message.Message:
        query = make_query("chat.infer.example.com", "A")
        query.use_edns(version, 0, 1232)
        return query
    return build


CASES = [
    Case("service-a-ecs-eu", lambda: make_query("chat.infer.example.com", ecs="2.2.2.0/24")),
    Case("service-a-ecs-us", lambda: make_query("chat.infer.example.com", ecs="8.8.8.0/24")),
    Case("service-a-ecs-gb", lambda: make_query("chat.infer.example.com", ecs="81.2.69.0/24")),
    Case("service-aaaa-ecs-us",
         lambda: make_query("chat.infer.example.com", "AAAA", ecs="8.8.8.0/24")),
    Case("service-aaaa-nodata-eu",
         lambda: make_query("chat.infer.example.com", "AAAA", ecs="2.2.2.0/24")),
    Case("service-a-resolver-no-edns",
         lambda: make_query("chat.infer.example.com", edns=False)),
    Case("service-a-mixed-case", lambda: make_query("cHaT.InFeR.eXaMpLe.CoM", ecs="8.8.8.0/24")),
    Case("embed-a-ecs-eu", lambda: make_query("embed.infer.example.com", ecs="2.2.2.0/24")),
    Case("sovereign-a-no-ecs-refuses",
         lambda: make_query("sovereign.infer.example.com", edns=False)),
    Case("apex-soa", lambda: make_query("infer.example.com", "SOA")),
    Case("apex-ns-with-glue", lambda: make_query("infer.example.com", "NS")),
    Case("apex-a-nodata", lambda: make_query("infer.example.com", "A")),
    Case("apex-mx-nodata", lambda: make_query("infer.example.com", "MX", edns=False)),
    Case("glue-a", lambda: make_query("ns1.infer.example.com", "A")),
    Case("glue-aaaa", lambda: make_query("ns1.infer.example.com", "AAAA")),
    Case("glue-aaaa-nodata", lambda: make_query("ns2.infer.example.com", "AAAA")),
    Case("service-txt-nodata", lambda: make_query("chat.infer.example.com", "TXT")),
    Case("nxdomain", lambda: make_query("nope.infer.example.com", "A")),
    Case("nxdomain-below-service", lambda: make_query("x.chat.infer.example.com", "A")),
    Case("refused-outside-zone", lambda: make_query("example.org", "A")),
    Case("refused-parent", lambda: make_query("example.com", "SOA")),
    Case("refused-chaos-class",
         lambda: make_query("version.bind", "TXT", rdclass=dns.rdataclass.CH, edns=False)),
    Case("refused-axfr", lambda: make_query("infer.example.com", "AXFR", edns=False),
         transports=("tcp",)),
    Case("formerr-two-questions", _two_questions),
    Case("notimp-notify", _opcode(dns.opcode.NOTIFY)),
    Case("notimp-update", _opcode(dns.opcode.UPDATE)),
    Case("any-minimal-rfc8482", lambda: make_query("chat.infer.example.com", "ANY")),
    Case("any-apex", lambda: make_query("infer.example.com", "ANY")),
    Case("badvers", _edns_version(1)),
    Case("explain-tc-over-udp",
         lambda: make_query("_explain.chat.infer.example.com", "TXT", ecs="2.2.2.0/24",
                            payload=512), transports=("udp",)),
    Case("explain-over-tcp",
         lambda: make_query("_explain.chat.infer.example.com", "TXT", ecs="2.2.2.0/24"),
         transports=("tcp",)),
    Case("explain-aaaa-nodata", lambda: make_query("_explain.chat.infer.example.com", "AAAA")),
    Case("ecs-opt-out-source-0", lambda: make_query("chat.infer.example.com", ecs="0.0.0.0/0")),
    Case("ecs-on-location-independent-answer",
         lambda: make_query("infer.example.com", "SOA", ecs="2.2.2.0/24")),
    Case("ecs-on-nxdomain", lambda: make_query("nope.infer.example.com", ecs="8.8.8.0/24")),
    Case("do-and-cd-copied", lambda: make_query("chat.infer.example.com", ecs="8.8.8.0/24",
                                                want_dnssec=True, flags=0x0110)),
]

CASE_NAMES = [case.name for case in CASES]
