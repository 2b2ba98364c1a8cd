"""The DNS application: one object the transports call with raw queries.

``DnsApp.respond(data, host, tcp)`` runs response rate limiting for UDP (log-only by
default), then the fast path (which falls back to the full path). It never raises: an
internal error answers SERVFAIL.
``set_policy`` swaps in a new policy (a new zone, engine and caches) atomically; queries in
flight finish on the old one. ``prepare_maps`` builds (or loads) the network maps of a new
policy's location classes beforehand, so that the swap takes them at once. With
``dnssec_keys`` (a key directory, ``director.dnssec``) answers to DO queries are signed; a
policy whose zone has no usable key there is refused.
With ``dnssec_presigned`` (a Redis URL) the server holds no key: it signs with what
``director dnssec presign`` published there (``director.dnssec.presigned``).
"""

from __future__ import annotations

import contextlib
import logging
import os
import random
import tempfile
import threading
import time
from collections.abc import Callable, Hashable
from pathlib import Path

from opentelemetry.trace import Tracer

from director.dns import wire
from director.dns.decision_trace import DecisionTrace
from director.dns.decisions import Decisions
from director.dns.fastpath import FastPath, LaneLookup
from director.dns.handler import Handler
from director.dns.locate import ClientLocator
from director.dns.map_build import MapBuild
from director.dns.metrics import DnsStats
from director.dns.ratelimit import ResponseRateLimiter, RrlMode
from director.dns.responder import Responder
from director.dns.snapshot_source import SnapshotSource, StaticSnapshotSource
from director.dns.zone import ZoneData
from director.dnssec.presigned import PresignedFollower, PresignedSigner
from director.dnssec.signer import ZoneSigner
from director.engine import Engine
from director.engine.location_class import classifier_key, location_classifier
from director.geo import GeoLocator
from director.geo_map import NetworkMap
from director.geo_map_cache import Maps, load_maps, map_digest, save_maps
from director.geo_merge import DEFAULT_BUDGET, CompileCancelled, MergedNetworks
from policies.model import Policy
from state.keys import DEFAULT_PREFIX

log = logging.getLogger(__name__)

PRESIGNED_WAIT = 3.0  # seconds a worker waits at start for the pre-signed answers
PREPARE_WAIT = 600.0  # seconds a policy edit waits for its maps before it answers without


class DnsApp:
    """Policy, GeoIP, snapshot source, caches, rate limiter and stats of one server process."""

    def __init__(self, policy: Policy, geo: GeoLocator, snapshots: SnapshotSource, *,
                 rrl_mode: RrlMode = RrlMode.LOG_ONLY, rrl_rate: float = 20.0, rrl_slip: int = 2,
                 stats: DnsStats | None = None, rng: random.Random | None = None,
                 merge_budget: int = DEFAULT_BUDGET, precompile: bool = False,
                 tracer: Tracer | None = None, dnssec_keys: Path | None = None,
                 dnssec_presigned: str | None = None,
                 state_prefix: str = DEFAULT_PREFIX, map_cache: Path | None = None) -> None:
        self.geo = geo
        self.dnssec_keys = dnssec_keys  # sign with the zone's keys in this directory
        self.dnssec_presigned = dnssec_presigned  # or: signatures from this Redis URL
        self.state_prefix = state_prefix
        self._follower: PresignedFollower | None = None
        self._dnssec_carry: dict[str, float] = {}  # counts of signers replaced by a swap
        self._signer_now: ZoneSigner | PresignedSigner | None = None
        self.tracer = tracer  # fresh decisions sampled into spans (``decision_trace``)
        self.snapshots = snapshots
        self.stats = stats or DnsStats()
        self.rng = rng or random.Random()
        self.merge_budget = merge_budget  # work per GeoIP widening (director.geo_merge)
        self.precompile = precompile  # merge the IPv4 space ahead of time (director.geo_map)
        self.map_cache = map_cache  # where built maps are kept across restarts
        self.map_ready: threading.Event | None = None  # set once the map answers
        self._map_key: Hashable = None  # the location classes the map is (being) built for
        self._network_maps: tuple[NetworkMap | None, NetworkMap | None] = (None, None)
        self._map_cancel = threading.Event()
        self._map_lock = threading.Lock()
        self._prepared: dict[Hashable, Maps] = {}  # maps built for a policy not yet swapped in
        self._building: MapBuild | None = None  # the child building them
        self._last_error_log = 0.0
        self.rrl = (ResponseRateLimiter(rrl_mode, self.stats, rate=rrl_rate, slip=rrl_slip)
                    if rrl_mode is not RrlMode.OFF else None)
        self.set_policy(policy)

    def set_policy(self, policy: Policy) -> None:
        """Answer from ``policy`` from now on (new zone, engine and caches). The network map
        is kept when the new policy classifies locations alike (``classifier_key``), else
        loaded from ``map_cache`` when stored there (``geo_map_cache``) or rebuilt in the
        background (a build for a replaced policy is cancelled) and then stored."""
        zone = ZoneData(policy)
        signer = self._signer(policy, zone)
        merged = MergedNetworks(self.geo, location_classifier(policy), self.merge_budget)
        locator = ClientLocator(geo=self.geo, merged=merged)
        with self._map_lock:  # a build finishing now gives its map to this locator
            if self.precompile:
                key = classifier_key(policy)
                if key == self._map_key:  # None while still being built
                    locator.network_map, locator.network_map6 = self._network_maps
                else:
                    stored = self._prepared.pop(key, None) or self._stored_maps(key)
                    self._map_key, self._network_maps = key, stored or (None, None)
                    if stored is not None:
                        locator.network_map, locator.network_map6 = stored
                        self._map_cancel.set()  # a build for other classes
                        self.map_ready = threading.Event()
                        self.map_ready.set()
                    else:
                        self._compile_in_background(key, merged)
            self.locator = locator
        engine = Engine(policy, rng=self.rng, timings=self.stats.plugin_timings)
        decisions = Decisions(engine, locator, self.snapshots,
                              merged.class_of, observe=self.stats.observe_decision)
        if self.tracer is not None:
            decisions.trace = DecisionTrace(self.tracer)
        handler = Handler(zone, decisions, signer)
        self._track_signer(signer)
        responder = Responder(handler)
        self.policy = policy
        self.handler = handler
        self.responder = responder
        self.fast = FastPath(responder, zone, decisions, self.snapshots, self.stats)

    def prepare_maps(self, policy: Policy) -> None:
        """Have the network maps of ``policy``'s location classes at hand before it is
        swapped in, so that ``set_policy`` takes them at once and no answer after the swap
        takes the slow path: the current maps when its classes are alike, else the stored
        ones (``map_cache``), else built in a child process (``map_build``: seconds, and the
        server keeps answering at speed; call this off the serving loop). A newer call
        cancels a build under way; a failed build raises ``MapBuildFailed``."""
        if not self.precompile:
            return
        key = classifier_key(policy)
        with self._map_lock:
            if key in self._prepared or (key == self._map_key
                                         and self._network_maps[0] is not None):
                return
        maps = self._stored_maps(key)
        if maps is None:
            with tempfile.TemporaryDirectory(prefix="director-map-") as scratch:
                folder = self.map_cache or Path(scratch)
                build = MapBuild(self.geo.path, policy, self.merge_budget, folder,
                                 map_digest(self.geo.path, key))
                with self._map_lock:
                    if self._building is not None:
                        self._building.cancel()
                    self._building = build
                start = time.monotonic()
                maps = build.run(PREPARE_WAIT)
            log.info("GeoIP network map for the new policy's classes: %d IPv4 networks in "
                     "%d classes, built in %.1f s", len(maps[0]), len(maps[0].classes),
                     time.monotonic() - start)
        with self._map_lock:
            self._prepared = {key: maps}  # only the newest policy's

    def _track_signer(self, signer: ZoneSigner | PresignedSigner | None) -> None:
        """Export ``signer``'s metrics; counts of the signer it replaces are carried on."""
        old = self._signer_now
        if old is not None:
            for key, value in old.metrics().items():
                if key in ("signatures", "presigned_misses"):
                    self._dnssec_carry[key] = self._dnssec_carry.get(key, 0) + value
        self._signer_now = signer
        if signer is None:
            return

        def values() -> dict[str, float]:
            now = signer.metrics()
            return {k: v + self._dnssec_carry.get(k, 0) for k, v in now.items()}

        self.stats.dnssec = values

    def close(self) -> None:
        """Stop the threads this app started (the pre-signed answers' follower)."""
        if self._follower is not None:
            self._follower.stop()

    def _signer(self, policy: Policy, zone: ZoneData) -> ZoneSigner | PresignedSigner | None:
        if self.dnssec_keys is not None:
            return ZoneSigner(policy.zone.apex, self.dnssec_keys, zone.ttl)
        if self.dnssec_presigned is None:
            return None
        presigned = PresignedSigner(zone)
        follower = PresignedFollower(presigned, self.dnssec_presigned, self.state_prefix)
        if not follower.wait_ready(PRESIGNED_WAIT):
            log.warning("DNSSEC: no pre-signed answers in the shared state yet: signed "
                        "answers are SERVFAIL until `director dnssec presign` publishes")
        follower.start()
        if self._follower is not None:
            self._follower.stop()
        self._follower = follower
        return presigned

    def _stored_maps(self, key: Hashable) -> Maps | None:
        if self.map_cache is None:
            return None
        start = time.monotonic()
        maps = load_maps(self.map_cache, map_digest(self.geo.path, key))
        if maps is not None:
            log.info("GeoIP network map: %d IPv4 networks in %d classes, loaded from %s in "
                     "%.2f s", len(maps[0]), len(maps[0].classes), self.map_cache,
                     time.monotonic() - start)
        return maps

    def _compile_in_background(self, key: Hashable, merged: MergedNetworks) -> None:
        """Build the IPv4 network map on a low-priority thread; answers use the lazy
        widening until it is there. A build under way for other classes is cancelled."""
        self._map_cancel.set()
        cancel = self._map_cancel = threading.Event()
        self.map_ready = ready = threading.Event()

        def build() -> None:
            with contextlib.suppress(OSError):  # low priority: it uses spare CPU first
                os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), 19)
            start = time.monotonic()
            try:
                network_map = merged.compile_ipv4(cancel)
                network_map6 = merged.compile_ipv6(cancel)
            except CompileCancelled:
                log.info("GeoIP network map: build cancelled (the policy's classes changed)")
                return
            except Exception:
                log.exception("GeoIP network map: build failed; widening on demand")
                return
            with self._map_lock:
                if self._map_key != key:
                    return
                self._network_maps = (network_map, network_map6)
                self.locator.network_map = network_map
                self.locator.network_map6 = network_map6
            log.info("GeoIP network map: %d IPv4 networks in %d classes, %d IPv6 networks, "
                     "built in %.1f s", len(network_map), len(network_map.classes),
                     len(network_map6) if network_map6 is not None else 0,
                     time.monotonic() - start)
            if self.map_cache is not None:  # first: a process stopped once it answers has it
                save_maps(self.map_cache, map_digest(self.geo.path, key),
                          (network_map, network_map6))
            ready.set()  # after the log line: a server waiting for it starts after both

        threading.Thread(target=build, name="geoip-map", daemon=True).start()

    def respond(self, data: bytes, host: str, tcp: bool = False) -> bytes | None:
        """The response to send for the raw query ``data`` from ``host``, or None."""
        if not tcp and self.rrl is not None:
            allowed, instead = self.rrl.check(host, data)
            if not allowed:
                return instead
        try:
            return self.fast.respond(data, host, tcp)
        except Exception:
            return self.failed(data, host)

    def udp_responder(self, limited: bool = True) -> Callable[[bytes, tuple], bytes | None]:
        """The fastest correct UDP responder for one batch of datagrams, called with the
        datagram and its socket address (see ``FastPath.udp_responder``); it may raise, so
        callers catch and call ``failed``. ``limited=False``: without rate limiting, for a
        transport that applies ``rate_limit`` itself."""
        try:
            respond = self.fast.udp_responder()
        except Exception:  # e.g. the snapshot source failing: answer SERVFAIL meanwhile
            self._log_error("internal error preparing to answer")
            return self._servfail
        rrl = self.rrl
        if rrl is None or not limited:
            return respond

        def rate_limited(data: bytes, addr: tuple) -> bytes | None:
            allowed, instead = rrl.check(addr[0], data)
            return respond(data, addr) if allowed else instead

        return rate_limited

    def rate_limit(self) -> Callable[[Hashable, float], int] | None:
        """``ResponseRateLimiter.limit`` for a transport that rate-limits its datagrams
        itself (keyed by raw address bytes cut to /24 or /56), or None when RRL is off."""
        return self.rrl.limit if self.rrl is not None else None

    def udp_memo(self) -> tuple[dict[bytes, object], list[int], LaneLookup] | None:
        """``FastPath.udp_memo`` for a transport that answers memo hits itself, or None when
        every response must come through ``udp_responder`` (the fast path cannot prepare)."""
        try:
            return self.fast.udp_memo()
        except Exception:
            return None

    def reader_memo(self) -> dict[bytes, object] | None:
        """``FastPath.udp_memo_if_fresh`` for a UDP reader thread, or None when every
        response must come through the event loop (rate limiting is on, the memo is stale)."""
        if self.rrl is not None:
            return None
        try:
            return self.fast.udp_memo_if_fresh()
        except Exception:
            return None

    def failed(self, data: bytes, host: str) -> bytes | None:
        """Log the exception being handled (at most once a second) and answer SERVFAIL
        (None for what is not a query)."""
        self._log_error(f"internal error answering a query from {host}")
        return self._servfail(data, None)

    def _servfail(self, data: bytes, _addr: object) -> bytes | None:
        if len(data) < 12 or data[2] & 0x80:
            return None
        return wire.header_only(data, 2)

    def _log_error(self, message: str) -> None:
        now = time.monotonic()
        if now - self._last_error_log >= 1.0:
            self._last_error_log = now
            log.exception(message)

    def respond_full(self, data: bytes, host: str, tcp: bool = False) -> bytes | None:
        """The full (dnspython) path alone, bypassing caches: for tests and debugging."""
        return self.responder.respond(data, host, tcp).wire


def build_app(policy: Policy, *, geoip: str | None = None,
              snapshots: SnapshotSource | None = None, rrl_mode: str = "log-only",
              rrl_rate: float = 20.0, rng: random.Random | None = None) -> DnsApp:
    """A ``DnsApp`` for ``policy`` with the GeoIP database at ``geoip`` (default: the
    bundled GeoLite2 City) and ``snapshots`` (default: an empty in-process snapshot)."""
    return DnsApp(policy, GeoLocator(geoip), snapshots or StaticSnapshotSource(),
                  rrl_mode=RrlMode(rrl_mode), rrl_rate=rrl_rate, rng=rng)
