# SPDX-License-Identifier: Apache-2.0
"""The load generator's stub resolver: real DNS queries with EDNS Client Subnet.

Each query carries the client's subnet as ECS (RFC 7871), so the authoritative GeoDNS
server locates the cohort's client rather than the generator. UDP first, TCP when the
answer is truncated. With ``cache: ttl`` answers are reused per subnet for their TTL
(capped by ``max_ttl``), as a client's resolver would; by default every attempt asks.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import dns.asyncquery
import dns.edns
import dns.exception
import dns.flags
import dns.message
import dns.rcode
import dns.rdatatype

from drills.model import DnsSpec
from drills.records import DnsAnswer


class DnsClient:
    def __init__(self, server: tuple[str, int], spec: DnsSpec,
                 clock: Callable[[], float]) -> None:
        self.server = server
        self.spec = spec
        self.clock = clock
        self._cache: dict[tuple[str, str], tuple[float, DnsAnswer]] = {}

    async def resolve(self, name: str, subnet: str) -> DnsAnswer:
        """Ask for ``name`` (A) on behalf of a client in ``subnet``."""
        key = (name, subnet)
        if self.spec.cache == "ttl":
            hit = self._cache.get(key)
            if hit is not None and hit[0] > time.monotonic():
                a = hit[1]
                return DnsAnswer(self.clock(), a.server, a.rcode, a.addresses, a.ttl, a.scope,
                                 cached=True)
        answer = await self._query(name, subnet)
        if self.spec.cache == "ttl" and answer.addresses and answer.ttl:
            self._cache[key] = (time.monotonic() + min(answer.ttl, self.spec.max_ttl), answer)
        return answer

    async def _query(self, name: str, subnet: str) -> DnsAnswer:
        host, port = self.server
        where = f"{host}:{port}"
        options: list[dns.edns.Option] = []
        if self.spec.ecs:
            address, _, prefix = subnet.partition("/")
            options.append(dns.edns.ECSOption(address, int(prefix) if prefix else None))
        query = dns.message.make_query(name, dns.rdatatype.A, use_edns=0, payload=1232,
                                       options=options)
        t = self.clock()
        try:
            reply = await dns.asyncquery.udp(query, host, timeout=self.spec.timeout, port=port)
            if reply.flags & dns.flags.TC:
                reply = await dns.asyncquery.tcp(query, host, timeout=self.spec.timeout,
                                                 port=port)
        except dns.exception.Timeout:
            return DnsAnswer(t, where, "TIMEOUT", error="no answer in time")
        except (OSError, dns.exception.DNSException) as exc:
            return DnsAnswer(t, where, "ERROR", error=f"{type(exc).__name__}: {exc}")
        addresses: list[str] = []
        ttl: int | None = None
        for rrset in reply.answer:
            if rrset.rdtype == dns.rdatatype.A:
                addresses.extend(r.address for r in rrset)
                ttl = rrset.ttl if ttl is None else min(ttl, rrset.ttl)
        scope = None
        for option in reply.options:
            if isinstance(option, dns.edns.ECSOption):
                scope = option.scopelen
        return DnsAnswer(t, where, dns.rcode.to_text(reply.rcode()), tuple(addresses), ttl,
                         scope)
