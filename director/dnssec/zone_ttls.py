"""The TTLs a policy's zone gives its signed records, for rollover timings."""

from __future__ import annotations

from director.dnssec.timeline import DEFAULT_PARENT_DS_TTL, DEFAULT_PROPAGATION, Ttls
from policies.model import Policy


def policy_ttls(policy: Policy, *, propagation: float = DEFAULT_PROPAGATION,
                parent_ds: float = DEFAULT_PARENT_DS_TTL) -> Ttls:
    """DNSKEY TTL = the zone TTL; the largest TTL over the zone, negative answers (RFC
    2308: min(SOA minimum, zone TTL)) and every service's normal and degraded TTL."""
    zone = policy.zone
    largest = max([zone.ttl, min(zone.soa.minimum, zone.ttl)]
                  + [s.ttl for s in policy.services] + [s.degraded_ttl for s in policy.services])
    return Ttls(dnskey=zone.ttl, largest=largest, propagation=propagation, parent_ds=parent_ds)
