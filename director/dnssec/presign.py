"""The control plane's side of keyless edges: sign every RRset the zone can answer and
publish the signatures in the shared state (``director dnssec presign``).

Each round (``presign_round``) signs ``variants.zone_rrsets`` and the apex's key RRsets
with the zone's keys (``ZoneSigner``: its cache makes a round after the first cost only
what changed) and writes them as a new generation: a hash of RRset id -> RRSIG data, then
the ``current`` pointer with the keys' RRsets. A new round is published when the signer's
epoch changes (a new validity window, a rollover step), when the policy changes, and when
edges report RRsets they could not sign: each report is signed only if it is an answer the
zone could give (a service's own name, A or AAAA, its TTLs, addresses of its regions), so
an edge that is broken into cannot get anything else signed.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable

import dns.exception
import dns.rdatatype
import dns.rrset

from director.dns.zone import NodeKind, ZoneData
from director.dnssec.presigned import current_key, misses_key, signed_key
from director.dnssec.signer import WINDOW, ZoneSigner
from director.dnssec.variants import rrset_id, zone_rrsets
from policies.model import Policy

log = logging.getLogger(__name__)

BATCH = 2000
KEEP = 3 * WINDOW  # a generation's hash outlives the next window's publication


def acceptable(zone: ZoneData, text: str) -> dns.rrset.RRset | None:
    """The RRset an edge reported, if the zone could answer it, else None."""
    try:
        lines = [line for line in text.splitlines() if line.strip()]
        if not lines or len(lines) > 64:
            return None
        first = lines[0].split()
        name, ttl, rdtype = first[0], int(first[1]), first[3]
        if rdtype not in ("A", "AAAA") or any(line.split()[:4] != first[:4]
                                               for line in lines):
            return None
        rrset = dns.rrset.from_text_list(name, ttl, "IN", rdtype,
                                         [line.split()[4] for line in lines])
    except (dns.exception.DNSException, ValueError, IndexError):
        return None
    node = zone.nodes.get(rrset.name)
    if node is None or node.kind is not NodeKind.SERVICE or node.service is None:
        return None
    service = node.service
    if rrset.ttl not in (int(service.ttl), int(service.degraded_ttl)):
        return None
    table = zone.region_v4 if rrset.rdtype == dns.rdatatype.A else zone.region_v6
    allowed = {address for region in service.regions for address in table.get(region, ())}
    return rrset if all(rdata.address in allowed for rdata in rrset) else None


class Presigner:
    """Publishes a zone's signatures for keyless edges, round after round."""

    def __init__(self, client, prefix: str, signer: ZoneSigner,
                 clock: Callable[[], float] = time.time) -> None:
        self.client = client  # a redis.Redis with decode_responses=True
        self.prefix = prefix
        self.signer = signer
        self.clock = clock
        self.learned: dict[str, dns.rrset.RRset] = {}
        self.published: tuple = ()  # (epoch, policy zone id, learned count) last published
        self.generation = ""

    def learn(self, zone: ZoneData) -> int:
        """Take the edges' reports; how many were new answers the zone can give."""
        new = 0
        for text in self.client.spop(misses_key(self.prefix), 1000) or ():
            rrset = acceptable(zone, text)
            if rrset is None:
                log.warning("DNSSEC: an edge asked to sign what the zone cannot answer: %r",
                            text[:200])
                continue
            rid = rrset_id(rrset)
            if rid not in self.learned:
                self.learned[rid] = rrset
                new += 1
        return new

    def round(self, policy: Policy) -> bool:
        """Publish a new generation if anything changed; whether one was."""
        zone = ZoneData(policy)
        self.learn(zone)
        state = (self.signer.epoch(), id(policy), len(self.learned))
        if state == self.published:
            return False
        self.publish(zone)
        self.published = state
        return True

    def publish(self, zone: ZoneData) -> str:
        """Sign everything and write it as a new generation; its name."""
        signer = self.signer
        signer.epoch()
        rrsets = [*zone_rrsets(zone), *self.learned.values(),
                  *(r for r in (signer.dnskeys, signer.cds, signer.cdnskey) if r)]
        signatures: dict[str, str] = {}
        for rrset in rrsets:
            sigs = signer.sign(rrset)
            if sigs is not None:
                signatures[rrset_id(rrset)] = "\n".join(rd.to_text() for rd in sigs)
        generation = f"{int(self.clock() * 1000)}"
        key = signed_key(self.prefix, generation)
        items = list(signatures.items())
        pipe = self.client.pipeline(transaction=False)
        for start in range(0, len(items), BATCH):
            pipe.hset(key, mapping=dict(items[start:start + BATCH]))
        pipe.expire(key, int(KEEP))
        pipe.execute()
        meta = {"generation": generation, "ttl": signer.dnskey_ttl,
                "dnskey": [rd.to_text() for rd in signer.dnskeys],
                "cds": [rd.to_text() for rd in signer.cds],
                "cdnskey": [rd.to_text() for rd in signer.cdnskey]}
        self.client.set(current_key(self.prefix), json.dumps(meta))
        self.generation = generation
        log.info("DNSSEC: published %d signed RRsets as generation %s", len(signatures),
                 generation)
        return generation
