"""Every RRset the zone can answer, for signing ahead of time (keys off the edges).

A service's A/AAAA answer is the union of the endpoints of the regions decided, so its
variants are region sets: each set of at most ``answers`` of the service's regions, each
residency rule's allowed set and all-down fallback, and all of the service's regions;
each also with any one endpoint of a multi-endpoint region left out (known down); each at
the service's TTL and degraded TTL. Rarer answers (two endpoints of a region down at
once) are signed when an edge first misses them (``director.dnssec.presign``).

The zone's other RRsets: SOA (at the zone TTL and the negative TTL), NS, glue, the RFC 8482
HINFO at every name, and a classic NSEC chain over the zone's names (an edge without the
key cannot make compact denial for a name it has never seen), each NSEC also without each
of its types, for NODATA at a name whose answer this client's regions leave empty.
"""

from __future__ import annotations

from collections.abc import Iterator
from itertools import combinations

import dns.name
import dns.rdataclass
import dns.rdatatype
import dns.rdtypes.ANY.HINFO
import dns.rdtypes.ANY.NSEC
import dns.rrset

from director.dns.zone import NodeKind, ZoneData
from policies.model import Service

A, AAAA = dns.rdatatype.A, dns.rdatatype.AAAA


def zone_rrsets(zone: ZoneData) -> Iterator[dns.rrset.RRset]:
    """Every RRset ``zone`` can put in an answer, the NSEC chain included."""
    yield zone.soa
    yield zone.negative_soa
    yield zone.ns
    yield from zone.glue
    for name in zone.nodes:
        if zone.nodes[name].kind is not NodeKind.EMPTY:
            yield hinfo(name, zone.ttl)
    for nsec in nsec_chain(zone):
        yield nsec
        for rdtype in _types_of(nsec):
            if rdtype not in (dns.rdatatype.RRSIG, dns.rdatatype.NSEC):
                yield nsec_without(nsec, rdtype)
    for node in zone.nodes.values():
        if node.kind is NodeKind.SERVICE and node.service is not None:
            yield from service_rrsets(zone, node.name, node.service)


def hinfo(name: dns.name.Name, ttl: int) -> dns.rrset.RRset:
    """The RFC 8482 answer to ANY."""
    rrset = dns.rrset.RRset(name, dns.rdataclass.IN, dns.rdatatype.HINFO)
    rrset.add(dns.rdtypes.ANY.HINFO.HINFO(dns.rdataclass.IN, dns.rdatatype.HINFO,
                                          b"RFC8482", b""), ttl)
    return rrset


def region_sets(service: Service) -> set[tuple[str, ...]]:
    """The sets of regions an answer of ``service`` is likely to name."""
    regions = service.regions
    sets = {tuple(c) for size in range(1, max(1, service.answers) + 1)
            for c in combinations(regions, size)}
    sets.add(tuple(regions))
    for rule in service.residency:
        sets.add(tuple(r for r in regions if r in rule.allowed) or rule.allowed)
        if rule.all_down.regions:
            sets.add(rule.all_down.regions)
    if service.all_down.regions:
        sets.add(service.all_down.regions)
    return sets


def service_rrsets(zone: ZoneData, name: dns.name.Name,
                   service: Service) -> Iterator[dns.rrset.RRset]:
    ttls = sorted({int(service.ttl), int(service.degraded_ttl)})
    for rdtype, table in ((A, zone.region_v4), (AAAA, zone.region_v6)):
        seen: set[frozenset[str]] = set()
        for regions in region_sets(service):
            for addresses in _with_one_down(regions, table):
                if addresses and addresses not in seen:
                    seen.add(addresses)
                    for ttl in ttls:
                        yield dns.rrset.from_text_list(name, ttl, "IN", rdtype,
                                                       sorted(addresses))


def _with_one_down(regions: tuple[str, ...],
                   table: dict[str, tuple[str, ...]]) -> Iterator[frozenset[str]]:
    every = [a for r in regions for a in table.get(r, ())]
    yield frozenset(every)
    for region in regions:
        endpoints = table.get(region, ())
        if len(endpoints) > 1:
            for down in endpoints:
                yield frozenset(a for a in every if a != down)


def chain_types(zone: ZoneData, name: dns.name.Name) -> tuple[int, ...]:
    """The types an NSEC of the chain lists at ``name`` (RRSIG and NSEC included; DNSKEY,
    CDS and CDNSKEY at the apex)."""
    node = zone.nodes[name]
    types = [*zone.types_at(node), dns.rdatatype.RRSIG, dns.rdatatype.NSEC]
    if node.kind is NodeKind.APEX:
        types += [dns.rdatatype.DNSKEY, dns.rdatatype.CDS, dns.rdatatype.CDNSKEY]
    return tuple(sorted(types))


def nsec_chain(zone: ZoneData) -> list[dns.rrset.RRset]:
    """One NSEC per name of the zone, in canonical order, the last pointing to the apex."""
    names = sorted(zone.nodes)  # dnspython orders names canonically (RFC 4034 6.1)
    chain = []
    for i, name in enumerate(names):
        after = names[(i + 1) % len(names)]
        windows = dns.rdtypes.ANY.NSEC.Bitmap.from_rdtypes(
            [dns.rdatatype.RdataType.make(t) for t in chain_types(zone, name)])
        rrset = dns.rrset.RRset(name, dns.rdataclass.IN, dns.rdatatype.NSEC)
        rrset.add(dns.rdtypes.ANY.NSEC.NSEC(dns.rdataclass.IN, dns.rdatatype.NSEC, after,
                                            windows), zone.negative_ttl)
        chain.append(rrset)
    return chain


def covering(chain: list[dns.rrset.RRset], name: dns.name.Name) -> dns.rrset.RRset:
    """The NSEC of ``chain`` (sorted) whose owner precedes ``name`` most closely."""
    best = chain[-1]
    for rrset in chain:
        if rrset.name < name:
            best = rrset
        else:
            break
    return best


def _types_of(nsec: dns.rrset.RRset) -> list[int]:
    (record,) = list(nsec)
    return [window * 256 + i * 8 + j for window, bits in record.windows
            for i, byte in enumerate(bits) for j in range(8) if byte & (0x80 >> j)]


def nsec_without(nsec: dns.rrset.RRset, rdtype: int) -> dns.rrset.RRset:
    """``nsec`` with ``rdtype`` left out of its bitmap: the NODATA proof for a type the
    name holds for some clients but not in this answer (a region without IPv6)."""
    types = [t for t in _types_of(nsec) if t != rdtype]
    if len(types) == len(_types_of(nsec)):
        return nsec
    (record,) = list(nsec)
    windows = dns.rdtypes.ANY.NSEC.Bitmap.from_rdtypes(
        [dns.rdatatype.RdataType.make(t) for t in types])
    rrset = dns.rrset.RRset(nsec.name, dns.rdataclass.IN, dns.rdatatype.NSEC)
    rrset.add(dns.rdtypes.ANY.NSEC.NSEC(dns.rdataclass.IN, dns.rdatatype.NSEC, record.next,
                                        windows), nsec.ttl)
    return rrset


def nsec_at(chain: list[dns.rrset.RRset], name: dns.name.Name) -> dns.rrset.RRset:
    """The NSEC of ``chain`` owned by ``name`` (a name of the zone)."""
    return next(rrset for rrset in chain if rrset.name == name)


def nxdomain_proof(chain: list[dns.rrset.RRset], zone: ZoneData,
                   name: dns.name.Name) -> list[dns.rrset.RRset]:
    """The NSECs proving ``name`` does not exist (RFC 4035 3.1.3.2): the one covering it
    and the one covering the wildcard at its closest encloser (once if the same)."""
    encloser = name.parent()
    while encloser not in zone.nodes and encloser != zone.apex and len(encloser) > 1:
        encloser = encloser.parent()
    first = covering(chain, name)
    second = covering(chain, dns.name.Name((b"*", *encloser.labels)))
    return [first] if second is first else [first, second]


def rrset_id(rrset: dns.rrset.RRset) -> str:
    """A text naming ``rrset`` exactly (owner, TTL, type, sorted data), for lookups."""
    data = "|".join(sorted(rdata.to_text() for rdata in rrset))
    return (f"{rrset.name.to_text().lower()} {rrset.ttl} "
            f"{dns.rdatatype.to_text(rrset.rdtype)} {data}")
