"""kombu's Redis Sentinel transport, finding the master as the state's clients do.

kombu asks the Sentinels in turn and believes the first; a Sentinel beside a master cut off
by a partition names that old master, and beat and the workers would publish and consume
there until the partition heals. This transport asks every Sentinel and trusts the newest
epoch, and leaves a master that refuses writes for want of replicas
(:mod:`state.sentinel_client`). ``workers.app`` selects it for ``redis+sentinel://`` URLs.
"""

from __future__ import annotations

from typing import Any

from kombu.transport import redis as kombu_redis
from kombu.utils.url import _parse_url

from state.sentinel_client import LeavingConnection, QuorumSentinel

PATH = "workers.broker_transport:Transport"


class QuorumSentinelChannel(kombu_redis.SentinelChannel):
    """kombu's ``SentinelChannel`` with a ``QuorumSentinel`` and ``LeavingConnection``."""

    connection_class = LeavingConnection

    def _sentinel_managed_pool(self, asynchronous: bool = False) -> Any:
        params = self._connparams(asynchronous).copy()
        params.pop("host", None)
        params.pop("port", None)
        sentinels = []
        for url in self.connection.client.alt:
            parts = _parse_url(url)
            if parts.scheme == "sentinel":
                sentinels.append((parts.hostname, parts.port or self.connection.default_port))
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
        return manager.master_for(master_name, kombu_redis.redis.Redis,
                                  **credentials).connection_pool


class Transport(kombu_redis.SentinelTransport):
    Channel = QuorumSentinelChannel
