"""The shared state, asyncio flavour: for the regional balancers and the snapshot refresher.

Same keys, records and errors as :class:`state.store.StateStore`; the methods a
balancer and the refresher need, plus :meth:`AsyncStateStore.fetch` (many hashes in one round
trip) and :meth:`AsyncStateStore.subscribe` (the change channel).
"""

from __future__ import annotations

import time
from collections.abc import Sequence

import redis
import redis.asyncio as aioredis

from state.credentials import client_options
from state.drain_expiry import SCRIPT as END_DRAIN_SCRIPT
from state.durability import NOT_ASKED, Durability, Expected, ReplicaAcks, judge, queue_confirmation
from state.guard import describe, redis_errors
from state.hysteresis import SCRIPT, ProbeOutcome
from state.instances import Instance, read_instances
from state.keys import Keys, drain_field
from state.records import (
    DrainFlags,
    GpuLoad,
    HealthRecord,
    LatencySample,
    PolicyRecord,
    RegionLoad,
)
from state.region_load import SourcedLoad, combined_from_hash, stale_sources
from state.sentinel_url import async_client_for, replica_acks
from state.store import DEFAULT_TIMEOUT
from state.writes import probe_call, queue_drain, queue_region_load

RawHash = dict[bytes, bytes]


OUTCOMES_TTL_S = 86_400


class AsyncStateStore:
    """Asynchronous access to the shared state of one deployment (one key prefix)."""

    def __init__(self, client: aioredis.Redis, keys: Keys | None = None,
                 acks: ReplicaAcks | None = None) -> None:
        self.client = client
        self.keys = keys or Keys()
        self.acks = acks or ReplicaAcks()
        self._where = describe(client)
        self._hysteresis = client.register_script(SCRIPT)
        self._end_drain = client.register_script(END_DRAIN_SCRIPT)

    @classmethod
    def from_url(
        cls, url: str, *, prefix: str = "director", timeout: float = DEFAULT_TIMEOUT,
        credentials: redis.CredentialProvider | None = None,
    ) -> AsyncStateStore:
        """A store on ``redis://[user:password@]host:port/db``, or on the master of a
        Sentinel set (``redis+sentinel://``: ``state.sentinel_url``); connects lazily, on
        first use. Without credentials in the URL, ``credentials`` or else the environment's
        (:mod:`state.credentials`) authenticate it."""
        options = ({"credential_provider": credentials} if credentials is not None
                   else client_options(url))
        client = async_client_for(url, timeout, **options)
        return cls(client, Keys(prefix), replica_acks(url))

    async def close(self) -> None:
        await self.client.aclose()

    async def ping(self) -> None:
        with redis_errors(self._where):
            await self.client.ping()

    async def confirm(self, expected: Expected) -> Durability:
        """Whether the write that left ``expected`` reached ``acks.replicas`` replicas
        (``state.durability``); tried ``acks.attempts`` times."""
        if not self.acks.replicas:
            return NOT_ASKED
        result = NOT_ASKED
        for attempt in range(1, self.acks.attempts + 1):
            with redis_errors(self._where):
                pipe = self.client.pipeline(transaction=False)
                queue_confirmation(pipe, self.keys.prefix, expected, self.acks)
                result = judge(await pipe.execute(), expected, self.acks, attempt)
            if result.durable or not result.present:
                break
        return result

    async def fetch(self, keys: Sequence[str]) -> dict[str, RawHash]:
        """HGETALL of every key in one pipelined round trip; absent keys are left out."""
        if not keys:
            return {}
        with redis_errors(self._where):
            pipe = self.client.pipeline(transaction=False)
            for key in keys:
                pipe.hgetall(key)
            values = await pipe.execute()
        return {key: value for key, value in zip(keys, values, strict=True) if value}

    def subscribe(self) -> aioredis.client.PubSub:
        """A pub/sub object; call ``await pubsub.subscribe(store.keys.changes)`` on it."""
        return self.client.pubsub(ignore_subscribe_messages=True)

    async def record_probe(
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
    ) -> ProbeOutcome:
        """Apply one probe result to a GPU server (``gpu`` set) or a region's balancer."""
        keys, args = probe_call(self.keys, region, gpu, ok=ok, rise=rise, fall=fall, now=now,
                                probe_id=probe_id, status=status, latency_ms=latency_ms,
                                error=error)
        with redis_errors(self._where):
            return ProbeOutcome(int(await self._hysteresis(keys=keys, args=args)))

    async def gpu_health(self, region: str, gpu: str) -> HealthRecord | None:
        raw = await self.fetch([self.keys.gpu_health(region, gpu)])
        return HealthRecord.from_fields(next(iter(raw.values()))) if raw else None

    async def gpu_load(self, region: str, gpu: str) -> GpuLoad | None:
        raw = await self.fetch([self.keys.gpu_load(region, gpu)])
        return GpuLoad.from_fields(next(iter(raw.values()))) if raw else None

    async def write_region_load(self, region: str, load: RegionLoad, *, source: str = "",
                                pool: str = "") -> None:
        """Publish ``source``'s view of a region's load (each balancer about once a second;
        one record per balancer: ``state.region_load``)."""
        with redis_errors(self._where):
            pipe = self.client.pipeline(transaction=False)
            queue_region_load(pipe, self.keys, region, SourcedLoad(source, load, pool))
            await pipe.execute()

    async def forget_stale_loads(self, region: str, now: float) -> int:
        """Remove the region's load records not renewed for ``region_load.FORGET_S``
        (balancers gone or restarted); the number removed."""
        key = self.keys.region_load(region)
        with redis_errors(self._where):
            stale = stale_sources(await self.client.hgetall(key), now)
            if stale:
                await self.client.hdel(key, *stale)
        return len(stale)

    async def heartbeat(self, instance: Instance) -> None:
        """Write ``instance``'s heartbeat, seen now (``state.instances``)."""
        with redis_errors(self._where):
            await self.client.hset(self.keys.instances, instance.field,
                                   instance.seen().to_json())

    async def instances(self) -> list[Instance]:
        """Every instance that sent a heartbeat within ``FORGET_S`` (older ones removed)."""
        with redis_errors(self._where):
            raw = await self.client.hgetall(self.keys.instances)
            found, forget = read_instances(raw, time.time())
            if forget:
                await self.client.hdel(self.keys.instances, *forget)
        return found

    async def write_outcomes(self, region: str, fields: dict[str, str]) -> None:
        """Publish a balancer run's cumulative answer counts by revision
        (``state.outcomes``); the region's hash lives a day past its last write."""
        key = self.keys.outcomes(region)
        with redis_errors(self._where):
            pipe = self.client.pipeline(transaction=False)
            pipe.hset(key, mapping=fields)
            pipe.expire(key, OUTCOMES_TTL_S)
            await pipe.execute()

    async def region_load(self, region: str) -> RegionLoad | None:
        raw = await self.fetch([self.keys.region_load(region)])
        return combined_from_hash(next(iter(raw.values()))) if raw else None

    async def latency(self) -> list[LatencySample]:
        raw = await self.fetch([self.keys.latency])
        return [LatencySample.from_field(k, v) for k, v in raw.get(self.keys.latency, {}).items()]

    async def policy(self) -> PolicyRecord | None:
        raw = await self.fetch([self.keys.policy])
        return PolicyRecord.from_fields(raw[self.keys.policy]) if raw else None

    async def set_drain(
        self,
        region: str,
        gpu: str | None = None,
        *,
        draining: bool = True,
        now: float | None = None,
        until: float | None = None,
    ) -> Durability:
        """``StateStore.set_drain``: the drain, and whether it reached the replicas."""
        with redis_errors(self._where):
            pipe = self.client.pipeline(transaction=False)
            written = queue_drain(pipe, self.keys, region, gpu, draining=draining, now=now,
                                  until=until)
            await pipe.execute()
        return await self.confirm(written)

    async def end_expired_drain(self, region: str, gpu: str | None, now: float) -> bool:
        """Remove the drain of ``region`` (or its ``gpu``) if its ttl ended by ``now``;
        whether it was removed (not if it was set again since, or is already gone)."""
        with redis_errors(self._where):
            return bool(await self._end_drain(keys=[self.keys.drain], args=[
                drain_field(region, gpu), now, self.keys.changes]))

    async def drains(self) -> DrainFlags:
        raw = await self.fetch([self.keys.drain])
        return DrainFlags.from_fields(raw.get(self.keys.drain, {}))
