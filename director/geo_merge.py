"""Widen a GeoIP block to the largest network over which every answer would be the same.

A MaxMind database splits the address space into many small blocks (a /24 here, a /19
there) by city. Most neighbouring blocks decide alike: same country, same residency rules,
same ranking of regions by distance. gdnsd merges such blocks at load time so the ECS scope
it returns is as wide as is correct (/13 to /20 for typical client subnets, instead of the
database block), and resolvers keep far fewer cache entries. ``MergedNetworks`` does the
same lazily, over the database's own search tree:

- ``classify(fields)`` maps a record's decision-relevant fields (``RecordFields``) to a
  hashable class; two addresses whose records have equal classes get the same answer;
- ``widest(address)`` walks down the tree to the address's block, then back up while the
  sibling subtree holds only records of the block's class (and no empty space, unless the
  block is empty too); the network where the walk stops is the answer.

Subtree classes are memoised per tree node, and the class of a record per data offset (its
fields are those ``GeoLocator.locate`` finds at an address inside the block), so after a few
queries per area the walk costs a few microseconds. A widening that would visit more than
``budget`` (about a millisecond of work) stops where it is: the scope is then
narrower than it could be, never wider than is correct, and the subtrees it did finish stay
memoised, so later queries of the area widen further.
"""

from __future__ import annotations

import ipaddress
import mmap
import threading
from array import array
from collections.abc import Callable, Hashable, MutableSequence

from director.geo import GeoLocator, IPAddress, IPNetwork, Location, RecordFields
from director.geo_map import FALLBACK, NetworkMap

_NO_RECORD = RecordFields(None, None, None, None)  # addresses the database holds nothing for
DEFAULT_BUDGET = 200  # work units per widening: a tree node 1, classifying a new record:
RECORD_COST = 20
_CHECK_DEPTH = 12  # the compile looks at its cancel flag at the 4,096 nodes of this depth
MEMO_LIMIT = 1_000_000  # memoised nodes (or records) before the memo starts over


Classifier = Callable[[RecordFields], Hashable]


class CompileCancelled(Exception):
    """``compile_ipv4`` was asked to stop."""


class _OverBudget(Exception):
    pass


class MergedNetworks:
    """Lazily merged view of one MaxMind database under one classifier."""

    def __init__(self, geo: GeoLocator, classify: Classifier,
                 budget: int = DEFAULT_BUDGET) -> None:
        self._geo = geo
        metadata = geo.metadata()
        self._nodes = metadata.node_count
        self._record_size = metadata.record_size
        self._node_bytes = metadata.record_size // 4
        self._ipv6_tree = metadata.ip_version == 6
        with open(geo.path, "rb") as handle:
            self._buffer = mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ)
        self._classify = classify
        self._budget = budget
        self._node_class: dict[int, object] = {}
        self._record_class: dict[int, Hashable] = {}
        self._field_class: dict[RecordFields, Hashable] = {}
        self._ipv4_start = self._follow_zeros(96) if self._ipv6_tree else 0

    def widest(self, address: IPAddress) -> IPNetwork:
        """The widest network holding ``address`` whose addresses all classify alike (as far
        as one budget of work finds)."""
        return self.widen(address)[0]

    def widen(self, address: IPAddress) -> tuple[IPNetwork, bool]:
        """``widest`` and whether it is final: False when the budget ran out, so asking
        again (after the memo has grown) may give a wider network."""
        bits = address.max_prefixlen
        if address.version == 6 and not self._ipv6_tree:
            return ipaddress.ip_network((address, bits)), True
        value = int(address)
        node = self._ipv4_start if address.version == 4 else 0
        path: list[int] = []
        record = node
        depth = 0
        while depth < bits and record < self._nodes:
            path.append(record)
            bit = (value >> (bits - 1 - depth)) & 1
            record = self._children(record)[bit]
            depth += 1
        visited = [0]
        target = self._leaf_class(record, value, depth, bits, visited)
        final = True
        while depth > 0:
            parent = path[depth - 1]
            if self._node_class.get(parent) == target:
                depth -= 1
                continue
            bit = (value >> (bits - depth)) & 1
            sibling = self._children(parent)[1 - bit]
            sibling_value = (value ^ (1 << (bits - depth))) >> (bits - depth) << (bits - depth)
            try:
                if not self._matches(sibling, sibling_value, depth, bits, target, visited):
                    break
            except _OverBudget:
                final = False
                break
            self._remember(parent, target)
            depth -= 1
        return ipaddress.ip_network((address, depth), strict=False), final

    def compile_ipv6(self, cancelled: threading.Event | None = None) -> NetworkMap | None:
        """``compile_ipv4`` for the IPv6 space at /64 granularity (``NetworkMap``), or None
        for a database without an IPv6 tree."""
        return self._compile_apart(cancelled, 6) if self._ipv6_tree else None

    def compile_ipv4(self, cancelled: threading.Event | None = None) -> NetworkMap:
        """Every maximal uniform network of the IPv4 space, walked once (``geo_map``);
        independent of the widening memos, safe to run in another thread. The walk reads
        the database through mappings of its own, unmapped at the end, so the pages it
        touched do not stay in the server's memory; the networks are kept as packed
        integers (start << 22 | prefix << 16 | class), not tuples. ``cancelled``: raises
        ``CompileCancelled`` soon after it is set."""
        return self._compile_apart(cancelled, 4)

    def _compile_apart(self, cancelled: threading.Event | None, version: int) -> NetworkMap:
        """``_compile`` through a mapping and a reader of its own, closed at the end."""
        with open(self._geo.path, "rb") as handle:
            buffer = mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ)
        reader = GeoLocator(self._geo.path, cache_size=0)
        try:
            return self._compile(buffer, reader, cancelled, version)
        finally:
            reader.close()
            buffer.close()

    def _compile(self, buffer: mmap.mmap, reader: GeoLocator,
                 cancelled: threading.Event | None, version: int) -> NetworkMap:
        ids: dict[Hashable, int] = {}
        fields_of: list[RecordFields] = []
        record_ids: dict[int, int] = {}
        field_ids: dict[RecordFields, int] = {}
        ranges: MutableSequence[int] = array("Q") if version == 4 else []  # v6: > 64 bits
        aliases: list[tuple[int, int]] = []  # IPv6 prefixes leading into the IPv4 tree
        nodes, fields_at = self._nodes, reader.fields

        def children(node: int) -> tuple[int, int]:
            return self._children(node, buffer)

        width, shift = (32, 22) if version == 4 else (64, 24)
        ipv4_start = self._ipv4_start

        def address_of(value: int, full: bool = False) -> IPAddress:
            if version == 4:
                return ipaddress.IPv4Address(value)
            return ipaddress.IPv6Address(value if full else value << 64)

        def leaf(record: int, value: int, full: bool = False) -> int:
            index = record_ids.get(record)
            if index is None:
                fields = (fields_at(address_of(value, full)) if record > nodes
                          else None) or _NO_RECORD
                index = field_ids.get(fields)
                if index is None:
                    cls = self._classify(fields)
                    index = ids.get(cls)
                    if index is None:
                        if len(ids) >= 0xFFFF:  # the map packs a class index in 16 bits
                            raise ValueError("more than 65,535 location classes")
                        index = ids[cls] = len(ids)
                        fields_of.append(fields)
                    field_ids[fields] = index
                record_ids[record] = index
            return index

        def below(node: int, value: int, depth: int) -> int:
            """IPv6 under a /64 the database splits: the class of all of it, or -1."""
            if node >= nodes:
                return leaf(node, value, True)
            left, right = children(node)
            a = below(left, value, depth + 1)
            if a < 0:
                return a
            b = below(right, value | 1 << (127 - depth), depth + 1)
            return a if a == b else -1

        def walk(node: int, value: int, depth: int) -> int:
            """The class index under ``node`` (``FALLBACK`` for the full path), or -1:
            mixed, its networks emitted."""
            if node >= nodes:
                return leaf(node, value)
            if version == 6 and node == ipv4_start and depth:
                if depth <= width - 32:  # an alias whose IPv4 address is in the first 64 bits
                    aliases.append((value, depth))
                return FALLBACK  # the IPv4 space inside the IPv6 tree (and its aliases)
            if version == 6 and depth == width:  # split below /64: one class, or fallback
                cls = below(node, value << 64, depth)
                return cls if cls >= 0 else FALLBACK
            if depth == _CHECK_DEPTH and cancelled is not None and cancelled.is_set():
                raise CompileCancelled
            left, right = children(node)
            half = 1 << (width - 1 - depth)
            a = walk(left, value, depth + 1)
            b = walk(right, value | half, depth + 1)
            if a == b and a >= 0:
                return a
            if a >= 0:
                ranges.append(value << shift | (depth + 1) << 16 | a)
            if b >= 0:
                ranges.append((value | half) << shift | (depth + 1) << 16 | b)
            return -1

        try:
            top = walk(ipv4_start if version == 4 else 0, 0, 0)
            if top >= 0:
                ranges.append(top)
            classes = [cls for cls, _ in sorted(ids.items(), key=lambda item: item[1])]
            return NetworkMap(sorted(ranges), classes, fields_of, version, tuple(aliases))
        finally:
            # the recursive closures hold these in a reference cycle: emptied here, they are
            # freed now, not at the next full collection (a 200 ms pause of the server)
            record_ids.clear()
            field_ids.clear()
            del ranges[:]

    def class_of(self, location: Location) -> Hashable:
        """The class of a located address (memoised by its fields, like the walk's)."""
        fields = RecordFields(location.country, location.continent, location.latitude,
                              location.longitude, location.represented)
        known = self._field_class.get(fields)
        if known is None:
            if len(self._field_class) >= MEMO_LIMIT:
                self._field_class.clear()
            known = self._field_class[fields] = self._classify(fields)
        return known

    def close(self) -> None:
        self._buffer.close()

    def _matches(self, record: int, value: int, depth: int, bits: int, target: Hashable,
                 visited: list[int]) -> bool:
        """Whether every address under ``record`` (at ``depth``, first address ``value``)
        classifies as ``target``; memoises the nodes found uniform."""
        visited[0] += 1
        if visited[0] > self._budget:
            raise _OverBudget
        if record >= self._nodes:
            return self._leaf_class(record, value, depth, bits, visited) == target
        known = self._node_class.get(record)
        if known is not None:
            return known == target
        left, right = self._children(record)
        half = 1 << (bits - depth - 1)
        if not self._matches(left, value, depth + 1, bits, target, visited):
            return False
        if not self._matches(right, value | half, depth + 1, bits, target, visited):
            return False
        self._remember(record, target)
        return True

    def _remember(self, node: int, target: Hashable) -> None:
        if len(self._node_class) >= MEMO_LIMIT:
            self._node_class.clear()
        self._node_class[node] = target

    def _leaf_class(self, record: int, value: int, depth: int, bits: int,
                    visited: list[int]) -> Hashable:
        known = self._record_class.get(record)
        if known is None:
            fields = None
            if record > self._nodes:  # else no data (or a tree cut short)
                address = (ipaddress.IPv4Address(value) if bits == 32
                           else ipaddress.IPv6Address(value))
                fields = self._geo.fields(address)
            fields = fields or _NO_RECORD
            known = self._field_class.get(fields)
            if known is None:
                visited[0] += RECORD_COST
                known = self._field_class[fields] = self._classify(fields)
            if len(self._record_class) >= MEMO_LIMIT:
                self._record_class.clear()
                self._field_class.clear()
            self._record_class[record] = known
        return known

    def _follow_zeros(self, count: int) -> int:
        node = 0
        for _ in range(count):
            if node >= self._nodes:
                break
            node = self._children(node)[0]
        return node

    def _children(self, node: int, buffer: mmap.mmap | None = None) -> tuple[int, int]:
        offset = node * self._node_bytes
        raw = (buffer or self._buffer)[offset:offset + self._node_bytes]
        size = self._record_size
        if size == 24:
            return int.from_bytes(raw[:3], "big"), int.from_bytes(raw[3:], "big")
        if size == 28:
            middle = raw[3]
            return (((middle & 0xF0) << 20) | int.from_bytes(raw[:3], "big"),
                    ((middle & 0x0F) << 24) | int.from_bytes(raw[4:], "big"))
        return int.from_bytes(raw[:4], "big"), int.from_bytes(raw[4:], "big")
