"""A replicated state server: a Redis master, its replicas and a Sentinel beside each.

``redis-server`` (Debian's package) or the embedded Valkey runs both, the Sentinels as
``SERVER CONF --sentinel``. The HA lab puts each on a host of its own (a network namespace);
``director up --ha`` on loopback addresses of this machine. Every server has a
configuration file it may rewrite (Sentinel's ``REPLICAOF`` survives a restart) and the ACL
users of :mod:`state.acl`: the roles, plus ``replica`` (how replicas log in to their master)
and ``sentinel``. In the lab nothing is persisted to disk: a killed server comes back (after
the failover) empty and, by then a replica, copies the new master. ``director up --ha``
restarts a dead server at once, before Sentinel has moved the master: there every write is
in an append-only file synced before it is acknowledged (``persist``), or a master back
within ``down-after`` would come back empty and its replicas would copy the emptiness.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import redis

from director.up.plan import Bind, ChildSpec
from state.acl import acl_file, new_password, replication_users
from state.private_file import write_private
from state.sentinel_client import newest_master

MASTER_NAME = "director-state"
REDIS_PORT = 6379
SENTINEL_PORT = 26379


@dataclass(frozen=True)
class SentinelTimings:
    """Sentinel's clock: down after ``down_after_ms`` without an answer; a failover that
    has not finished in ``failover_timeout_ms`` is tried again; a master that has heard
    from no replica for ``max_lag_s`` refuses writes."""

    down_after_ms: int = 2000
    failover_timeout_ms: int = 6000
    max_lag_s: int = 5  # min-replicas-max-lag: a master alone refuses writes after it


@dataclass(frozen=True)
class RedisSet:
    """Where the set's servers and Sentinels are, and how to log in as ``sentinel``."""

    servers: tuple[str, ...]  # addresses; the first starts as the master
    sentinel_password: str
    timings: SentinelTimings
    sentinels: tuple[str, ...]  # the Sentinels' addresses

    @property
    def url(self) -> str:
        hosts = ",".join(f"{address}:{SENTINEL_PORT}" for address in self.sentinels)
        return f"redis+sentinel://{hosts}/{MASTER_NAME}/0"

    def master(self, timeout: float = 2.0) -> str | None:
        """The master's address as the Sentinels say, the newest epoch winning (as the
        stores' clients choose: ``state.sentinel_client``); None: none names one."""
        answers = []
        for address in self.sentinels:
            try:
                masters = redis.Redis(address, SENTINEL_PORT, socket_timeout=timeout,
                                      socket_connect_timeout=timeout).sentinel_masters()
            except redis.exceptions.RedisError:
                continue
            answers.append(masters.get(MASTER_NAME))
        found = newest_master(answers, lambda state: state.get("is_master")
                              and not state.get("is_odown"))
        return found[0] if found else None

    def server(self, address: str, timeout: float = 2.0) -> redis.Redis:
        """A client of one server, logged in as ``sentinel`` (it may read ``INFO``)."""
        return redis.Redis(address, REDIS_PORT, username="sentinel",
                           password=self.sentinel_password, socket_timeout=timeout,
                           socket_connect_timeout=timeout)

    def ready(self) -> bool:
        """Whether every replica follows the master and every Sentinel knows all of the
        others and every replica: only then can a failover happen."""
        try:
            master = self.servers[0]
            for address in self.servers[1:]:
                if self.server(address).info("replication").get("master_link_status") != "up":
                    return False
            for address in self.sentinels:
                fields = _fields(redis.Redis(address, SENTINEL_PORT, socket_timeout=2)
                                 .execute_command("SENTINEL", "MASTER", MASTER_NAME))
                if fields.get("ip") != master or \
                        int(fields.get("num-slaves", 0)) < len(self.servers) - 1 or \
                        int(fields.get("num-other-sentinels", 0)) < len(self.sentinels) - 1:
                    return False
        except redis.exceptions.RedisError:
            return False
        return True

    def wait_ready(self, timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        while not self.ready():
            if time.monotonic() > deadline:
                raise TimeoutError(f"the Redis set {', '.join(self.servers)} did not come up "
                                   f"in {timeout:g} s")
            time.sleep(0.1)


def redis_set_children(servers: Sequence[tuple[str | None, str]], folder: Path,
                       role_passwords: Mapping[str, str],
                       timings: SentinelTimings = SentinelTimings(),
                       server_binary: str = "redis-server", persist: bool = False,
                       sentinels: Sequence[tuple[str | None, str]] = ()
                       ) -> tuple[RedisSet, list[ChildSpec]]:
    """A server and a Sentinel on each ``(netns, address)``, the first the master; their
    configuration files under ``folder``; ``role_passwords`` the roles' (``state.acl``).
    Inside a namespace they also listen on its loopback; without one (``netns`` None, a
    loopback ``address``) only on ``address``. ``sentinels``: put the Sentinels on those
    hosts instead (apart from the servers: a Sentinel cut off beside the old master can,
    when the partition heals, turn the new master back into its replica before it hears
    of the failover: bench/results/2026-11-30-ha-drills.md)."""
    replica_password, sentinel_password = new_password(), new_password()
    acl = acl_file(role_passwords) + replication_users(replica_password, sentinel_password)
    master = servers[0][1]
    sentinel_hosts = list(sentinels) or list(servers)
    quorum = len(sentinel_hosts) // 2 + 1
    children = []
    for index, (netns, address) in enumerate(servers, start=1):
        home = folder / f"state-{index}"
        home.mkdir(parents=True, exist_ok=True)
        write_private(home / "users.acl", acl)
        bind = f"{address} 127.0.0.1" if netns else address
        lines = [f"port {REDIS_PORT}", f"bind {bind}", "protected-mode no",
                 'save ""', *(("appendonly yes", "appendfsync always") if persist else
                              ("appendonly no",)),
                 f"dir {home}", f"aclfile {home / 'users.acl'}",
                 "masteruser replica", f"masterauth {replica_password}",
                 "repl-diskless-sync yes", "repl-diskless-sync-delay 0",
                 # a master cut off from every replica refuses writes after this lag, so
                 # its clients leave it for the new one (state.sentinel_client)
                 "min-replicas-to-write 1", f"min-replicas-max-lag {timings.max_lag_s}",
                 # on loopback the source of a connection is 127.0.0.1 whatever the
                 # address bound: each names its own, or every one would be 127.0.0.1
                 f"replica-announce-ip {address}"]
        if address != master:
            lines.append(f"replicaof {master} {REDIS_PORT}")
        write_private(home / "redis.conf", "\n".join(lines) + "\n")
        children.append(ChildSpec(
            f"redis/{index}", "redis", (server_binary, str(home / "redis.conf")),
            address=f"redis://{address}:{REDIS_PORT}", ready_tcp=(address, REDIS_PORT),
            binds=(Bind("tcp", address, REDIS_PORT),), netns=netns))
    for index, (netns, address) in enumerate(sentinel_hosts, start=1):
        home = folder / f"sentinel-{index}"
        home.mkdir(parents=True, exist_ok=True)
        bind = f"{address} 127.0.0.1" if netns else address
        write_private(home / "sentinel.conf", "\n".join([
            f"port {SENTINEL_PORT}", f"bind {bind}", "protected-mode no",
            f"dir {home}", f"sentinel announce-ip {address}",
            f"sentinel monitor {MASTER_NAME} {master} {REDIS_PORT} {quorum}",
            f"sentinel auth-user {MASTER_NAME} sentinel",
            f"sentinel auth-pass {MASTER_NAME} {sentinel_password}",
            f"sentinel down-after-milliseconds {MASTER_NAME} {timings.down_after_ms}",
            f"sentinel failover-timeout {MASTER_NAME} {timings.failover_timeout_ms}",
            f"sentinel parallel-syncs {MASTER_NAME} 1"]) + "\n")
        children.append(ChildSpec(
            f"sentinel/{index}", "sentinel",
            (server_binary, str(home / "sentinel.conf"), "--sentinel"),
            address=f"sentinel {address}:{SENTINEL_PORT}",
            ready_tcp=(address, SENTINEL_PORT),
            binds=(Bind("tcp", address, SENTINEL_PORT),), netns=netns))
    found = RedisSet(tuple(address for _, address in servers), sentinel_password, timings,
                     tuple(address for _, address in sentinel_hosts))
    return found, children


def _text(value: object) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _fields(reply: object) -> dict[str, str]:
    if isinstance(reply, dict):
        return {_text(k): _text(v) for k, v in reply.items()}
    items = [_text(x) for x in reply] if isinstance(reply, list) else []
    return dict(zip(items[::2], items[1::2], strict=False))
