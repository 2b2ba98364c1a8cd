"""Answers for client subnets never seen before, without parsing the query.

A resolver forwarding ECS for millions of client networks sends queries that differ only
in the last bytes, the ECS address, and (with 0x20 case randomisation) in the case of the
name's letters. Everything else, the *shape*, decides what is asked: name, type, class,
flags, EDNS payload and DO, ECS family and source prefix. Under the network map of
its IP version (``director.geo_map``; IPv6 by the first 64 bits) the answer's decision and
scope depend on the client only through the map network holding its address: its class
and prefix length (``NetworkMap.keys``), and for services steered by measured latency, the
sampled RTT network holding it (``RttMap``, IPv4).

So a lane is, per shape with the name lower-cased, a table of map key -> the response's
header and the bytes after the question (the template of ``fastpath``); answering is a
binary search in the map, a dictionary lookup and a splice of the question and the ECS
address as sent:

    response = id + header + question as sent + tail + ECS address as sent

Only the layout the fast path fills lanes from is read: one question, an OPT record whose
only option is ECS, the address last (``lane_layout``). A lane key is computed from a
query's bytes as if it had that layout; it equals the key of a query that had it only if
the query is that query with other letter case in the name and another address (the
name's label-length bytes are below 64, where lower-casing changes nothing), so a query of
another layout finds no lane. The address must have zero bits past the source prefix, as
the full path requires. Lanes are filled by ``FastPath`` with answers the decisions made
from the map alone (``Answered.lane``) and dropped with the fast path's caches.
"""

from __future__ import annotations

import bisect
from typing import NamedTuple

from director.dns.rtt_map import RttMap
from director.engine.affinity import bucket_key
from director.engine.spillover import spill_hash
from director.engine.types import BUCKET_PREFIX
from director.geo_map import NetworkMap

# From the end of the question's name to the ECS address: type, class (4), the OPT record
# (root owner 1, type 2, payload 2, extended rcode/version/flags 4, rdata length 2) and
# the ECS option's code, length, family, source and scope (8).
_AFTER_NAME = 4 + 11 + 8
_AFTER_QUESTION = 11 + 8
SHAPE_LIMIT = 20_000  # distinct shapes kept (each a name, type and EDNS variant)


class LaneAnswer(NamedTuple):
    header: bytes  # response bytes 2..12: flags and counts
    tail: bytes  # after the question, up to the ECS address
    slot: int  # its metrics counter (DnsStats.label_id)
    whole: bytes  # header, the lane's question as its shape has it, tail


class Lane(NamedTuple):
    answers: dict[int, LaneAnswer]  # NetworkMap.keys value (| RttMap number << 22) -> answer
    mask: int  # address bits past the source prefix: must be zero
    shift: int  # to the 32-bit address from the address bytes as an integer
    rtt: bool  # the answer depends on the sampled RTT network holding the address too
    # spillover hashes the clients of the lane's service (its name), else None; then the
    # answer also depends on the client's spilled flag (``SPILLED`` in the key), from the
    # spill point per key (None: nothing spills there) and the bucket prefix length
    spill_service: str | None
    points: dict[int, tuple[str, float] | None]
    bucket_bits: int
    network_map: NetworkMap  # of the lane's IP version (from the shape's ECS family)


SPILLED = 1 << 40  # in a lane key: the client spills (``Engine.spill_point``)


def _bucket_key(address: int, bits: int, version: int) -> bytes:
    """``bucket_key`` of ``address``: IPv4, or the first 64 bits of an IPv6 address (the
    bucket is at most /56)."""
    if version == 4:
        return bucket_key(address, 32, bits)
    return bucket_key(address << 64, 128, bits)


def lane_layout(data: bytes, question_end: int, address_size: int) -> bool:
    """Whether a parsed query with an ECS address of ``address_size`` bytes has the layout
    lanes read: nothing between the question and the address but an OPT record holding
    the ECS option alone."""
    return len(data) - question_end == _AFTER_QUESTION + address_size


class SubnetLanes:
    """The lanes of one generation of answers under the network maps of one policy."""

    def __init__(self, network_map: NetworkMap | None, rtt_map: RttMap | None = None,
                 network_map6: NetworkMap | None = None) -> None:
        self.network_map = network_map
        self.network_map6 = network_map6
        self.rtt_map = rtt_map  # of the same generation of answers (IPv4)
        self._bisect = bisect.bisect_right
        self._lanes: dict[bytes, Lane] = {}
        self._sizes: list[int] = []  # the address sizes of the lanes, for the lookup

    def __len__(self) -> int:
        return sum(len(lane.answers) for lane in self._lanes.values())

    def answer(self, query: bytes) -> tuple[bytes, int] | None:
        """(response less its ID, metrics slot) for ``query`` (a query less its ID), or
        None when no lane holds its shape and map network yet."""
        n = len(query)
        for size in self._sizes:
            cut = n - size
            name_end = cut - _AFTER_NAME
            if name_end <= 10:
                continue
            # a query already in lower case is its own shape: one slice, and its answer's
            # bytes up to the ECS address are the lane's (``LaneAnswer.whole``)
            lane = self._lanes.get(query[:cut])
            exact = lane is not None
            if lane is None:
                lane = self._lanes.get(query[:name_end].lower() + query[name_end:cut])
                if lane is None:
                    continue
            answers, mask, shift, rtt, spill_service, points, bits, network_map = lane
            raw = int.from_bytes(query[cut:], "big")
            if raw & mask:
                return None
            address = raw << shift  # IPv4: the address; IPv6: its first 64 bits
            block = address >> network_map.top_shift  # NetworkMap.find, inlined
            first = network_map.first
            key = network_map.keys[self._bisect(network_map.starts, address, first[block],
                                                first[block + 1]) - 1]
            if rtt and self.rtt_map is not None:
                key |= self.rtt_map.find(address) << 22
            if spill_service is not None:
                if key not in points:
                    return None
                point = points[key]
                if point is not None and spill_hash(
                        _bucket_key(address, bits, network_map.version), spill_service,
                        point[0]) < point[1]:
                    key |= SPILLED
            found = answers.get(key)
            if found is None:
                return None
            if exact:
                return found.whole + query[cut:], found.slot
            header, tail, slot, _ = found
            return header + query[10:cut - _AFTER_QUESTION] + tail + query[cut:], slot
        return None

    def add(self, query: bytes, source: int, key: int, response: bytes, slot: int,
            rtt: bool = False, spill: tuple[str, tuple[str, float] | None] | None = None
            ) -> None:
        """Remember ``response`` (less its ID; it ends with the ECS address) to ``query``
        (less its ID; parsed, with ``lane_layout``) for its shape and ``key`` (with an RTT
        network number when ``rtt``, and ``SPILLED`` when the client spilled: ``spill``
        is then (service name, spill point): ``Answered.lane``)."""
        size = (source + 7) // 8
        cut = len(query) - size
        name_end = cut - _AFTER_NAME
        shape = query[:name_end].lower() + query[name_end:cut]
        lane = self._lanes.get(shape)
        if lane is None:
            if len(self._lanes) >= SHAPE_LIMIT:
                self._lanes.clear()
            bits = 8 * size
            version = 4 if query[name_end + 19:name_end + 21] == b"\x00\x01" else 6
            network_map = self.network_map if version == 4 else self.network_map6
            if network_map is None:
                return
            lane = Lane({}, (1 << (bits - source)) - 1, (32 if version == 4 else 64) - bits,
                        rtt, spill[0] if spill is not None else None, {},
                        min(BUCKET_PREFIX[version], source), network_map)
            self._lanes[shape] = lane
            if size not in self._sizes:
                self._sizes.append(size)
        question = cut - _AFTER_QUESTION - 10
        tail = response[10 + question:len(response) - size]
        lane.answers[key] = LaneAnswer(response[:10], tail, slot,
                                       response[:10] + shape[10:cut - _AFTER_QUESTION] + tail)
        if spill is not None:
            lane.points[key & ~SPILLED] = spill[1]
