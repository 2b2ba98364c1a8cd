"""Critical writes confirmed by a replica (``state.durability``), against a real master and
replica (``redis-server``): acknowledged while the replica follows, reported not durable
when it is gone, and reported lost when the master no longer holds the write."""

from __future__ import annotations

import asyncio
import shutil
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass

import pytest
import redis

from state import AsyncStateStore, StateStore
from state.durability import ABSENT, Expected, ReplicaAcks
from state.ports import free_port
from state.sentinel_url import replica_acks
from tenants.api_keys import new_key, revoke_key, store_key


@dataclass
class Pair:
    master: int
    replica: int
    processes: list[subprocess.Popen[bytes]]

    def stop_replica(self) -> None:
        self.processes[1].kill()
        self.processes[1].wait(10)


@pytest.fixture
def pair() -> Iterator[Pair]:
    server = shutil.which("redis-server")
    assert server, "redis-server is needed (apt-get install redis-server; ./run test does)"
    master, replica = free_port(), free_port()
    common = ["--save", "", "--appendonly", "no", "--bind", "127.0.0.1"]
    procs = [subprocess.Popen([server, "--port", str(master), *common],
                              stdout=subprocess.DEVNULL),
             subprocess.Popen([server, "--port", str(replica), *common,
                               "--replicaof", "127.0.0.1", str(master)],
                              stdout=subprocess.DEVNULL)]
    try:
        deadline = time.monotonic() + 15
        while True:
            try:
                if redis.Redis(port=replica).info("replication")["master_link_status"] == "up":
                    break
            except redis.exceptions.RedisError:
                pass
            assert time.monotonic() < deadline, "the replica did not follow the master"
            time.sleep(0.05)
        yield Pair(master, replica, procs)
    finally:
        for proc in procs:
            proc.kill()
            proc.wait(10)


ACKS = ReplicaAcks(replicas=1, timeout_ms=200, attempts=2)


def test_a_drain_followed_by_a_replica_is_durable(pair: Pair) -> None:
    store = StateStore(redis.Redis(port=pair.master), acks=ACKS)
    durability = store.set_drain("eu-west")
    assert durability.durable and durability.acknowledged == 1 and durability.attempts == 1
    assert redis.Redis(port=pair.replica).hexists(store.keys.drain, "eu-west")
    assert store.set_drain("eu-west", draining=False).durable  # an undrain: the field gone


def test_a_write_no_replica_acknowledges_is_reported_not_durable(pair: Pair) -> None:
    pair.stop_replica()
    store = StateStore(redis.Redis(port=pair.master), acks=ACKS)
    started = time.monotonic()
    durability = store.set_drain("eu-west", until=time.time() + 60)
    assert not durability.durable and durability.present
    assert (durability.acknowledged, durability.wanted, durability.attempts) == (0, 1, 2)
    assert time.monotonic() - started < 5  # bounded: two WAITs of 200 ms, not forever
    assert "not durable" in durability.describe()
    assert "eu-west" in store.drains().regions  # it stands on the master all the same


def test_a_policy_version_is_confirmed_and_a_lost_one_is_told(pair: Pair) -> None:
    store = StateStore(redis.Redis(port=pair.master), acks=ACKS)
    version, epoch = store.write_policy("zone a {}")
    assert store.confirm_policy(version, epoch).durable
    # another writer's version replaced it (or a failover lost it): not ours any more
    store.write_policy("zone b {}")
    lost = store.confirm_policy(version, epoch)
    assert not lost.present and not lost.durable and "lost" in lost.describe()


def test_tenant_keys_and_their_revocation_are_confirmed(pair: Pair) -> None:
    async def run() -> None:
        store = AsyncStateStore(redis.asyncio.Redis(port=pair.master), acks=ACKS)
        made = new_key("acme", "ci")
        assert (await store_key(store, made.stored)).durable
        gone, durability = await revoke_key(store, made.stored.key_id)
        assert gone == made.stored and durability.durable
        assert (await store.confirm(Expected(store.keys.tenant_keys,
                                             {made.stored.key_id: ABSENT}))).durable
        await store.close()

    asyncio.run(run())


def test_a_store_without_replicas_waits_for_none(pair: Pair) -> None:
    assert replica_acks("redis://127.0.0.1:1/0").replicas == 0
    assert replica_acks("redis+sentinel://h:1/m").replicas == 1
    assert replica_acks("redis+sentinel://h:1/m?replicas=2").replicas == 2
    pair.stop_replica()
    store = StateStore(redis.Redis(port=pair.master))  # a plain URL's default
    durability = store.set_drain("eu-west")
    assert durability.durable and durability.wanted == 0
