# SPDX-License-Identifier: Apache-2.0
"""Keep-alive HTTP/1.1 connections to one GPU server (``UpstreamPool``): an idle one is
reused, a new one opened when none is; each request is written whole, its answer read by
the connection (``upstream``)."""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import Iterable
from urllib.parse import urlsplit

from regions.balancer.http.upstream import Connection, UpstreamResponse


class UpstreamPool:
    """Keep-alive HTTP/1.1 connections to one server (``http://`` or ``https://``)."""

    def __init__(
        self,
        url: str,
        *,
        connect_timeout_s: float,
        read_timeout_s: float,
        keepalive_s: float = 30.0,
    ) -> None:
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"not an http(s) URL: {url!r}")
        self.url = url.rstrip("/")
        self.host = parts.hostname
        self.port = parts.port or (443 if parts.scheme == "https" else 80)
        self.ssl: ssl.SSLContext | None = (
            ssl.create_default_context() if parts.scheme == "https" else None
        )
        self.base_path = parts.path.rstrip("/")
        self.host_header = parts.netloc.encode("idna")
        self.connect_timeout_s = connect_timeout_s
        self.read_timeout_s = read_timeout_s
        self.keepalive_s = keepalive_s
        self._idle: list[Connection] = []
        self._open: set[Connection] = set()
        self._closed = False

    @property
    def idle(self) -> int:
        return len(self._idle)

    @property
    def open(self) -> int:
        return len(self._open)

    async def request(
        self, method: str, path: str, headers: Iterable[tuple[str, str]], body: bytes
    ) -> UpstreamResponse:
        """Send a request; its response once the head has arrived."""
        if self._closed:
            raise ConnectionError(f"{self.url}: pool closed")
        wire = _request_bytes(method, self.base_path + path, self.host_header, headers, body)
        conn = self._take_idle()
        if conn is not None:
            try:
                return await self._exchange(conn, wire)
            except ConnectionError:
                if conn.received:  # the server did answer something: not a stale socket
                    raise
            # the server had closed the kept-alive connection: once more on a new one
        return await self._exchange(await self._connect(), wire)

    @staticmethod
    async def _exchange(conn: Connection, wire: bytes) -> UpstreamResponse:
        try:
            return await conn.send(wire)
        except asyncio.CancelledError:
            conn.abort()  # the client left before the head: the server drops the request
            raise

    def _take_idle(self) -> Connection | None:
        now = asyncio.get_running_loop().time()
        while self._idle:
            conn = self._idle.pop()
            if conn.closed:
                continue
            if now - conn.idle_since > self.keepalive_s:
                conn.abort()
                continue
            return conn
        return None

    async def _connect(self) -> Connection:
        loop = asyncio.get_running_loop()
        try:
            async with asyncio.timeout(self.connect_timeout_s):
                _, conn = await loop.create_connection(
                    lambda: Connection(self), self.host, self.port, ssl=self.ssl
                )
        except TimeoutError:
            raise TimeoutError(
                f"{self.url}: no connection within {self.connect_timeout_s:g} s"
            ) from None
        self._open.add(conn)
        return conn

    def _forget(self, conn: Connection) -> None:
        self._open.discard(conn)
        if conn in self._idle:
            self._idle.remove(conn)

    async def close(self) -> None:
        """Close every connection (answers in flight are cut)."""
        self._closed = True
        for conn in list(self._open):
            conn.abort()
        self._idle.clear()




def _request_bytes(
    method: str, target: str, host: bytes, headers: Iterable[tuple[str, str]], body: bytes
) -> bytes:
    """The request on the wire; a ``Host`` in ``headers`` replaces the server's own."""
    lines = [b"%s %s HTTP/1.1\r\nContent-Length: %d\r\n"
             % (method.encode("ascii"), target.encode("utf-8", "surrogateescape"), len(body))]
    has_host = False
    for name, value in headers:
        lower = name.lower()
        if lower == "content-length":
            continue
        has_host = has_host or lower == "host"
        if "\r" in value or "\n" in value:
            raise ValueError(f"header {name}: a line break in its value")
        lines.append(b"%s: %s\r\n" % (name.encode("ascii", "surrogateescape"),
                                      value.encode("utf-8", "surrogateescape")))
    if not has_host:
        lines.append(b"Host: %s\r\n" % host)
    lines.append(b"\r\n")
    lines.append(body)
    return b"".join(lines)
