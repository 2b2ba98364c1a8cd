"""The whole IPv4 and IPv6 space of a GeoIP database, merged under a policy's classes once,
ahead of time: what gdnsd compiles at load, so that locating a client subnet never seen before is a
binary search, not a database lookup and a widening.

``MergedNetworks.compile_ipv4()`` walks every node of the database's IPv4 tree once
(about ten seconds for GeoLite2 City: 6 million nodes, 450,000 records, in the background)
and keeps the maximal subtrees whose addresses all classify alike: for GeoLite2 City under
the example policy, 397,000 networks (/7 to /32) in 30 classes. They partition the IPv4
space, so every address is in exactly one. ``NetworkMap.locate(address)`` returns that
network and the fields of a record of its class; the decisions, which depend on the class
alone (``director.engine.location_class``), are those of any record in the network, and
the network is the widest correct ECS scope (the same as an unbudgeted widening).

``compile_ipv6()`` does the same for the IPv6 tree to /64 (1.5 s for GeoLite2 City:
280,000 networks); a /64 the database splits further is walked to its leaves and keeps one
class if it has one, else falls back to the full path, as does the IPv4 space embedded in
the IPv6 tree (``FALLBACK``). Addresses under the aliases of that space within the first 64
bits (6to4, Teredo) are located through the IPv4 map instead (``ipv4_of``), without a
database read.
"""

from __future__ import annotations

import bisect
import ipaddress
from array import array
from collections.abc import Hashable, Sequence

from director.geo import Location, RecordFields, location_of

FALLBACK = 0xFFFF  # the class index of networks the map leaves to the full path
TOP_BITS = 16  # the blocks ``NetworkMap.find`` narrows its search to


class NetworkMap:
    """Merged networks of one IP version in address order, each with its class.

    IPv4: whole addresses. IPv6: the first 64 bits of addresses (ECS subnets are /56 or
    shorter in practice); networks the database splits below /64, and the IPv4 space
    embedded in the IPv6 tree (::/96 and its aliases), have the class ``FALLBACK``:
    their addresses are located the full way."""

    def __init__(self, ranges: Sequence[int], classes: Sequence[Hashable],
                 fields: Sequence[RecordFields], version: int = 4,
                 aliases: tuple[tuple[int, int], ...] = ()) -> None:
        """``ranges``: ``first address << shift | prefix length << 16 | class index``,
        sorted, covering the space, with ``shift`` 22 for IPv4 and 24 for IPv6 (first
        address: its first 64 bits); ``classes[i]`` and ``fields[i]``: class ``i`` and a
        record's fields of it. ``aliases`` (IPv6): (first 64 bits, prefix length) of the
        prefixes the database points into its IPv4 tree (6to4 2002::/16 and Teredo
        2001::/32 in MaxMind's), whose next 32 bits are an IPv4 address (``ipv4_of``)."""
        self.version = version
        self.aliases = aliases
        shift = 22 if version == 4 else 24
        self.starts = array("L", (packed >> shift for packed in ranges))
        bits = (1 << (shift - 16)) - 1  # the prefix length's field
        self.prefixes = bytes((packed >> 16) & bits for packed in ranges)
        self.class_index = array("H", (packed & 0xFFFF for packed in ranges))
        # what an answer depends on of the network: prefix length << 16 | class index
        self.keys = array("I", (packed & ((1 << shift) - 1) for packed in ranges))
        self.classes = tuple(classes)
        self.fields = tuple(fields)
        # A bisect over 400,000 starts was most of a lane answer's time (19 steps, each
        # boxing an array item): ``first[h]`` is the first network starting in the block
        # of top 16 bits ``h``, so a search bisects one block's networks only.
        self.top_shift = (32 if version == 4 else 64) - TOP_BITS
        self.first = array("L", (bisect.bisect_left(self.starts, block << self.top_shift)
                                 for block in range((1 << TOP_BITS) + 1)))

    def __len__(self) -> int:
        return len(self.starts)

    def find(self, value: int) -> int:
        """The index of the network holding ``value``: an IPv4 address, or the first 64
        bits of an IPv6 one."""
        block = value >> self.top_shift
        return bisect.bisect_right(self.starts, value, self.first[block],
                                   self.first[block + 1]) - 1

    def network(self, index: int) -> ipaddress.IPv4Network | ipaddress.IPv6Network:
        if self.version == 4:
            return ipaddress.IPv4Network((self.starts[index], self.prefixes[index]))
        return ipaddress.IPv6Network((self.starts[index] << 64, self.prefixes[index]))

    def fallback(self, index: int) -> bool:
        """Whether the network is left to the full path (no class here)."""
        return self.class_index[index] == FALLBACK

    def class_of(self, index: int) -> Hashable:
        return self.classes[self.class_index[index]]

    def ipv4_of(self, address: ipaddress.IPv6Address) -> tuple[ipaddress.IPv4Address, int] | None:
        """The IPv4 address ``address`` stands for under one of the database's aliases, and
        the alias's prefix length; None outside them."""
        top = int(address) >> 64
        for value, depth in self.aliases:
            if top >> (64 - depth) == value >> (64 - depth):
                return ipaddress.IPv4Address((top >> (64 - depth - 32)) & 0xFFFFFFFF), depth
        return None

    def locate(self, address: ipaddress.IPv4Address | ipaddress.IPv6Address) -> Location | None:
        """The merged network holding ``address`` and a record's fields of its class; None
        where the map falls back."""
        value = int(address) if self.version == 4 else int(address) >> 64
        index = self.find(value)
        if self.class_index[index] == FALLBACK:
            return None
        return location_of(self.fields[self.class_index[index]], self.network(index))
