"""The zone as the DNS handler sees it, compiled once from the policy.

Names that exist: the apex (SOA, NS), every service (A/AAAA decided per client), every
in-zone name server (its glue A/AAAA) and the empty non-terminals between them and the apex
(NODATA, RFC 8020). ``_explain.<service>`` answers TXT to admin networks only. Everything
else under the apex is NXDOMAIN; everything outside it is REFUSED.
The negative TTL is min(SOA minimum, SOA TTL) (RFC 2308).
"""

from __future__ import annotations

import dataclasses
import enum
import hashlib
import ipaddress
from dataclasses import dataclass

import dns.name
import dns.rdatatype
import dns.rrset

from director.engine.snapshot import Snapshot
from director.geo import IPNetwork
from policies.model import Policy, Service

EXPLAIN_LABEL = "_explain"


class NodeKind(enum.Enum):
    APEX = "apex"
    SERVICE = "service"
    GLUE = "glue"  # an in-zone name server's address records
    EXPLAIN = "explain"
    EMPTY = "empty"  # an empty non-terminal


@dataclass(frozen=True)
class Node:
    kind: NodeKind
    name: dns.name.Name
    service: Service | None = None  # SERVICE and EXPLAIN
    v4: tuple[str, ...] = ()  # GLUE
    v6: tuple[str, ...] = ()


def _wire(name: dns.name.Name) -> bytes:
    """``name`` in lower-case wire format."""
    wire = name.canonicalize().to_wire()
    assert wire is not None  # no file given: the bytes are returned
    return wire


def soa_serial(policy: Policy) -> int:
    """The policy's SOA serial, or one derived from its content (stable across reloads)."""
    if policy.zone.soa.serial is not None:
        return policy.zone.soa.serial
    digest = hashlib.blake2b(_canonical(policy).encode(), digest_size=4).digest()
    return int.from_bytes(digest, "big") or 1


def _canonical(value: object) -> str:
    """A text form of the policy that is the same in every process (sets sorted). A field
    left at its default is left out, so that a field added to the model with a default does
    not change the serial of every policy that does not use it."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        fields = (f"{f.name}={_canonical(getattr(value, f.name))}"
                  for f in dataclasses.fields(value)
                  if f.compare and (f.default is dataclasses.MISSING
                                    or getattr(value, f.name) != f.default))
        return f"{type(value).__name__}({','.join(fields)})"
    if isinstance(value, (frozenset, set)):
        return "{" + ",".join(sorted(_canonical(v) for v in value)) + "}"
    if isinstance(value, (tuple, list)):
        return "(" + ",".join(_canonical(v) for v in value) + ")"
    return repr(value)


class ZoneData:
    """Records and names of the policy's zone; immutable after construction."""

    def __init__(self, policy: Policy) -> None:
        zone = policy.zone
        self.policy = policy
        self.apex = dns.name.from_text(zone.apex)
        self.ttl = int(zone.ttl)
        soa = zone.soa
        soa_text = (f"{soa.mname}. {soa.rname}. {soa_serial(policy)} {int(soa.refresh)} "
                    f"{int(soa.retry)} {int(soa.expire)} {int(soa.minimum)}")
        self.soa = dns.rrset.from_text(self.apex, self.ttl, "IN", "SOA", soa_text)
        self.negative_ttl = int(min(soa.minimum, zone.ttl))
        self.negative_soa = dns.rrset.from_text(self.apex, self.negative_ttl, "IN", "SOA",
                                                soa_text)
        self.ns = dns.rrset.from_text_list(self.apex, self.ttl, "IN", "NS",
                                           [f"{ns.name}." for ns in zone.nameservers])
        self.admin_networks: tuple[IPNetwork, ...] = tuple(
            ipaddress.ip_network(cidr, strict=False) for cidr in zone.admin_networks)
        self.region_v4 = {r.name: r.endpoints_v4 for r in policy.regions}
        self.region_v6 = {r.name: r.endpoints_v6 for r in policy.regions}
        self.nodes: dict[dns.name.Name, Node] = {}
        self._add(Node(NodeKind.APEX, self.apex))
        for ns in zone.nameservers:
            name = dns.name.from_text(ns.name)
            if name.is_subdomain(self.apex) and name not in self.nodes:
                v4 = tuple(a for a in ns.addresses if ":" not in a)
                v6 = tuple(a for a in ns.addresses if ":" in a)
                self._add(Node(NodeKind.GLUE, name, v4=v4, v6=v6))
        for service in policy.services:
            name = dns.name.from_text(service.name)
            if not name.is_subdomain(self.apex):
                continue
            self._add(Node(NodeKind.SERVICE, name, service=service))
            explain = dns.name.Name((EXPLAIN_LABEL.encode(), *name.labels))
            self.nodes[explain] = Node(NodeKind.EXPLAIN, explain, service=service)
        self.glue = self._glue_rrsets()
        # The same nodes keyed by lower-case wire format, for the fast path.
        self.wire_nodes: dict[bytes, Node] = {
            _wire(name): node for name, node in self.nodes.items()}

    def _add(self, node: Node) -> None:
        self.nodes[node.name] = node
        parent = node.name
        while parent != self.apex and len(parent) > 1:
            parent = parent.parent()
            if parent not in self.nodes:
                self.nodes[parent] = Node(NodeKind.EMPTY, parent)

    def _glue_rrsets(self) -> list[dns.rrset.RRset]:
        glue: list[dns.rrset.RRset] = []
        for ns in self.ns:
            node = self.nodes.get(ns.target)
            if node is None or node.kind is not NodeKind.GLUE:
                continue
            for rdtype, addresses in (("A", node.v4), ("AAAA", node.v6)):
                if addresses:
                    glue.append(dns.rrset.from_text_list(node.name, self.ttl, "IN", rdtype,
                                                         list(addresses)))
        return glue

    def in_zone(self, name: dns.name.Name) -> bool:
        return name.is_subdomain(self.apex)

    def lookup(self, name: dns.name.Name) -> Node | None:
        return self.nodes.get(name)

    def is_admin(self, host: str) -> bool:
        """Whether ``host`` (the querying address) may ask ``_explain`` queries."""
        try:
            address = ipaddress.ip_address(host.split("%", 1)[0])
        except ValueError:
            return False
        if address.version == 6 and address.ipv4_mapped is not None:
            address = address.ipv4_mapped
        return any(address.version == net.version and address in net
                   for net in self.admin_networks)

    def types_at(self, node: Node) -> tuple[int, ...]:
        """The record types ``node``'s name holds (DNSSEC additions aside), for NSEC."""
        A, AAAA = dns.rdatatype.A, dns.rdatatype.AAAA
        if node.kind is NodeKind.APEX:
            return (dns.rdatatype.NS, dns.rdatatype.SOA)
        if node.kind is NodeKind.SERVICE:
            return ((A,) if any(self.region_v4.values()) else ()) + (
                (AAAA,) if any(self.region_v6.values()) else ())
        if node.kind is NodeKind.GLUE:
            return ((A,) if node.v4 else ()) + ((AAAA,) if node.v6 else ())
        if node.kind is NodeKind.EXPLAIN:
            return (dns.rdatatype.TXT,)
        return ()

    def addresses(self, regions: tuple[str, ...], rdtype: int,
                  snapshot: Snapshot) -> list[str]:
        """The balancer addresses of ``regions`` for A or AAAA, in region order, deduplicated;
        a region's endpoints ``snapshot`` knows down are left out unless all of them are
        (then its health, not the DNS, decides: an answer is never emptied here)."""
        table = self.region_v4 if rdtype == dns.rdatatype.A else self.region_v6
        seen: dict[str, None] = {}
        for region in regions:
            addresses = table.get(region, ())
            down = snapshot.region(region).down_endpoints
            if down:
                addresses = tuple(a for a in addresses if a not in down) or addresses
            for address in addresses:
                seen.setdefault(address, None)
        return list(seen)

