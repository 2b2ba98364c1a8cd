"""The hot path: finished wire answers from caches, no dnspython objects on a hit.

Three caches in front of the full path (``Responder``), in one bounded ``AnswerCache``.
The memo and the lanes are dropped when a new snapshot changes what answers read (the
decisions' generation: ``answer_inputs``), the templates only when the policy is replaced
(a new ``FastPath``): each renders a decision class, whatever the state. A snapshot that
changes no answer keeps them all, except the answers whose client network was widened only
part way (``Answered.settled``), the oldest of which are asked again and widen further:

1. **memo**: the query bytes after the 2-byte ID -> the response bytes after the ID. The
   response is ``query id + cached bytes``. Answers that depend on the resolver's address
   (service A/AAAA without ECS) are kept per resolver address. Exact, because the full path
   is a function of the query bytes, the resolver address and the snapshot.
2. **lanes** (``lanes``), UDP only: ECS queries from subnets never seen before, answered
   by query shape and network-map network alone when the decisions made the answer from the
   map (``Answered.lane``); they are not added to the memo, which they would only churn.
3. **templates**: the query parsed by hand (``wire.parse_query``) keyed by (lower-cased
   qname, qtype, qclass, RD/CD, EDNS payload bucket and DO, ECS family and source prefix,
   transport, and for service A/AAAA the decision class: regions, TTL, ECS scope, reason,
   the regions' endpoints known down)
   -> the response header and the bytes after the question. The response is ``id + header +
   the question as sent + template + the ECS address as sent``; byte-identical to the full
   path because name compression is case-insensitive and points into the question, and
   the same under any state, because the state reaches a response only through the
   decision class. A service's A/AAAA template is written by hand (``service_answer``),
   so the first query of each class after a policy swap costs microseconds, not a full
   path; anything it declines is cut from the full path's response.

Signed answers (DO set, a ``ZoneSigner`` in the handler) are cached like the rest, for as
long as the signer's ``epoch`` (validity window and key set) lasts: a new epoch drops every
table, templates included. A service's signed A/AAAA template comes from the full path; a
denial of a name that does not exist, signed or not, is written by hand
(``denial_answer``): one signature per signed query, and no template per random name.

Anything else (parse_query says no, ``_explain``, services whose answers are random) goes
to the full path uncached. Every answer is counted by (service, qtype, rcode, regions,
reason) in ``DnsStats``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple, cast

import dns.rcode
import dns.rdatatype

from director.dns.answer_cache import AnswerCache
from director.dns.decisions import RETRY_PER_SNAPSHOT, Answered, Decisions
from director.dns.denial_answer import DenialAnswer
from director.dns.handler import FORMERR_TYPES, REFUSED_TYPES
from director.dns.lanes import SubnetLanes, lane_layout
from director.dns.metrics import DnsStats
from director.dns.responder import Reply, Responder
from director.dns.service_answer import packed_addresses, service_template
from director.dns.snapshot_source import SnapshotSource
from director.dns.types import OUR_PAYLOAD, TCP_LIMIT, UDP_LIMIT_NO_EDNS, Outcome
from director.dns.wire import ParsedQuery, parse_query
from director.dns.zone import NodeKind, ZoneData
from director.dnssec.presigned import PresignedSigner
from director.dnssec.signer import ZoneSigner
from director.engine.snapshot import Snapshot
from policies.model import Service

# Queries answered once from a lane or as a denial, by a byte of their hash in a slot of a
# fixed table: no Python objects to churn (a set of hashes left the allocator 20 MB higher
# after a stream of one-off subnets). Slots are overwritten, so a repeat may need a third
# sighting, and one query in 256 of a slot's others enters the memo early: both harmless.
SEEN_BITS = 20
SEEN_MASK = (1 << SEEN_BITS) - 1
_ADDRESS_TYPES = (dns.rdatatype.A, dns.rdatatype.AAAA)
_NOT_DENIED = REFUSED_TYPES | FORMERR_TYPES  # the handler's answer to these is no denial
_LABELLED_TYPES = frozenset(("A", "AAAA", "SOA", "NS", "TXT", "ANY", "MX", "CNAME", "PTR",
                             "SRV", "HTTPS", "SVCB", "DS", "DNSKEY", "CAA", "HINFO", "AXFR",
                             "IXFR"))

Labels = tuple[str, str, str, str, str]
LaneLookup = Callable[[bytes], "tuple[bytes, int] | None"]


class Template(NamedTuple):
    header: bytes  # response bytes 2..12: flags and counts
    tail: bytes  # everything after the question, minus the trailing ECS address
    slot: int  # the metrics counter of its labels (DnsStats.label_id)


class FastPath:
    """Answers queries from caches and fills them from the full path."""

    def __init__(self, responder: Responder, zone: ZoneData, decisions: Decisions,
                 snapshots: SnapshotSource, stats: DnsStats) -> None:
        self.responder = responder
        self.zone = zone
        self.decisions = decisions
        self.snapshots = snapshots
        self.stats = stats
        self._counts = stats.counts
        self._snapshot: object = None
        self._generation = -1  # the decisions' generation the caches were filled under
        self._unsettled: list[tuple[dict, bytes]] = []  # (memo, query) of unsettled answers
        self.cache = AnswerCache()  # the memo (udp, tcp) and the templates
        self.signer = responder.handler.signer
        # a keyless edge denies DO queries with its pre-signed NSEC chain (the full path)
        signer = self.signer
        self._keyless = isinstance(signer, PresignedSigner)
        self._denial = DenialAnswer(zone, signer if isinstance(signer, ZoneSigner) else None)
        self._denial_slots: dict[tuple[int, int], int] = {}  # (qtype, rcode) -> metric slot
        self._sign_epoch = self.signer.epoch() if self.signer is not None else None
        self._lanes: SubnetLanes | None = None
        self._seen = bytearray(1 << SEEN_BITS)

    def respond(self, data: bytes, host: str, tcp: bool = False) -> bytes | None:
        """The response to the raw query ``data`` from ``host``, or None to send nothing."""
        if self._stale():
            self._reset()
        if tcp:
            return self._answer(data, host, True, self.cache.tcp)
        return self._answer(data, host, False, self.cache.udp)

    def udp_responder(self) -> Callable[[bytes, tuple], bytes | None]:
        """``respond`` for UDP, taking the socket address, without the per-query snapshot
        check: call this once per batch of datagrams handled in one event-loop callback (a
        snapshot swap, made by another task of the same loop, cannot happen inside it)."""
        if self._stale():
            self._reset()
        answer, memo = self._answer, self.cache.udp

        def respond_udp(data: bytes, addr: tuple) -> bytes | None:
            return answer(data, addr[0], False, memo)

        return respond_udp

    def udp_memo(self) -> tuple[dict[bytes, object], list[int], LaneLookup]:
        """The UDP memo (query bytes after the ID -> (response bytes after the ID, metric
        slot), or a dict of those by resolver address), the metric counters and the lane
        lookup (``lane_answer``), for a transport that answers memo hits itself; call once
        per batch, like ``udp_responder``."""
        if self._stale():
            self._reset()
        return self.cache.udp, self._counts, self.lane_answer

    def lane_answer(self, query: bytes) -> tuple[bytes, int] | None:
        """(response less its ID, metrics slot) from the lanes for a UDP query less its ID
        that missed the memo, or None (see ``lanes``). A query answered this way a second
        time enters the memo (the first time, a byte of its hash is kept: ``SEEN_BITS``):
        repeated queries are answered from there, and one-offs never churn it."""
        lanes = self._lanes
        if lanes is None:
            return None
        entry = lanes.answer(query)
        if entry is not None and self._seen_before(query):
            self.cache.put(self.cache.udp, query, entry)
        return entry

    def _seen_before(self, query: bytes) -> bool:
        """Whether ``query`` (less its ID) was answered once already, by a byte of its hash
        kept in a slot of ``_seen`` (``SEEN_BITS``); marks it seen."""
        digest = hash(query)  # cached in the bytes object by the memo lookup
        slot, tag = digest & SEEN_MASK, (digest >> SEEN_BITS) & 0xFF or 1
        if self._seen[slot] == tag:
            return True
        self._seen[slot] = tag
        return False

    def _answer(self, data: bytes, host: str, tcp: bool, memo: dict) -> bytes | None:
        entry = memo.get(data[2:])
        if entry is not None:
            if entry.__class__ is dict:
                entry = entry.get(host)
            if entry is not None:
                self._counts[entry[1]] += 1
                return data[:2] + entry[0]
        elif not tcp and self._lanes is not None:
            entry = self.lane_answer(data[2:])
            if entry is not None:
                self._counts[entry[1]] += 1
                return data[:2] + entry[0]
        return self._slow(data, host, tcp, memo)

    def udp_memo_if_fresh(self) -> dict[bytes, object] | None:
        """The UDP memo for a reader on another thread, read-only: None while it belongs to
        an older snapshot (the event-loop thread, answering what the reader hands over,
        resets it)."""
        snapshot = self._snapshot
        memo = self.cache.udp
        signer = self.signer
        if signer is not None and signer.epoch() is not self._sign_epoch:
            return None
        return memo if self.snapshots.current is snapshot else None

    def _stale(self) -> bool:
        """Whether the caches may not answer now: a new snapshot or signing epoch."""
        signer = self.signer
        return (self.snapshots.current is not self._snapshot
                or (signer is not None and signer.epoch() is not self._sign_epoch))

    def _reset(self) -> None:
        """A new snapshot: drop the caches if it changed what answers read (the decisions'
        generation), else keep them for it."""
        # The snapshot last: a reader on another thread that sees it sees the new memo too.
        snapshot, generation = self.decisions.current()
        if self.signer is not None and self.signer.epoch() is not self._sign_epoch:
            self._sign_epoch = self.signer.epoch()
            self.stats.invalidated += self.cache.entries
            self.cache = AnswerCache(self.cache.max_entries, self.cache.max_bytes)
            self._generation = -1  # and the rest below
        if generation != self._generation:
            self.stats.invalidated += (self.cache.entries - len(self.cache.templates)
                                       + (len(self._lanes) if self._lanes is not None else 0))
            self.cache = self.cache.successor()
            self._lanes = None
            self._seen = bytearray(1 << SEEN_BITS)
            self._generation = generation
            self._unsettled = []
        else:  # the answers the decisions send back to be asked again
            for memo, query in self._unsettled[:RETRY_PER_SNAPSHOT]:
                self.cache.forget(memo, query)
            del self._unsettled[:RETRY_PER_SNAPSHOT]
        self._snapshot = snapshot

    def _slow(self, data: bytes, host: str, tcp: bool, memo: dict) -> bytes | None:
        parsed = parse_query(data)
        if parsed is None:
            return self._uncached(data, host, tcp)
        node = self.zone.wire_nodes.get(parsed.qname)
        if (node is None and parsed.qclass == 1 and parsed.qtype not in _NOT_DENIED
                and not (parsed.do and self._keyless) and self._denial.covers(parsed)):
            answer = self._denial.answer(
                data, parsed, TCP_LIMIT if tcp else _payload_bucket(parsed, tcp))
            if answer is not None:
                self.stats.cache_misses += 1
                rcode = 0 if parsed.do and self._denial.signer is not None else 3
                slot = self._denial_slots.get((parsed.qtype, rcode))
                if slot is None:
                    slot = self._denial_slots[parsed.qtype, rcode] = self.stats.label_id(
                        labels(Outcome(), parsed.qtype, rcode))
                self._counts[slot] += 1
                if self._seen_before(data[2:]):  # a repeated name: from the memo next time
                    self.cache.put(memo, data[2:], (answer[2:], slot))
                return answer
        by_host = False
        settled = True
        decision_class: tuple | None = None
        service: Service | None = None
        answered: Answered | None = None
        snapshot: Snapshot | None = None
        lane: int | None = None
        lane_rtt = False
        lane_spill = None
        if node is not None and node.kind is NodeKind.EXPLAIN:
            return self._uncached(data, host, tcp)
        if (node is not None and node.kind is NodeKind.SERVICE and parsed.qclass == 1
                and parsed.qtype in _ADDRESS_TYPES):
            service = node.service
            if service is None or not self.decisions.cacheable(service):
                return self._uncached(data, host, tcp)
            answered = self.decisions.answer(service, parsed.ecs, host)
            decision = answered.decision
            snapshot = self.decisions.current()[0]
            decision_class = (decision.regions, decision.ttl, answered.scope, decision.reason,
                              tuple(snapshot.region(r).down_endpoints
                                    for r in decision.regions))
            by_host = parsed.ecs is None
            settled = answered.settled
            lane = answered.lane
            lane_rtt = answered.lane_rtt
            lane_spill = answered.lane_spill
        ecs = parsed.ecs
        key = (parsed.qname, parsed.qtype, parsed.qclass, parsed.flags, parsed.edns,
               _payload_bucket(parsed, tcp), parsed.do,
               None if ecs is None else (ecs.family, ecs.source), tcp, decision_class)
        template = self.cache.templates.get(key)
        response: bytes | None = None
        if template is None:
            if service is not None and answered is not None and snapshot is not None:
                template = self._service_template(parsed, tcp, service, answered, snapshot)
            if template is None:
                reply = self.responder.respond(data, host, tcp)
                if reply.wire is None or not reply.outcome.cacheable:
                    self.stats.uncached += 1
                    self._count(reply)
                    return reply.wire
                response = reply.wire
                template = _template(data, parsed, reply, self.stats)
                if template is None:
                    self.stats.uncached += 1
                    self._count(reply)
                    return response
            self.cache.put_template(key, template)
            self.stats.cache_misses += 1
        if response is None:
            response = (data[:2] + template.header + data[12:parsed.question_end]
                        + template.tail + (ecs.address if ecs is not None else b""))
        if lane is not None and not tcp and ecs is not None and lane_layout(
                data, parsed.question_end, len(ecs.address)):
            self._lane_add(data, ecs.source, lane, response, template.slot, lane_rtt,
                           lane_spill)
            self._counts[template.slot] += 1
            return response
        if not settled:  # forgotten at the next snapshot: then it widens further
            self._unsettled.append((memo, data[2:]))
        self.cache.put(memo, data[2:], (response[2:], template.slot), host if by_host else None)
        self._counts[template.slot] += 1
        return response

    def _service_template(self, parsed: ParsedQuery, tcp: bool, service: Service,
                          answered: Answered, snapshot: Snapshot) -> Template | None:
        """The template of a service's A/AAAA answer written directly
        (``service_answer``), or None when the full path must render it."""
        if parsed.do and self.signer is not None:
            return None  # signed: the full path adds the RRSIGs
        decision = answered.decision
        made = service_template(
            parsed, packed_addresses(self.zone.addresses(decision.regions, parsed.qtype,
                                                         snapshot)),
            int(decision.ttl), answered.scope, TCP_LIMIT if tcp else _payload_bucket(parsed, tcp))
        if made is None:
            return None
        outcome = Outcome(service.name, decision.regions, decision.reason)
        return Template(*made, self.stats.label_id(labels(outcome, parsed.qtype, 0)))

    def _lane_add(self, data: bytes, source: int, lane: int, response: bytes,
                  slot: int, rtt: bool,
                  spill: tuple[str, tuple[str, float] | None] | None) -> None:
        lanes = self._lanes
        if lanes is None:
            locator = self.decisions.locator
            lanes = self._lanes = SubnetLanes(locator.network_map, self.decisions.rtt_map,
                                              locator.network_map6)
        lanes.add(data[2:], source, lane, response[2:], slot, rtt, spill)

    def _uncached(self, data: bytes, host: str, tcp: bool) -> bytes | None:
        reply = self.responder.respond(data, host, tcp)
        self.stats.uncached += 1
        self._count(reply)
        return reply.wire

    def _count(self, reply: Reply) -> None:
        if reply.wire is None:
            self.stats.dropped += 1
        else:
            self._counts[self.stats.label_id(labels(reply.outcome, reply.qtype,
                                                    reply.rcode))] += 1


def labels(outcome: Outcome, qtype: int, rcode: int) -> Labels:
    """Metric labels of one answer: service, qtype, rcode, regions, reason."""
    # to_text takes any int at run time; its stubs name the enums
    qtype_text = dns.rdatatype.to_text(cast(dns.rdatatype.RdataType, qtype)) if qtype else "none"
    if qtype_text not in _LABELLED_TYPES:
        qtype_text = "other"
    rcode_text = dns.rcode.to_text(cast(dns.rcode.Rcode, rcode)) if rcode >= 0 else "none"
    return (outcome.service or "none", qtype_text, rcode_text,
            ",".join(outcome.regions) or "none", outcome.reason or "none")


def _payload_bucket(parsed: ParsedQuery, tcp: bool) -> int:
    if tcp:
        return 0
    if not parsed.edns:
        return UDP_LIMIT_NO_EDNS
    return max(UDP_LIMIT_NO_EDNS, min(parsed.payload, OUR_PAYLOAD))


def _template(data: bytes, parsed: ParsedQuery, reply: Reply,
              stats: DnsStats) -> Template | None:
    """The reusable part of a full-path response, if it has the shape splicing relies on:
    the question echoed byte for byte and, with ECS, the address as the last octets."""
    response = reply.wire
    if response is None:
        return None
    end = parsed.question_end
    if response[12:end] != data[12:end] or response[4:6] != b"\x00\x01":
        return None
    stop = len(response)
    ecs = parsed.ecs
    if ecs is not None:
        length = len(ecs.address)
        option = (b"\x00\x08" + (4 + length).to_bytes(2, "big") + ecs.family.to_bytes(2, "big")
                  + bytes((ecs.source,)))
        stop -= length
        if response[stop - 8:stop - 1] != option or response[stop:] != ecs.address:
            return None
    return Template(response[2:12], response[end:stop],
                    stats.label_id(labels(reply.outcome, reply.qtype, reply.rcode)))
