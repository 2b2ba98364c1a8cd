"""State URLs naming a Sentinel set, against real Sentinels: a master, a replica and three
Sentinels (``redis-server``, ``redis-server --sentinel``) on loopback. The stores follow
the master through a failover (the master SIGKILLed), within Sentinel's down-after plus
ten seconds."""

from __future__ import annotations

import asyncio
import shutil
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import redis

from state import AsyncStateStore, StateStore
from state.ports import free_port
from state.sentinel_url import SentinelUrl, parse_sentinel_url

DOWN_AFTER_MS = 1000
MASTER = "director-state"


@dataclass
class SentinelSet:
    master_port: int
    replica_port: int
    sentinel_ports: list[int]
    processes: list[subprocess.Popen[bytes]]

    @property
    def url(self) -> str:
        hosts = ",".join(f"127.0.0.1:{p}" for p in self.sentinel_ports)
        return f"redis+sentinel://{hosts}/{MASTER}/0"

    def kill_master(self) -> None:
        """SIGKILL the master and wait until it is gone (no write can reach it after)."""
        self.processes[0].kill()
        self.processes[0].wait(10)

    def master_now(self) -> int:
        answer = redis.Redis(port=self.sentinel_ports[0], socket_timeout=2).execute_command(
            "SENTINEL", "GET-MASTER-ADDR-BY-NAME", MASTER)
        return int(answer[1])


def _knows_all(port: int) -> bool:
    flat = redis.Redis(port=port, socket_timeout=2).execute_command("SENTINEL", "MASTER",
                                                                    MASTER)
    def text(x: object) -> str:
        return x.decode() if isinstance(x, bytes) else str(x)

    if isinstance(flat, dict):
        fields = {text(k): text(v) for k, v in flat.items()}
    else:
        items = [text(x) for x in flat]
        fields = dict(zip(items[::2], items[1::2], strict=False))
    return int(fields.get("num-slaves", 0)) >= 1 and \
        int(fields.get("num-other-sentinels", 0)) >= 2


def _wait(check, timeout: float = 15.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if check():
                return
        except redis.exceptions.RedisError:
            pass
        time.sleep(0.1)
    raise TimeoutError("the Sentinel set did not come up")


@pytest.fixture
def sentinels(tmp_path: Path) -> Iterator[SentinelSet]:
    server = shutil.which("redis-server")
    assert server, "redis-server is needed (apt-get install redis-server; ./run test does)"
    master, replica = free_port(), free_port()
    ports = [free_port() for _ in range(3)]
    common = ["--save", "", "--appendonly", "no", "--bind", "127.0.0.1"]
    procs = [subprocess.Popen([server, "--port", str(master), *common],
                              stdout=subprocess.DEVNULL),
             subprocess.Popen([server, "--port", str(replica), *common,
                               "--replicaof", "127.0.0.1", str(master)],
                              stdout=subprocess.DEVNULL)]
    for port in ports:
        conf = tmp_path / f"sentinel-{port}.conf"
        conf.write_text(f"port {port}\nbind 127.0.0.1\n"
                        f"sentinel monitor {MASTER} 127.0.0.1 {master} 2\n"
                        f"sentinel down-after-milliseconds {MASTER} {DOWN_AFTER_MS}\n"
                        f"sentinel failover-timeout {MASTER} 3000\n")
        procs.append(subprocess.Popen([server, str(conf), "--sentinel"],
                                      stdout=subprocess.DEVNULL))
    found = SentinelSet(master, replica, ports, procs)
    try:
        _wait(lambda: redis.Redis(port=replica).info("replication")["master_link_status"]
              == "up")
        # a failover needs Sentinels that know the replica and each other (they learn
        # both from the master, in seconds)
        _wait(lambda: all(_knows_all(p) for p in ports), timeout=30)
        yield found
    finally:
        for proc in procs:
            proc.kill()
            proc.wait(10)


def test_a_sentinel_url_is_read_whole() -> None:
    spec = parse_sentinel_url("redis+sentinel://api:s%40cret@10.0.0.1:26379,[::1]:26380/"
                              "main/3?sentinel_password=x")
    assert spec == SentinelUrl((("10.0.0.1", 26379), ("::1", 26380)), "main", 3, "api",
                               "s@cret", None, "x")
    assert parse_sentinel_url("redis+sentinel://h:1/m").db == 0


@pytest.mark.parametrize(("url", "problem"), [
    ("redis+sentinel://h/m", "expected host:port"),
    ("redis+sentinel://h:99999/m", "expected host:port"),
    ("redis+sentinel://h:1", "expected /<master name>"),
    ("redis+sentinel://h:1/m/x", "the database must be a number"),
    ("redis+sentinel://h:1/m/0/extra", "expected /<master name>"),
])
def test_a_broken_sentinel_url_says_what_is_wrong(url: str, problem: str) -> None:
    with pytest.raises(ValueError, match=problem):
        parse_sentinel_url(url)


def test_both_stores_follow_the_master_through_a_failover(sentinels: SentinelSet) -> None:
    """The sync and the async store, each connected to the master before it is killed
    (one failover for both: a Sentinel set takes seconds to come up)."""
    store = StateStore.from_url(sentinels.url, timeout=1.0)
    store.client.set("director:ledger:1", "before")
    assert sentinels.master_now() == sentinels.master_port

    async def run() -> float:
        aio = AsyncStateStore.from_url(sentinels.url, timeout=1.0)
        await aio.ping()
        sentinels.kill_master()
        killed = time.monotonic()
        deadline = killed + DOWN_AFTER_MS / 1000 + 10
        for write in (lambda: aio.client.set("director:async", "after"),
                      lambda: asyncio.to_thread(store.client.set, "director:ledger:2",
                                                "after")):
            while True:
                try:
                    await write()
                    break
                except (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError,
                        redis.exceptions.ReadOnlyError):  # MasterNotFoundError among them
                    assert time.monotonic() < deadline, "no write reached a master in time"
                    await asyncio.sleep(0.1)
        await aio.close()
        return time.monotonic() - killed

    took = asyncio.run(run())
    assert took <= DOWN_AFTER_MS / 1000 + 10
    _wait(lambda: sentinels.master_now() == sentinels.replica_port)  # every Sentinel agrees
    new_master = redis.Redis(port=sentinels.replica_port)
    assert new_master.get("director:async") == b"after"
    assert new_master.get("director:ledger:2") == b"after"
    assert new_master.get("director:ledger:1") == b"before"  # replicated before the kill
    store.close()
