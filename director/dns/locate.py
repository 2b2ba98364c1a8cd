"""Who asks: build the engine's ``Client`` from a query's ECS option or the resolver's address.

- ECS with a source prefix above 0: the client is the ECS network, located by its address;
- ECS with source prefix 0 (RFC 7871 section 7.1.2, opt-out): not located at all, so the
  engine answers as for an unknown location, which is the same for every client (scope 0);
- no ECS: the service's ``no-ecs`` rule: ``resolver`` locates the resolver's address,
  ``unknown`` treats the client as of unknown location.

A location's network is widened from the database block to the
widest network whose records all decide alike under the policy (``director.geo_merge``), so
ECS scopes are as wide as is correct. Two memos keep a new client subnet from paying for a
database lookup and a widening again:

- per /24 (IPv4) or /56 (IPv6), when the widened network covers the whole bucket;
- the precompiled map (``director.geo_map``), once built: every IPv4 address's merged
  network by binary search, never cut short;
- per widened network: any later address inside a network already widened gets its
  location (same class, so the same decisions; the network is the scope) from a dictionary
  per prefix length, without touching the database. Random client subnets then cost a
  widening once per area, not once per /24.

Both are exact for decisions: every address of a widened network classifies alike. A
widening cut short by its work budget is memoised in neither: the next query of the area
widens further (answers already cached keep their scope until the next snapshot).
"""

from __future__ import annotations

import dataclasses
import ipaddress

from director.dns.types import EcsSubnet
from director.engine.types import Client, ClientSource
from director.geo import GeoLocator, IPAddress, Location
from director.geo_map import NetworkMap
from director.geo_merge import MergedNetworks
from policies.model import NoEcs, Service

_SPLIT = object()  # the bucket spans several database blocks: look up per address
_MEMO_LIMIT = 500_000


class ClientLocator:
    """Builds clients and locates addresses through a per-bucket memo."""

    def __init__(self, geo: GeoLocator, merged: MergedNetworks) -> None:
        self.geo = geo
        self.merged = merged
        self._memo: dict[bytes, object] = {}
        # (IP version, prefix length) -> network number -> location; and the prefix
        # lengths present per version, to try in turn
        self._networks: dict[tuple[int, int], dict[int, Location]] = {}
        self._prefixes: dict[int, list[int]] = {4: [], 6: []}
        self._networks_held = 0
        self.network_map: NetworkMap | None = None  # the IPv4 space merged ahead of time
        self.network_map6: NetworkMap | None = None  # the IPv6 space, to /64

    def locate(self, address: IPAddress) -> Location:
        """The location of ``address``, memoised per /24 or /56 where that is exact, and
        per widened network."""
        packed = address.packed
        bucket_bits = 24 if address.version == 4 else 56
        key = packed[: bucket_bits // 8] + (b"4" if address.version == 4 else b"6")
        hit = self._memo.get(key)
        if hit is not None and hit is not _SPLIT:
            return hit  # type: ignore[return-value]
        location = self._mapped(address)
        if location is None:
            location = self.widened(address)
        final = location is not None
        if location is None:
            location = self.geo.locate(address)
            network, final = self.merged.widen(address)
            if network.prefixlen < location.network.prefixlen:
                location = dataclasses.replace(location, network=network)
            if final:
                self._remember_network(address, location)
        if hit is None and final:
            if len(self._memo) >= _MEMO_LIMIT:
                self._memo.clear()
            covers = location.network.prefixlen <= bucket_bits
            self._memo[key] = location if covers else _SPLIT
        return location

    def settled(self, client: Client) -> bool:
        """Whether ``client``'s location is final: not located, located through the
        precompiled map, or in a network widened to the end (not cut short by the budget)."""
        if client.location is None:
            return True
        address = client.address
        return self._mapped(address) is not None or self.widened(address) is not None

    def _mapped(self, address: IPAddress) -> Location | None:
        """The location the precompiled maps give ``address``: its version's map, or for an
        IPv6 address under an IPv4 alias the IPv4 map; None where they fall back, or before
        they are built."""
        network_map = self.network_map if address.version == 4 else self.network_map6
        if network_map is None:
            return None
        location = network_map.locate(address)
        if location is None and isinstance(address, ipaddress.IPv6Address):
            location = self._aliased(address)
        return location

    def _aliased(self, address: ipaddress.IPv6Address) -> Location | None:
        """An IPv6 address under one of the database's IPv4 aliases (6to4, Teredo), located
        through the IPv4 map as the database would through its IPv4 tree, with the network
        of the IPv4 map's merged network under the alias; None when not aliased or not
        mapped. The database is not read: its pages stay out of the server's memory."""
        network_map6, network_map = self.network_map6, self.network_map
        if network_map6 is None or network_map is None:
            return None
        aliased = network_map6.ipv4_of(address)
        if aliased is None:
            return None
        ipv4, depth = aliased
        location = network_map.locate(ipv4)
        if location is None:
            return None
        prefix = depth + location.network.prefixlen
        network = ipaddress.IPv6Network((int(address) >> (128 - prefix) << (128 - prefix),
                                         prefix))
        return dataclasses.replace(location, network=network)

    def widened(self, address: IPAddress) -> Location | None:
        """The location memoised for the widened network holding ``address``, if any
        (final widenings never nest: each is the widest uniform network around it)."""
        version, bits, value = address.version, address.max_prefixlen, int(address)
        networks = self._networks
        for prefix in self._prefixes[version]:
            found = networks[(version, prefix)].get(value >> (bits - prefix))
            if found is not None:
                return found
        return None

    def _remember_network(self, address: IPAddress, location: Location) -> None:
        if self._networks_held >= _MEMO_LIMIT:
            self._networks.clear()
            self._prefixes = {4: [], 6: []}
            self._networks_held = 0
        network = location.network
        prefix = network.prefixlen
        table = self._networks.get((address.version, prefix))
        if table is None:
            table = self._networks[(address.version, prefix)] = {}
            self._prefixes[address.version] = sorted([*self._prefixes[address.version], prefix])
        table[int(network.network_address) >> (address.max_prefixlen - prefix)] = location
        self._networks_held += 1

    def client(self, service: Service, ecs: EcsSubnet | None, host: str) -> Client:
        """The client of one query for ``service``: from ECS, or from the resolver ``host``."""
        if ecs is not None:
            return self.ecs_client(ecs)
        address = resolver_address(host)
        network = ipaddress.ip_network((address, address.max_prefixlen))
        if service.no_ecs is NoEcs.UNKNOWN:
            return Client(address, network, ClientSource.RESOLVER, None)
        return Client(address, network, ClientSource.RESOLVER, self.locate(address))

    def ecs_client(self, ecs: EcsSubnet) -> Client:
        packed = ecs.packed()
        address = ipaddress.ip_address(packed)
        # from the integer: given an address object, the stdlib formats it and parses the
        # text again (most of an IPv6 client's cost)
        kind = ipaddress.IPv4Network if ecs.family == 1 else ipaddress.IPv6Network
        network = kind((int.from_bytes(packed, "big"), ecs.source))
        if ecs.opted_out:
            return Client(address, network, ClientSource.ECS, None)
        return Client(address, network, ClientSource.ECS, self.locate(address))


def resolver_address(host: str) -> IPAddress:
    """The resolver's address from a socket peer name (zone index and v4-mapping removed)."""
    address = ipaddress.ip_address(host.split("%", 1)[0])
    if address.version == 6 and address.ipv4_mapped is not None:
        return address.ipv4_mapped
    return address
