# SPDX-License-Identifier: Apache-2.0
"""Every backend's connection pools: its inference requests' (``UpstreamPool``, the data
path) and its control traffic's (an aiohttp ``ClientSession``: metric scrapes, engine info,
``/v1/models``). Opened for the backends a pool has, renamed when a backend's URL changes
(the old pool drains under the retired name), taken out when a backend leaves."""

from __future__ import annotations

import asyncio

import aiohttp

from regions.balancer.http.upstream_pool import UpstreamPool
from regions.balancer.scheduling.backends import BackendPool

ConnectionPool = aiohttp.ClientSession | UpstreamPool
KEEPALIVE_S = 30.0


class BackendConnections:
    """The connection pools of one balancer's backends, by backend name."""

    def __init__(self, connect_timeout_s: float, read_timeout_s: float) -> None:
        self.connect_timeout_s = connect_timeout_s
        self.read_timeout_s = read_timeout_s
        self.sessions: dict[str, aiohttp.ClientSession] = {}  # control traffic
        self.upstreams: dict[str, UpstreamPool] = {}  # inference requests

    def open(self, pool: BackendPool) -> None:
        """Pools for every backend of ``pool`` that has none yet (needs a running loop)."""
        timeout = aiohttp.ClientTimeout(
            total=None, sock_connect=self.connect_timeout_s, sock_read=self.read_timeout_s
        )
        for b in pool:
            if b.name not in self.upstreams:
                self.upstreams[b.name] = UpstreamPool(
                    b.spec.url,
                    connect_timeout_s=self.connect_timeout_s,
                    read_timeout_s=self.read_timeout_s,
                    keepalive_s=KEEPALIVE_S,
                )
            if b.name not in self.sessions:
                self.sessions[b.name] = aiohttp.ClientSession(
                    connector=aiohttp.TCPConnector(limit=0, keepalive_timeout=KEEPALIVE_S),
                    timeout=timeout,
                    auto_decompress=False,
                    cookie_jar=aiohttp.DummyCookieJar(),  # a backend's cookies are its clients'
                )

    def rename(self, name: str, retired: str) -> None:
        """``name``'s pools now belong to ``retired`` (the backend it became)."""
        if name in self.sessions:
            self.sessions[retired] = self.sessions.pop(name)
        if name in self.upstreams:
            self.upstreams[retired] = self.upstreams.pop(name)

    def take(self, name: str) -> list[ConnectionPool]:
        """Remove ``name``'s pools; the caller closes them."""
        taken: list[ConnectionPool] = []
        if name in self.sessions:
            taken.append(self.sessions.pop(name))
        if name in self.upstreams:
            taken.append(self.upstreams.pop(name))
        return taken

    async def close(self) -> None:
        """Close every pool."""
        pools: list[ConnectionPool] = [*self.sessions.values(), *self.upstreams.values()]
        self.sessions.clear()
        self.upstreams.clear()
        await asyncio.gather(*(p.close() for p in pools))
