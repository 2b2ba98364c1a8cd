"""The whole IPv4 space of a GeoIP database, merged under a policy's classes once, ahead of
time: what gdnsd compiles at load, so that locating a client subnet never seen before is a
binary search, not a database lookup and a widening.

``MergedNetworks.compile_ipv4()`` walks every node of the database's IPv4 tree once
(about ten seconds for GeoLite2 City: 6 million nodes, 450,000 records, in the background)
and keeps the maximal subtrees whose addresses all classify alike: for GeoLite2 City under
the example policy, 397,000 networks (/7 to /32) in 30 classes. They partition the IPv4
space, so every address is in exactly one. ``NetworkMap.locate(address)`` returns that
network and the fields of a record of its class; the decisions, which depend on the class
alone (``director.engine.location_class``), are those of any record in the network, and
the network is the widest correct ECS scope (the same as an unbudgeted widening).
"""

from __future__ import annotations

import bisect
import ipaddress
from array import array
from collections.abc import Hashable, Sequence

from director.geo import Location, RecordFields


class NetworkMap:
    """Merged IPv4 networks in address order, each with its class."""

    def __init__(self, ranges: Sequence[int], classes: Sequence[Hashable],
                 fields: Sequence[RecordFields]) -> None:
        """``ranges``: ``first address << 22 | prefix length << 16 | class index``, sorted,
        covering the space; ``classes[i]`` and ``fields[i]``: class ``i`` and a record's
        fields of it."""
        self.starts = array("L", (packed >> 22 for packed in ranges))
        self.prefixes = bytes((packed >> 16) & 0x3F for packed in ranges)
        self.class_index = array("H", (packed & 0xFFFF for packed in ranges))
        # what an answer depends on of the network: prefix length << 16 | class index
        self.keys = array("I", (packed & 0x3FFFFF for packed in ranges))
        self.classes = tuple(classes)
        self.fields = tuple(fields)

    def __len__(self) -> int:
        return len(self.starts)

    def find(self, value: int) -> int:
        """The index of the network holding the IPv4 address ``value``."""
        return bisect.bisect_right(self.starts, value) - 1

    def network(self, index: int) -> ipaddress.IPv4Network:
        return ipaddress.IPv4Network((self.starts[index], self.prefixes[index]))

    def class_of(self, index: int) -> Hashable:
        return self.classes[self.class_index[index]]

    def locate(self, address: ipaddress.IPv4Address) -> Location:
        """The merged network holding ``address`` and a record's fields of its class."""
        index = self.find(int(address))
        return Location(*self.fields[self.class_index[index]], self.network(index))
