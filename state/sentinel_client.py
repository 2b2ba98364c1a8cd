"""redis-py's Sentinel clients, made to leave a master that lost a partition.

redis-py asks the Sentinels in turn and believes the first that names a master in good
standing. A Sentinel on the minority side of a partition (beside an old master cut off
from its replicas) still names that old master, and, asked first, keeps every client
writing there: writes that are lost when the partition heals. Here every reachable Sentinel
is asked, and the master named with the highest configuration epoch wins (a failover
always raises the epoch, so the majority's newer choice beats a minority's stale one);
ties go to the address most Sentinels name.

A master that has no replica left refuses writes with ``NOREPLICAS`` (with
``min-replicas-to-write``, which a production set should have: docs/operator-guide.md).
redis-py keeps its connections to it and fails every write; here that error, like
``READONLY`` (a master demoted to replica), drops the connection, so the next command
asks the Sentinels again and reaches the new master.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import redis.asyncio.sentinel as async_sentinel
from redis.exceptions import ConnectionError, ResponseError, TimeoutError
from redis.sentinel import MasterNotFoundError, Sentinel, SentinelManagedConnection

NO_REPLICAS = "NOREPLICAS"


def newest_master(answers: list[dict[str, Any]], check: Any) -> tuple[str, int] | None:
    """The master named with the highest config epoch among the Sentinels' states for one
    name (those ``check`` accepts); ties: the address most of them name."""
    good = [state for state in answers if state and check(state)]
    if not good:
        return None
    top = max(int(state.get("config-epoch", 0)) for state in good)
    votes = Counter((state["ip"], int(state["port"])) for state in good
                    if int(state.get("config-epoch", 0)) == top)
    return votes.most_common(1)[0][0]


def _chosen(answers: list[dict[str, Any]], errors: list[str], name: str,
            check: Any) -> tuple[str, int]:
    found = newest_master(answers, lambda state: check(state, name))
    if found is None:
        raise MasterNotFoundError(f"No master found for {name!r}"
                                  + (f" : {', '.join(errors)}" if errors else ""))
    return found


class QuorumSentinel(Sentinel):  # type: ignore[misc]  # redis.sentinel is untyped
    """``redis.sentinel.Sentinel`` asking every Sentinel (``newest_master``)."""

    def discover_master(self, service_name: str) -> tuple[str, int]:
        answers, errors = [], []
        for sentinel in self.sentinels:
            try:
                answers.append(sentinel.sentinel_masters().get(service_name))
            except (ConnectionError, TimeoutError) as exc:
                errors.append(f"{sentinel} - {exc!r}")
        return _chosen(answers, errors, service_name, self.check_master_state)


class AsyncQuorumSentinel(async_sentinel.Sentinel):  # type: ignore[misc]
    """``redis.asyncio.sentinel.Sentinel`` asking every Sentinel (``newest_master``)."""

    async def discover_master(self, service_name: str) -> tuple[str, int]:
        answers, errors = [], []
        for sentinel in self.sentinels:
            try:
                answers.append((await sentinel.sentinel_masters()).get(service_name))
            except (ConnectionError, TimeoutError) as exc:
                errors.append(f"{sentinel} - {exc!r}")
        return _chosen(answers, errors, service_name, self.check_master_state)


class LeavingConnection(SentinelManagedConnection):  # type: ignore[misc]
    """Drops its connection on ``NOREPLICAS``, so the next command finds the master anew."""

    def read_response(self, *args: Any, **kwargs: Any) -> Any:
        try:
            return super().read_response(*args, **kwargs)
        except ResponseError as exc:
            if str(exc).startswith(NO_REPLICAS) and self.connection_pool.is_master:
                self.disconnect()
                _forget_master(self.connection_pool)
                raise ConnectionError(f"the master refuses writes, it has no replica: {exc}"
                                      ) from exc
            raise


def _forget_master(proxy: Any) -> None:
    """Make every connection of a pool find the master again: the address the pool's
    ``proxy`` (what a connection knows as its pool) holds is forgotten, and the idle
    connections closed, so the next connect asks the Sentinels."""
    proxy.master_address = None
    pool = proxy.connection_pool_ref() if hasattr(proxy, "connection_pool_ref") else proxy
    if pool is not None:
        pool.disconnect(inuse_connections=False)


class AsyncLeavingConnection(async_sentinel.SentinelManagedConnection):  # type: ignore[misc]
    """The asyncio ``LeavingConnection``."""

    async def read_response(self, *args: Any, **kwargs: Any) -> Any:
        try:
            return await super().read_response(*args, **kwargs)
        except ResponseError as exc:
            if str(exc).startswith(NO_REPLICAS) and self.connection_pool.is_master:
                await self.disconnect()
                pool = self.connection_pool
                pool.master_address = None
                await pool.disconnect(inuse_connections=False)
                raise ConnectionError(f"the master refuses writes, it has no replica: {exc}"
                                      ) from exc
            raise
