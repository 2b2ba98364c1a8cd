"""The shared state, synchronous flavour: what probes (Celery tasks) and tools write and read.

One interface on the Redis protocol; :mod:`state.aio` is the asyncio twin used by the
balancers and the refresher. Writers publish the changed key on ``Keys.changes`` for health
changes, region load, latency, drains and the policy (GPU load is not published: it changes
on every scrape and only the regional balancer reads it, by polling).

Every method raises :class:`~state.errors.StateUnavailable` when the server is
unreachable and :class:`~state.errors.StateError` for other server errors.
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Mapping, Sequence

import redis

from state.credentials import client_options
from state.durability import NOT_ASKED, Durability, Expected, ReplicaAcks, judge, queue_confirmation
from state.errors import PolicyVersionMismatch
from state.guard import describe, redis_errors
from state.hysteresis import SCRIPT, ProbeOutcome
from state.instances import Instance
from state.keys import Keys, latency_field
from state.policy_write import SCRIPT as POLICY_SCRIPT
from state.records import (
    DrainFlags,
    GpuLoad,
    HealthRecord,
    LatencySample,
    PolicyRecord,
    RegionLoad,
)
from state.region_load import SourcedLoad, combined_from_hash
from state.sentinel_url import client_for, replica_acks
from state.writes import policy_written, probe_call, queue_drain, queue_region_load

DEFAULT_TIMEOUT = 2.0


class StateStore:
    """Synchronous access to the shared state of one deployment (one key prefix)."""

    def __init__(self, client: redis.Redis, keys: Keys | None = None,
                 acks: ReplicaAcks | None = None) -> None:
        self.client = client
        self.keys = keys or Keys()
        self.acks = acks or ReplicaAcks()
        self._where = describe(client)
        self._hysteresis = client.register_script(SCRIPT)
        self._store_policy = client.register_script(POLICY_SCRIPT)

    @classmethod
    def from_url(
        cls, url: str, *, prefix: str = "director", timeout: float = DEFAULT_TIMEOUT,
        credentials: redis.CredentialProvider | None = None,
    ) -> StateStore:
        """A store on ``redis://[user:password@]host:port/db``, or on the master of a
        Sentinel set (``redis+sentinel://``: ``state.sentinel_url``); connects lazily, on
        first use. Without credentials in the URL, ``credentials`` or else the environment's
        (:mod:`state.credentials`) authenticate it."""
        options = ({"credential_provider": credentials} if credentials is not None
                   else client_options(url))
        client = client_for(url, timeout, health_check_interval=30, **options)
        return cls(client, Keys(prefix), replica_acks(url))

    def close(self) -> None:
        self.client.close()

    def ping(self) -> None:
        with redis_errors(self._where):
            self.client.ping()

    def confirm(self, expected: Expected) -> Durability:
        """Whether the write that left ``expected`` reached ``acks.replicas`` replicas
        (``state.durability``); tried ``acks.attempts`` times."""
        if not self.acks.replicas:
            return NOT_ASKED
        result = NOT_ASKED
        for attempt in range(1, self.acks.attempts + 1):
            with redis_errors(self._where):
                pipe = self.client.pipeline(transaction=False)
                queue_confirmation(pipe, self.keys.prefix, expected, self.acks)
                result = judge(pipe.execute(), expected, self.acks, attempt)
            if result.durable or not result.present:
                break
        return result

    def confirm_policy(self, version: int, epoch: str) -> Durability:
        """``confirm`` for policy ``version`` of ``epoch`` (as ``write_policy`` returned)."""
        return self.confirm(policy_written(self.keys, version, epoch))

    # health ------------------------------------------------------------------------------

    def record_probe(
        self,
        region: str,
        gpu: str | None,
        *,
        ok: bool,
        rise: int,
        fall: int,
        now: float | None = None,
        probe_id: str = "",
        status: int | None = None,
        latency_ms: float | None = None,
        error: str = "",
        endpoint: str | None = None,
    ) -> ProbeOutcome:
        """Apply one probe result to a GPU server (``gpu`` set), a region's balancer, or the
        balancer at one of its endpoints (``endpoint`` set)."""
        keys, args = probe_call(self.keys, region, gpu, ok=ok, rise=rise, fall=fall, now=now,
                                probe_id=probe_id, status=status, latency_ms=latency_ms,
                                error=error, endpoint=endpoint)
        with redis_errors(self._where):
            return ProbeOutcome(int(self._hysteresis(keys=keys, args=args)))

    def gpu_health(self, region: str, gpu: str) -> HealthRecord | None:
        return self._health(self.keys.gpu_health(region, gpu))

    def balancer_health(self, region: str) -> HealthRecord | None:
        return self._health(self.keys.balancer_health(region))

    def endpoint_health(self, region: str, address: str) -> HealthRecord | None:
        return self._health(self.keys.endpoint_health(region, address))

    def _health(self, key: str) -> HealthRecord | None:
        with redis_errors(self._where):
            raw = self.client.hgetall(key)
        return HealthRecord.from_fields(raw) if raw else None

    # load --------------------------------------------------------------------------------

    def heartbeat(self, instance: Instance) -> None:
        """Write ``instance``'s heartbeat, seen now (``state.instances``)."""
        with redis_errors(self._where):
            self.client.hset(self.keys.instances, instance.field, instance.seen().to_json())

    def write_gpu_load(self, region: str, gpu: str, load: GpuLoad) -> None:
        with redis_errors(self._where):
            self.client.hset(self.keys.gpu_load(region, gpu), mapping=load.to_fields())

    def gpu_load(self, region: str, gpu: str) -> GpuLoad | None:
        with redis_errors(self._where):
            raw = self.client.hgetall(self.keys.gpu_load(region, gpu))
        return GpuLoad.from_fields(raw) if raw else None

    def write_region_load(self, region: str, load: RegionLoad, *, source: str = "",
                          pool: str = "") -> None:
        """Publish ``source``'s view of a region's load (one record per balancer:
        ``state.region_load``; ``""`` for a region's only writer)."""
        with redis_errors(self._where):
            pipe = self.client.pipeline(transaction=False)
            queue_region_load(pipe, self.keys, region, SourcedLoad(source, load, pool))
            pipe.execute()

    def region_load(self, region: str) -> RegionLoad | None:
        """The region's load, its balancers' records combined."""
        with redis_errors(self._where):
            raw = self.client.hgetall(self.keys.region_load(region))
        return combined_from_hash(raw) if raw else None

    # latency -----------------------------------------------------------------------------

    def write_latency(self, sample: LatencySample) -> None:
        with redis_errors(self._where):
            pipe = self.client.pipeline(transaction=False)
            pipe.hset(
                self.keys.latency, latency_field(sample.vantage, sample.region), sample.to_value()
            )
            pipe.publish(self.keys.changes, self.keys.latency)
            pipe.execute()

    def latency(self) -> list[LatencySample]:
        with redis_errors(self._where):
            raw = self.client.hgetall(self.keys.latency)
        return [LatencySample.from_field(k, v) for k, v in raw.items()]

    # policy and drains -------------------------------------------------------------------

    def set_policy(self, text: str, now: float | None = None, *, name: str = "policy.dp",
                   files: Mapping[str, str] | None = None, proofs: Sequence[str] = (),
                   at_least: int = 0) -> int:
        """Store the active policy's text (and its included ``files``, and the digests of
        the engine ``proofs`` that passed); returns its new version (see ``write_policy``)."""
        version, _epoch = self.write_policy(text, now, name=name, files=files, proofs=proofs,
                                            at_least=at_least)
        return version

    def write_policy(self, text: str, now: float | None = None, *, name: str = "policy.dp",
                     files: Mapping[str, str] | None = None, proofs: Sequence[str] = (),
                     at_least: int = 0, expect: int | None = None,
                     expect_digest: str = "") -> tuple[int, str]:
        """Store a policy (``set_policy``); returns its version and the record's epoch. The
        version is the stored one plus one, and at least ``at_least`` (a writer that knows
        newer versions than a store that lost its data). With ``expect``, only when the
        stored version is that one (0: none) and its digest starts with ``expect_digest``,
        else raises ``PolicyVersionMismatch`` (``state.policy_write``)."""
        record = PolicyRecord(text, 0, time.time() if now is None else now, name, files or {},
                              tuple(proofs))
        args: list[str] = ["" if expect is None else str(expect), expect_digest,
                           str(at_least), secrets.token_hex(8), self.keys.changes]
        for item in record.fields().items():
            args.extend(item)
        with redis_errors(self._where):
            stored, version, other = self._store_policy(keys=[self.keys.policy], args=args)
        other = other.decode() if isinstance(other, bytes) else str(other)
        if not stored:  # the script refuses only when an expectation failed
            raise PolicyVersionMismatch(expect or 0, int(version), other)
        return int(version), other

    def policy(self) -> PolicyRecord | None:
        with redis_errors(self._where):
            raw = self.client.hgetall(self.keys.policy)
        return PolicyRecord.from_fields(raw) if raw else None

    def set_drain(
        self,
        region: str,
        gpu: str | None = None,
        *,
        draining: bool = True,
        now: float | None = None,
        until: float | None = None,
    ) -> Durability:
        """Drain (or undrain) a region, or one GPU server of it when ``gpu`` is given; a
        drain with ``until`` (wall clock) ends then for every reader. Returns whether it
        reached the replicas (``confirm``)."""
        with redis_errors(self._where):
            pipe = self.client.pipeline(transaction=False)
            written = queue_drain(pipe, self.keys, region, gpu, draining=draining, now=now,
                                  until=until)
            pipe.execute()
        return self.confirm(written)

    def drains(self) -> DrainFlags:
        with redis_errors(self._where):
            return DrainFlags.from_fields(self.client.hgetall(self.keys.drain))
