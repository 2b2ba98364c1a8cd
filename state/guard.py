"""Turn redis-py exceptions into the state package's own, with the server named."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import redis

from state.errors import StateError, StateUnavailable


@contextlib.contextmanager
def redis_errors(where: str) -> Iterator[None]:
    """Re-raise connection failures as :class:`StateUnavailable`, others as :class:`StateError`."""
    try:
        yield
    except (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError, OSError) as exc:
        raise StateUnavailable(f"state server {where} unavailable: {exc}") from exc
    except redis.exceptions.RedisError as exc:
        raise StateError(f"state server {where}: {exc}") from exc


def describe(client: redis.Redis | redis.asyncio.Redis) -> str:
    """``host:port/db`` of a client, for error messages (never the password)."""
    pool = client.connection_pool
    kwargs = pool.connection_kwargs
    service = getattr(pool, "service_name", None)
    if service is not None:  # a Sentinel set's master: whichever server that is now
        return f"sentinel master {service}/{kwargs.get('db', 0)}"
    if "path" in kwargs:
        return str(kwargs["path"])
    return f"{kwargs.get('host', '?')}:{kwargs.get('port', '?')}/{kwargs.get('db', 0)}"
