"""The DNS handler: a pure function from a parsed query to a response (dnspython messages).

``Handler.resolve(query, host)`` answers one query from the querying address ``host`` and
returns the response with its ``Outcome`` (for metrics and caching). It never raises for
valid messages and never does I/O: the decision comes from ``Decisions`` (memoised engine
over an immutable snapshot). Rendering to wire, UDP truncation and parse errors belong to
``director.dns.responder``.

Cases: AA answers for A/AAAA of services (every endpoint of the decided regions), SOA and
NS at the apex (NS with glue in the additional section), glue names' A/AAAA, NODATA with SOA
for other types at existing names, NXDOMAIN with SOA under the apex, REFUSED outside the
zone (and for non-IN classes and zone transfers), FORMERR for malformed queries (several
questions, a malformed or duplicated ECS option, qtype OPT or NXNAME), NOTIMP for opcodes other than
QUERY, BADVERS for EDNS versions above 0, one synthesised HINFO "RFC8482" RRset for ANY
(RFC 8482), and ``_explain.<service>`` TXT for admin networks (REFUSED to anyone else).
ECS (RFC 7871) is echoed with the decision's scope, or scope 0 when the answer did not
depend on the client.

With a ``ZoneSigner`` and the DO bit set, every authoritative answer carries its RRSIGs,
the apex answers DNSKEY, CDS and CDNSKEY, and denial is compact (RFC 9824): NOERROR with
one NSEC at the name asked (``director.dnssec.denial``) instead of NXDOMAIN. With a
``PresignedSigner`` (a keyless edge) the signatures come from the control plane, denial is
a classic NSEC chain, and an answer it has no signature for is SERVFAIL (not cached).
"""

from __future__ import annotations

import ipaddress
from typing import cast

import dns.edns
import dns.flags
import dns.message
import dns.name
import dns.opcode
import dns.rcode
import dns.rdataclass
import dns.rdatatype
import dns.rdtypes.ANY.HINFO
import dns.rrset

from director.dns.decisions import Answered, Decisions
from director.dns.explain import explain_rrset
from director.dns.types import OUR_PAYLOAD, EcsSubnet, Outcome
from director.dns.zone import Node, NodeKind, ZoneData
from director.dnssec.denial import NXNAME, compact_nsec, nxname_nsec
from director.dnssec.presigned import PresignedSigner
from director.dnssec.signer import Unsigned, ZoneSigner
from director.dnssec.variants import nsec_at, nsec_without, nxdomain_proof
from telemetry.correlation import correlation_id

A, AAAA = dns.rdatatype.A, dns.rdatatype.AAAA
REFUSED_TYPES = frozenset({dns.rdatatype.AXFR, dns.rdatatype.IXFR})
# OPT is no question; NXNAME only marks compact denials (RFC 9824 section 3.5)
FORMERR_TYPES = frozenset({dns.rdatatype.OPT, NXNAME})
_COPIED_FLAGS = dns.flags.RD | dns.flags.CD
_KEY_TYPES = (dns.rdatatype.DNSKEY, dns.rdatatype.CDS, dns.rdatatype.CDNSKEY)


class MalformedQuery(Exception):
    """A query that parsed as DNS but breaks a rule of the protocol (answered FORMERR)."""


class Handler:
    """Answers queries for one zone; immutable apart from the memo inside ``decisions``
    (and the signature cache inside ``signer``)."""

    def __init__(self, zone: ZoneData, decisions: Decisions,
                 signer: ZoneSigner | PresignedSigner | None = None) -> None:
        self.zone = zone
        self.decisions = decisions
        self.signer = signer

    def handle(self, query: dns.message.Message, host: str) -> dns.message.Message:
        """The response to ``query`` asked from the address ``host``."""
        return self.resolve(query, host)[0]

    def resolve(self, query: dns.message.Message,
                host: str) -> tuple[dns.message.Message, Outcome]:
        """The response and what it was (service, regions, reason, whether cacheable)."""
        if query.opcode() != dns.opcode.QUERY:
            return error_response(query, dns.rcode.NOTIMP, edns=False), Outcome()
        if query.edns > 0:
            return error_response(query, dns.rcode.BADVERS), Outcome()
        try:
            ecs = query_ecs(query)
        except MalformedQuery:
            return error_response(query, dns.rcode.FORMERR), Outcome()
        if len(query.question) != 1 or query.question[0].rdtype in FORMERR_TYPES:
            return error_response(query, dns.rcode.FORMERR, ecs=ecs), Outcome()
        response = _response(query)
        outcome = self._answer(query.question[0], response, ecs, host)
        if (self.signer is not None and query.ednsflags & dns.flags.DO
                and response.flags & dns.flags.AA):
            try:
                self._sign(query.question[0], response, self.signer)
            except Unsigned:  # a keyless edge without this answer's signature, or no key
                failed = error_response(query, dns.rcode.SERVFAIL, ecs=ecs)
                return failed, Outcome(outcome[0].service, cacheable=False)
        _set_edns(query, response, ecs, outcome[1])
        return response, outcome[0]

    def _sign(self, question: dns.rrset.RRset, response: dns.message.Message,
              signer: ZoneSigner | PresignedSigner) -> None:
        """The denial for a negative answer, then the RRSIGs of every RRset (``Unsigned``
        from an edge without the signature)."""
        name, ttl = question.name, self.zone.negative_ttl
        node = self.zone.lookup(name)
        if response.rcode() == dns.rcode.NXDOMAIN:
            if signer.compact:
                response.set_rcode(dns.rcode.NOERROR)
                response.authority.append(nxname_nsec(name, ttl))
            else:
                response.authority.extend(nxdomain_proof(signer.chain, self.zone, name))
        elif not response.answer and response.rcode() == dns.rcode.NOERROR:
            if not signer.compact and node is not None:
                response.authority.append(nsec_without(nsec_at(signer.chain, name),
                                                       question.rdtype))
            else:
                types = self.zone.types_at(node) if node is not None else ()
                if node is not None and node.kind is NodeKind.APEX:
                    types = (*types, *(rrset.rdtype for rrset in
                                       (signer.dnskeys, signer.cds, signer.cdnskey) if rrset))
                response.authority.append(compact_nsec(name, ttl, types, question.rdtype))
        signer.sign_response(response)

    def _answer(self, question: dns.rrset.RRset, response: dns.message.Message,
                ecs: EcsSubnet | None, host: str) -> tuple[Outcome, int]:
        """Fill ``response``; return the outcome and the ECS scope to echo."""
        name, rdtype = question.name, question.rdtype
        zone = self.zone
        if (question.rdclass != dns.rdataclass.IN or not zone.in_zone(name)
                or rdtype in REFUSED_TYPES):
            response.set_rcode(dns.rcode.REFUSED)
            return Outcome(), 0
        node = zone.lookup(name)
        if node is not None and node.kind is NodeKind.EXPLAIN:
            return self._explain(node, response, ecs, host, rdtype)
        response.flags |= dns.flags.AA
        if node is None:
            response.set_rcode(dns.rcode.NXDOMAIN)
            response.authority.append(zone.negative_soa)
            return Outcome(), 0
        if rdtype == dns.rdatatype.ANY and node.kind is not NodeKind.EMPTY:
            response.answer.append(_hinfo(node.name, zone.ttl))
            return _outcome(node), 0
        if node.kind is NodeKind.SERVICE and rdtype in (A, AAAA):
            return self._service(node, response, ecs, host, rdtype)
        if node.kind is NodeKind.APEX and rdtype == dns.rdatatype.SOA:
            response.answer.append(zone.soa)
        elif node.kind is NodeKind.APEX and rdtype == dns.rdatatype.NS:
            response.answer.append(zone.ns)
            response.additional.extend(zone.glue)
        elif node.kind is NodeKind.APEX and (keys := self._keys(rdtype)) is not None:
            response.answer.append(keys)
        elif node.kind is NodeKind.GLUE and rdtype in (A, AAAA) and _glue(node, rdtype):
            response.answer.append(dns.rrset.from_text_list(
                node.name, zone.ttl, "IN", rdtype, list(_glue(node, rdtype))))
        else:
            response.authority.append(zone.negative_soa)
        return _outcome(node), 0

    def _keys(self, rdtype: int) -> dns.rrset.RRset | None:
        """The apex's DNSKEY, CDS or CDNSKEY RRset when signing (None if empty or another
        type)."""
        signer = self.signer
        if signer is None or rdtype not in _KEY_TYPES:
            return None
        rrset = {dns.rdatatype.DNSKEY: signer.dnskeys, dns.rdatatype.CDS: signer.cds,
                 dns.rdatatype.CDNSKEY: signer.cdnskey}[cast(dns.rdatatype.RdataType, rdtype)]
        return rrset or None

    def _service(self, node: Node, response: dns.message.Message, ecs: EcsSubnet | None,
                 host: str, rdtype: int) -> tuple[Outcome, int]:
        service = node.service
        if service is None:  # SERVICE nodes always carry their service
            raise TypeError(f"service node {node.name} without a service")
        answered: Answered = self.decisions.answer(service, ecs, host)
        decision = answered.decision
        addresses = self.zone.addresses(decision.regions, rdtype, self.decisions.current()[0])
        if addresses:
            response.answer.append(dns.rrset.from_text_list(
                node.name, int(decision.ttl), "IN", cast(dns.rdatatype.RdataType, rdtype),
                addresses))
        else:
            response.authority.append(self.zone.negative_soa)
        outcome = Outcome(service.name, decision.regions, decision.reason,
                          cacheable=self.decisions.cacheable(service))
        return outcome, answered.scope

    def _explain(self, node: Node, response: dns.message.Message, ecs: EcsSubnet | None,
                 host: str, rdtype: int) -> tuple[Outcome, int]:
        service = node.service
        if service is None:
            raise TypeError(f"explain node {node.name} without a service")
        if not self.zone.is_admin(host):
            response.set_rcode(dns.rcode.REFUSED)
            return Outcome(service.name, cacheable=False), 0
        response.flags |= dns.flags.AA
        if rdtype not in (dns.rdatatype.TXT, dns.rdatatype.ANY):
            response.authority.append(self.zone.negative_soa)
            return Outcome(service.name, cacheable=False), 0
        answered = self.decisions.explain(service, ecs, host)
        address = (ipaddress.ip_address(ecs.packed()) if ecs is not None and ecs.source
                   else host)
        response.answer.append(explain_rrset(node.name, answered.decision, answered.scope,
                                             correlation_id(service.name, address)))
        decision = answered.decision
        return Outcome(service.name, decision.regions, decision.reason, cacheable=False), \
            answered.scope


def query_ecs(query: dns.message.Message) -> EcsSubnet | None:
    """The query's ECS option, validated beyond what dnspython checks when parsing it
    (family, prefix lengths, address length, padding bits): one option at most, scope 0."""
    found = [option for option in query.options if option.otype == dns.edns.OptionType.ECS]
    if not found:
        return None
    if len(found) > 1:
        raise MalformedQuery("more than one ECS option")
    option = found[0]
    if not isinstance(option, dns.edns.ECSOption) or option.scopelen != 0:
        raise MalformedQuery("ECS scope prefix must be 0 in queries")
    return EcsSubnet(option.family, option.srclen, option.addrdata)


def error_response(query: dns.message.Message, rcode: dns.rcode.Rcode, *, edns: bool = True,
                   ecs: EcsSubnet | None = None) -> dns.message.Message:
    """A response with ``rcode``, the question echoed and nothing else (OPT if asked)."""
    response = _response(query, edns=edns)
    response.set_rcode(rcode)
    if edns and ecs is not None:
        _set_edns(query, response, ecs, 0)
    return response


def _response(query: dns.message.Message, edns: bool = True) -> dns.message.Message:
    response = dns.message.QueryMessage(id=query.id)
    response.flags = dns.flags.QR | (query.flags & _COPIED_FLAGS)
    response.set_opcode(query.opcode())
    response.question = list(query.question)
    if edns and query.edns >= 0:
        response.use_edns(0, query.ednsflags & dns.flags.DO, OUR_PAYLOAD)
    return response


def _set_edns(query: dns.message.Message, response: dns.message.Message,
              ecs: EcsSubnet | None, scope: int) -> None:
    if ecs is None or query.edns < 0:
        return
    address = dns.edns.ECSOption(_ecs_text(ecs), ecs.source, scope if ecs.source else 0)
    response.use_edns(0, query.ednsflags & dns.flags.DO, OUR_PAYLOAD, options=[address])


def _ecs_text(ecs: EcsSubnet) -> str:
    return str(ipaddress.ip_address(ecs.packed()))


def _glue(node: Node, rdtype: int) -> tuple[str, ...]:
    return node.v4 if rdtype == A else node.v6


def _hinfo(name: dns.name.Name, ttl: int) -> dns.rrset.RRset:
    rrset = dns.rrset.RRset(name, dns.rdataclass.IN, dns.rdatatype.HINFO)
    rrset.add(dns.rdtypes.ANY.HINFO.HINFO(dns.rdataclass.IN, dns.rdatatype.HINFO,
                                          b"RFC8482", b""), ttl)
    return rrset


def _outcome(node: Node) -> Outcome:
    return Outcome(node.service.name if node.service is not None else "")
