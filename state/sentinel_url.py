"""State URLs that name a Redis Sentinel set instead of one server.

``redis+sentinel://[user:password@]host:port[,host:port...]/<master name>[/<db>]``: the
Sentinels to ask (at least one; list them all), the name they monitor the master under,
and the database. The user and password are the master's (and its replicas'); Sentinels
that require a password of their own take it from ``?sentinel_password=...`` (and
``sentinel_username``), and the replicas a critical write waits for from ``?replicas=``
(default 1; ``state.durability``). A client made from such a URL (``client_for``) asks the
Sentinels for the current master before it connects and again after any connection
error (every Sentinel, trusting the newest epoch: ``state.sentinel_client``), so it
follows a failover, also one a partition caused; its connect and socket timeouts are
always set, to the same bound as a plain client's (a publish never hangs on a dead
connection).

A plain ``redis://`` or ``rediss://`` URL makes a plain client, as before.

``celery_broker`` turns either kind into what Celery's broker takes (for a Sentinel set,
one ``quorum-sentinel://`` URL per Sentinel with ``master_name``), with the same timeouts
always set. The scheme is ``workers.broker_transport``'s, not kombu's ``sentinel``: after a
connection error kombu moves to the next URL and takes its transport from the URL's scheme,
whatever transport it was given, so ``sentinel://`` URLs would put the broker back on
kombu's own Sentinel transport (asking the first Sentinel only) at the first failover.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qs, quote, unquote, urlsplit

import redis
import redis.asyncio as aioredis

from state.durability import ReplicaAcks
from state.sentinel_client import (
    AsyncLeavingConnection,
    AsyncQuorumSentinel,
    LeavingConnection,
    QuorumSentinel,
)

SCHEME = "redis+sentinel"


@dataclass(frozen=True)
class SentinelUrl:
    sentinels: tuple[tuple[str, int], ...]
    master: str
    db: int = 0
    username: str | None = None
    password: str | None = None
    sentinel_username: str | None = None
    sentinel_password: str | None = None
    replicas: int = 1  # acknowledgements a critical write waits for (state.durability)

    def sentinel_kwargs(self, timeout: float) -> dict[str, Any]:
        kwargs: dict[str, Any] = {"socket_timeout": timeout, "socket_connect_timeout": timeout}
        if self.sentinel_password is not None:
            kwargs["password"] = self.sentinel_password
            if self.sentinel_username is not None:
                kwargs["username"] = self.sentinel_username
        return kwargs

    def master_kwargs(self, timeout: float) -> dict[str, Any]:
        kwargs: dict[str, Any] = {"db": self.db, "socket_timeout": timeout,
                                  "socket_connect_timeout": timeout}
        if self.password is not None:
            kwargs["password"] = self.password
            if self.username is not None:
                kwargs["username"] = self.username
        return kwargs


def is_sentinel(url: str) -> bool:
    return url.split("://", 1)[0].lower() == SCHEME


def parse_sentinel_url(url: str) -> SentinelUrl:
    """The parts of a ``redis+sentinel://`` URL; ValueError naming what is wrong."""
    parts = urlsplit(url)
    if parts.scheme.lower() != SCHEME:
        raise ValueError(f"not a {SCHEME}:// URL: {url!r}")
    userinfo, _, hosts = parts.netloc.rpartition("@")
    username = password = None
    if userinfo:
        user, sep, secret = userinfo.partition(":")
        username = unquote(user) or None
        password = unquote(secret) if sep else None
    sentinels = []
    for item in hosts.split(","):
        host, sep, port = item.strip().rpartition(":")
        if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise ValueError(f"{SCHEME} URL: expected host:port for each Sentinel, got "
                             f"{item!r}")
        sentinels.append((host.strip("[]"), int(port)))
    path = [p for p in parts.path.split("/") if p]
    if not path or len(path) > 2:
        raise ValueError(f"{SCHEME} URL: expected /<master name>[/<db>] after the "
                         f"Sentinels, got {parts.path or '(nothing)'!r}")
    if len(path) == 2 and not path[1].isdigit():
        raise ValueError(f"{SCHEME} URL: the database must be a number, got {path[1]!r}")
    query = parse_qs(parts.query)
    replicas = _first(query, "replicas") or "1"
    if not replicas.isdigit():
        raise ValueError(f"{SCHEME} URL: replicas must be a number, got {replicas!r}")
    return SentinelUrl(tuple(sentinels), unquote(path[0]), int(path[1]) if len(path) == 2
                       else 0, username, password,
                       _first(query, "sentinel_username"), _first(query, "sentinel_password"),
                       int(replicas))


def _first(query: dict[str, list[str]], key: str) -> str | None:
    values = query.get(key)
    return values[0] if values else None


def client_for(url: str, timeout: float, **options: Any) -> redis.Redis:
    """A synchronous client for ``url`` (a Sentinel set or one server)."""
    if not is_sentinel(url):
        return redis.Redis.from_url(url, socket_timeout=timeout,
                                    socket_connect_timeout=timeout, **options)
    client: redis.Redis = _master_for(url, timeout, QuorumSentinel, LeavingConnection,
                                      options)
    return client


def async_client_for(url: str, timeout: float, **options: Any) -> aioredis.Redis:
    """An asyncio client for ``url`` (a Sentinel set or one server)."""
    if not is_sentinel(url):
        return aioredis.Redis.from_url(url, socket_timeout=timeout,
                                       socket_connect_timeout=timeout, **options)
    client: aioredis.Redis = _master_for(url, timeout, AsyncQuorumSentinel,
                                         AsyncLeavingConnection, options)
    return client


def _master_for(url: str, timeout: float, sentinel_class: Any, connection_class: Any,
                options: dict[str, Any]) -> Any:
    """A client of the master of the Sentinel set ``url`` names, of either flavour (the
    Sentinel and connection classes say which)."""
    spec = parse_sentinel_url(url)
    sentinel = sentinel_class(list(spec.sentinels),
                              sentinel_kwargs=spec.sentinel_kwargs(timeout),
                              **spec.sentinel_kwargs(timeout))
    return sentinel.master_for(spec.master, connection_class=connection_class,
                               **spec.master_kwargs(timeout), **options)


# kombu checks its long-lived BRPOP and pub/sub connections this often (seconds), so a
# consumer left on a dead master reconnects (to the new one) within about twice this
BROKER_HEALTH_CHECK_S = 5


BROKER_SCHEME = "quorum-sentinel"  # registered with kombu by workers.broker_transport


def celery_broker(url: str, timeout: float) -> tuple[str, dict[str, Any]]:
    """Celery's broker URL and transport options for a state URL: a plain Redis URL as it
    is, a Sentinel set as ``quorum-sentinel://h:p;quorum-sentinel://h:p`` with
    ``master_name`` (the Sentinels are asked for the master on every reconnect). Connect and socket
    timeouts are always set: kombu's default (None) lets a publish hang forever on a
    connection to a master that died without closing it."""
    options: dict[str, Any] = {"socket_timeout": timeout, "socket_connect_timeout": timeout,
                               "health_check_interval": BROKER_HEALTH_CHECK_S}
    if not is_sentinel(url):
        return url, options
    spec = parse_sentinel_url(url)
    auth = ""
    if spec.password is not None:
        auth = f"{quote(spec.username or '', safe='')}:{quote(spec.password, safe='')}@"
    broker = ";".join(f"{BROKER_SCHEME}://{auth}{_host(host)}:{port}/{spec.db}"
                      for host, port in spec.sentinels)
    options["master_name"] = spec.master
    options["sentinel_kwargs"] = spec.sentinel_kwargs(timeout)
    return broker, options


def _host(host: str) -> str:
    return f"[{host}]" if ":" in host else host


def replica_acks(url: str) -> ReplicaAcks:
    """What a critical write on ``url`` waits for: a Sentinel set's ``?replicas=`` (default
    1), none on one server (it has no replica we know of)."""
    if not is_sentinel(url):
        return ReplicaAcks()
    return ReplicaAcks(parse_sentinel_url(url).replicas)
