"""kombu's Redis Sentinel transport, finding the master as the state's clients do.

kombu asks the Sentinels in turn and believes the first; a Sentinel beside a master cut off
by a partition names that old master, and beat and the workers would publish and consume
there until the partition heals. This transport asks every Sentinel and trusts the newest
epoch, and leaves a master that refuses writes for want of replicas
(:mod:`state.sentinel_client`). Importing this module registers it with kombu for the
broker URLs ``state.sentinel_url.celery_broker`` makes of ``redis+sentinel://`` state URLs
(scheme ``quorum-sentinel``): kombu takes the transport from the URL's scheme each time it
moves to the next URL after a connection error, so a transport given by name alone would
be replaced by kombu's own at the first failover.

A consumer waits in ``BRPOP``, a read, which a master cut off from its replicas still
serves: it would wait there, for tasks that now go to the new master, until the partition
heals. So each channel has a watcher thread that asks the Sentinels for the master every
``WATCH_S`` and, when it is not the one the consumer's connection is on, shuts that socket
down: the consumer sees a connection error and reconnects, to the new master.
"""

from __future__ import annotations

import contextlib
import logging
import socket
import threading
import weakref
from typing import Any

from kombu.transport import TRANSPORT_ALIASES
from kombu.transport import redis as kombu_redis
from kombu.utils.url import _parse_url
from redis.exceptions import RedisError

from state.sentinel_client import LeavingConnection, QuorumSentinel
from state.sentinel_url import BROKER_SCHEME

PATH = "workers.broker_transport:Transport"
TRANSPORT_ALIASES.setdefault(BROKER_SCHEME, PATH)
WATCH_S = 1.0

log = logging.getLogger(__name__)


class QuorumSentinelChannel(kombu_redis.SentinelChannel):
    """kombu's ``SentinelChannel`` with a ``QuorumSentinel`` and ``LeavingConnection``."""

    connection_class = LeavingConnection

    def _sentinel_managed_pool(self, asynchronous: bool = False) -> Any:
        params = self._connparams(asynchronous).copy()
        host, port = params.pop("host", None), params.pop("port", None)
        sentinels = []
        for url in self.connection.client.alt:
            parts = _parse_url(url)
            if parts.scheme in (BROKER_SCHEME, "sentinel"):
                sentinels.append((parts.hostname, parts.port or self.connection.default_port))
        if not sentinels:  # one Sentinel: kombu keeps no list of alternates
            sentinels.append((host, port))
        manager = QuorumSentinel(sentinels,
                                 min_other_sentinels=getattr(self, "min_other_sentinels", 0),
                                 sentinel_kwargs=getattr(self, "sentinel_kwargs", None),
                                 **params)
        if asynchronous:  # closed by kombu's _disconnect_pools (celery/kombu#1108)
            self._async_sentinel_manager = manager
        else:
            self._sentinel_manager = manager
        master_name = getattr(self, "master_name", None)
        if master_name is None:
            raise ValueError("'master_name' transport option must be specified.")
        credentials = {k: params[k] for k in ("username", "password") if k in params}
        if not asynchronous:
            threading.Thread(target=_watch, args=(weakref.ref(self), manager, master_name),
                             name="broker-master-watch", daemon=True).start()
        return manager.master_for(master_name, kombu_redis.redis.Redis,
                                  **credentials).connection_pool


class Transport(kombu_redis.SentinelTransport):
    Channel = QuorumSentinelChannel


def _watch(channel_ref: weakref.ref[QuorumSentinelChannel], manager: QuorumSentinel,
           name: str) -> None:
    """Until the channel is gone: move its consumer off a master that is no longer one."""
    stop = threading.Event()
    while not stop.wait(WATCH_S):
        channel = channel_ref()
        if channel is None or getattr(channel, "closed", False):
            return
        client = channel.__dict__.get("client")  # the consumer's, once it has one
        connection: Any = getattr(client, "connection", None)
        sock = getattr(connection, "_sock", None)
        del channel
        if sock is None:
            continue
        try:
            master = manager.discover_master(name)
        except RedisError as exc:  # no Sentinel answers: look again later
            log.debug("broker: no master found: %s", exc)
            continue
        if (connection.host, int(connection.port)) != (master[0], int(master[1])):
            log.warning("broker: the consumer is on %s:%s, the master is %s:%s: reconnecting",
                        connection.host, connection.port, *master)
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
