"""Engine decisions for DNS answers, memoised by exactly what the decision depends on.

An engine decision (unexplained, ``Engine.decide(explain=False)``) costs tens of
microseconds; a DNS answer must cost a few. Two memos,
both dropped when a new snapshot changes what answers read (``answer_inputs``: health,
drains, a spillover threshold crossed, RTTs under latency steering), kept otherwise:

- per client: (service, ECS subnet as sent | resolver address) -> (decision, ECS scope);
- per decision inputs: (service, the client's location class (``location_class``: the
  policy's classes, which decide alike by construction), and only when they matter: the
  client's hashing bucket and bucket prefix, the measured-RTT network holding it) ->
  decision. Clients of one class in networks of other sizes share it: only the ECS scope
  differs, rebased on their network (``scope.scope_of`` with ``Decision.scope_floor``), so
  a state change costs one engine decision per class, not per class and prefix length.

A decision depends on the client's bucket only where a plugin hashes it: a steering method
that declares it reads the client hash (``weighted``), or spillover while some region of
the service is over its threshold; on the measured-RTT network only under a method that
reads it (``latency``). The key follows the methods' declarations (``engine.registry``).
Services whose hashing key is random (``affinity none``) are never memoised while hashing
is in play.
"""

from __future__ import annotations

import ipaddress
import time
from collections.abc import Callable, Hashable
from dataclasses import dataclass

from director.dns.answer_inputs import AnswerInputs
from director.dns.decision_trace import DecisionTrace
from director.dns.lanes import SPILLED
from director.dns.locate import ClientLocator
from director.dns.rtt_map import RttMap
from director.dns.scope import answer_scope, scope_of
from director.dns.snapshot_source import SnapshotSource
from director.dns.types import EcsSubnet
from director.engine import Engine
from director.engine.affinity import bucket_key
from director.engine.registry import Input
from director.engine.snapshot import Snapshot
from director.engine.spillover import spill_hash
from director.engine.types import BUCKET_PREFIX, Client, Decision
from director.geo import Location
from policies.model import Affinity, Service

_MEMO_LIMIT = 200_000
# answers widened part way that a new snapshot sends back to be asked again, oldest first:
# each costs a widening (up to a millisecond), so a swap a second costs at most a few
# percent of a core however many there are
RETRY_PER_SNAPSHOT = 64


@dataclass(frozen=True)
class Answered:
    """A decision for one query's client and the ECS scope its answer carries."""

    decision: Decision
    scope: int
    settled: bool = True  # False: the client's network was widened only part way (its
    # budget ran out): memoised, and asked again after a later snapshot (at most
    # RETRY_PER_SNAPSHOT of them per snapshot), it widens further
    lane: int | None = None  # the answer depends on the client only through the network
    # map's network holding it and the sampled RTT network holding it: ``NetworkMap.keys``
    # value | the ``RttMap`` number << 22 (``lanes``)
    lane_rtt: bool = False  # the lane key has an RTT network number
    # spillover hashes the service's clients: (service name, Engine.spill_point), and the
    # lane key has the client's spilled flag (lanes.SPILLED)
    lane_spill: tuple[str, tuple[str, float] | None] | None = None


class Decisions:
    """Memoising front of the engine for one policy."""

    def __init__(self, engine: Engine, locator: ClientLocator, snapshots: SnapshotSource,
                 location_class: Callable[[Location], Hashable],
                 observe: Callable[[float], None] | None = None) -> None:
        self.engine = engine
        self.locator = locator
        self.location_class = location_class  # see director.engine.location_class
        self.snapshots = snapshots
        self.observe = observe  # called with the seconds each engine decision took
        self.trace: DecisionTrace | None = None  # fresh decisions sampled into spans
        self._snapshot: Snapshot | None = None
        self._answer_inputs = AnswerInputs(
            engine.policy, {s.name: engine.reads(s) for s in engine.policy.services})
        self._inputs: object = None  # what answers read of the snapshot the memos are for
        self.generation = 0  # bumped each time the memos are dropped
        self._unsettled: list[tuple] = []  # memo keys of unsettled answers
        self._by_client: dict[tuple, Answered] = {}
        self._by_inputs: dict[tuple, Decision] = {}
        self._hashing: dict[str, bool] = {}
        self._latency: list[tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, str]] = []
        self._rtt_map: RttMap | None = None  # the IPv4 part of _latency, for a bisect
        self._latency6 = False  # whether _latency has IPv6 networks
        # decision key (less the spilled flag) -> Engine.spill_point of its ranking
        self._spill_points: dict[tuple, tuple[str, float] | None] = {}

    @property
    def rtt_map(self) -> RttMap | None:
        """The sampled RTT networks of the snapshot the memos are for (IPv4), or None."""
        return self._rtt_map

    def answer(self, service: Service, ecs: EcsSubnet | None, host: str) -> Answered:
        """The decision for the client of a query (memoised) and its answer's ECS scope."""
        snapshot = self._current()
        key = (service.name, ecs if ecs is not None else host)
        hit = self._by_client.get(key)
        if hit is not None:
            return hit
        if ecs is not None and ecs.source and (self.locator.network_map if ecs.family == 1
                                               else self.locator.network_map6):
            mapped = self._mapped(service, ecs, snapshot)
            if mapped is not None:
                return mapped
        client = self.locator.client(service, ecs, host)
        decision = self._decide(service, client, snapshot)
        if self.trace is not None:
            self.trace.decided(
                service, client, decision,
                lambda: self.engine.decide(service, client, snapshot, explain=True),
                lambda d: self._scope(d, client, service, snapshot))
        settled = self.locator.settled(client)
        answered = Answered(decision, self._scope(decision, client, service, snapshot),
                            settled)
        if self._cacheable(service):
            if len(self._by_client) >= _MEMO_LIMIT:
                self._by_client.clear()
            self._by_client[key] = answered
            if not settled:
                self._unsettled.append(key)
        return answered

    def _mapped(self, service: Service, ecs: EcsSubnet, snapshot: Snapshot) -> Answered | None:
        """A client subnet's answer from the precompiled network map of its IP version, the
        sampled RTT networks (``RttMap``, IPv4) and the decision memo alone, without
        building a client: the same key as ``_inputs_key`` computed from the address's
        integer (None when the decision is not memoised yet, or the map falls back: the
        full way then)."""
        reads = self.engine.reads(service)
        if not self._cacheable(service):
            return None
        version, width = (4, 32) if ecs.family == 1 else (6, 128)
        network_map = self.locator.network_map if version == 4 else self.locator.network_map6
        assert network_map is not None
        value = int.from_bytes(ecs.packed(), "big")
        index = network_map.find(value if version == 4 else value >> 64)
        if network_map.fallback(index):
            return None
        prefix = network_map.prefixes[index]
        bucket = self._bucket(service, reads, version, value, ecs.source)
        rtt = 0
        if Input.RTT_NETWORK in reads and self._rtt_map is not None:
            if version == 6:
                if self._latency6:
                    return None  # no bisect for IPv6 RTT networks: the full way
            else:
                rtt = self._rtt_map.find(value)
        key = (service.name, version, (network_map.class_of(index),), bucket,
               self._rtt_map.cidrs[rtt] if self._rtt_map is not None else None)
        spill = None
        if self._spill_hashed(service, reads):
            if key not in self._spill_points:
                return None
            point = self._spill_points[key]
            assert bucket is not None  # spillover configured
            spill = _spills(bucket_key(value, width, bucket[0]), service, point)
        decision = self._by_inputs.get((*key, spill))
        if decision is None:
            return None
        # not hashed by the address, and the ECS address within the map's 64 bits (IPv6)
        by_network = (bucket is None or bucket[1] is None) and ecs.source <= 64
        return Answered(decision, scope_of(decision, prefix, ecs.source, service, snapshot,
                                           reads),
                        lane=network_map.keys[index] | rtt << 22 | (SPILLED if spill else 0)
                        if by_network else None,
                        lane_rtt=Input.RTT_NETWORK in reads and self._rtt_map is not None,
                        lane_spill=(service.name, self._spill_points[key])
                        if spill is not None else None)

    def explain(self, service: Service, ecs: EcsSubnet | None, host: str) -> Answered:
        """A fresh decision with its full explain chain (never memoised)."""
        snapshot = self.snapshots.current
        client = self.locator.client(service, ecs, host)
        decision = self._timed(service, client, snapshot, explain=True)
        return Answered(decision, self._scope(decision, client, service, snapshot))

    def _scope(self, decision: Decision, client: Client, service: Service,
               snapshot: Snapshot) -> int:
        return answer_scope(decision, client, service, snapshot, self.engine.reads(service))

    def cacheable(self, service: Service) -> bool:
        """Whether answers for ``service`` are a function of the query alone right now."""
        self._current()
        return self._cacheable(service)

    def clear(self) -> None:
        """Forget every memoised decision (the next query recomputes)."""
        self._snapshot = None
        self._inputs = None

    def current(self) -> tuple[Snapshot, int]:
        """The snapshot answers are made under and the memos' generation: a new generation
        means answers may have changed (caches of answers built on these must go)."""
        return self._current(), self.generation

    def _current(self) -> Snapshot:
        snapshot = self.snapshots.current
        if snapshot is not self._snapshot:
            self._snapshot = snapshot
            inputs = self._answer_inputs.of(snapshot)
            if inputs != self._inputs or self._inputs is None:
                self._inputs = inputs
                self.generation += 1
                self._by_client = {}
                self._by_inputs = {}
                self._unsettled = []
                self._hashing = {s.name: _hashes_clients(s, snapshot, self.engine.reads(s))
                                 for s in self.engine.policy.services}
                self._latency = _latency_networks(snapshot)
                self._spill_points = {}
                self._rtt_map = RttMap(snapshot.latency) if snapshot.latency else None
                self._latency6 = any(net.version == 6 for net, _ in self._latency)
            else:  # answers stand; the oldest of those widened part way are asked again
                for key in self._unsettled[:RETRY_PER_SNAPSHOT]:
                    self._by_client.pop(key, None)
                del self._unsettled[:RETRY_PER_SNAPSHOT]
        return snapshot

    def _cacheable(self, service: Service) -> bool:
        return service.affinity is Affinity.SUBNET or not self._hashing.get(service.name, True)

    def _decide(self, service: Service, client: Client, snapshot: Snapshot) -> Decision:
        if not self._cacheable(service):
            return self._timed(service, client, snapshot)
        key = self._inputs_key(service, client, snapshot)
        decision = self._by_inputs.get(key)
        if decision is None:
            decision = self._timed(service, client, snapshot)
            if len(self._by_inputs) >= _MEMO_LIMIT:
                self._by_inputs.clear()
            self._by_inputs[key] = decision
        return decision

    def _timed(self, service: Service, client: Client, snapshot: Snapshot, *,
               explain: bool = False) -> Decision:
        start = time.perf_counter()
        decision = self.engine.decide(service, client, snapshot, explain=explain)
        if self.observe is not None:
            self.observe(time.perf_counter() - start)
        return decision

    def _inputs_key(self, service: Service, client: Client, snapshot: Snapshot) -> tuple:
        location = client.location
        where: tuple | None = None
        if location is not None:
            where = (self.location_class(location),)  # the network: only the scope
        reads = self.engine.reads(service)
        address = client.address
        bucket = self._bucket(service, reads, address.version, int(address),
                              client.network.prefixlen)
        rtt: object = None
        if Input.RTT_NETWORK in reads and self._latency:
            rtt = next((cidr for net, cidr in self._latency
                        if net.version == client.address.version and client.address in net),
                       None)
        key = (service.name, client.address.version, where, bucket, rtt)
        spill = None
        if self._spill_hashed(service, reads):
            if key in self._spill_points:
                point = self._spill_points[key]
            else:
                if len(self._spill_points) >= _MEMO_LIMIT:
                    self._spill_points.clear()
                point = self._spill_points[key] = self.engine.spill_point(
                    service, client, snapshot)
            assert bucket is not None  # spillover configured
            spill = _spills(bucket_key(int(address), address.max_prefixlen, bucket[0]),
                            service, point)
        return (*key, spill)

    def _spill_hashed(self, service: Service, reads: frozenset[Input]) -> bool:
        """Whether spillover alone hashes this service's clients now: then a client's
        decision is one of two per ranking, by its spill hash (``Engine.spill_point``)."""
        return self._hashing.get(service.name, True) and Input.CLIENT_HASH not in reads

    def _bucket(self, service: Service, reads: frozenset[Input], version: int, value: int,
                source: int) -> tuple[int, bytes | None] | None:
        """The client's hashing bucket (``Client.bucket``) as the memo key holds it: its
        prefix length and, while a steering method hashes clients, its hashing key
        (``bucket_key``; spillover alone adds a spilled flag instead: ``_spill_hashed``);
        None when no plugin of the service can hash."""
        if service.spillover is None and Input.CLIENT_HASH not in reads:
            return None
        width = 32 if version == 4 else 128
        bits = min(BUCKET_PREFIX[version], source)
        if not self._hashing.get(service.name, True) or Input.CLIENT_HASH not in reads:
            return bits, None
        return bits, bucket_key(value, width, bits)


def _spills(network: bytes, service: Service, point: tuple[str, float] | None) -> bool:
    """Whether the client of bucket ``network`` (address bytes + prefix length: the
    engine's client key) spills at ``point`` (None: nothing spills)."""
    if point is None:
        return False
    return spill_hash(network, service.name, point[0]) < point[1]


def _hashes_clients(service: Service, snapshot: Snapshot, reads: frozenset[Input]) -> bool:
    """Whether a decision for ``service`` may hash the client's key under this snapshot."""
    if Input.CLIENT_HASH in reads:
        return True
    spill = service.spillover
    if spill is None:
        return False
    for name in service.regions:
        utilization = snapshot.region(name).utilization
        if utilization is not None and utilization > spill.threshold:
            return True
    return False


def _latency_networks(snapshot: Snapshot) -> list:
    networks = []
    for cidr in snapshot.latency:
        try:
            networks.append((ipaddress.ip_network(cidr), cidr))
        except ValueError:
            continue
    networks.sort(key=lambda item: -item[0].prefixlen)
    return networks
