# SPDX-License-Identifier: Apache-2.0
"""How long a client may keep the balancer's work waiting.

A client is untrusted, and each connection it holds open costs a socket, a parser and,
once it has a GPU, the GPU's slot. So every phase of a request has a deadline:

- ``headers_s``: from a connection's opening, or the first byte of its next request, to
  the end of that request's headers (10 s). A client dribbling its headers a byte at a
  time (slowloris) is answered 408 and its connection closed (``ClientGuard``, on the
  listening socket: ``GuardedSite``).
- ``body_s``: the request's body may pause at most this long between bytes (30 s); a body
  that stalls is answered 408 and its connection closed (``read_body``, in the proxy).
- ``stall_s``: an answer the client takes no byte of for this long is cut, and its GPU slot
  and tenant concurrency freed (``relay``; 30 s).
- ``idle_s``: a kept-alive connection with no request is closed after this long (75 s, as
  nginx; aiohttp's own default is an hour).
- ``linger_s``: after an answer sent before the request's body was read (408, 413, 401),
  the rest of the body is read and dropped for at most this long before the close, so that
  the client reads the answer rather than a reset (2 s; aiohttp's default is 10 s).

Each cut is counted (``director_balancer_slow_requests_total{phase}``,
``director_balancer_stalled_clients_total``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import cast

from aiohttp import web

from regions.balancer.http.relay import DEFAULT_STALL_S

log = logging.getLogger(__name__)

TIMED_OUT = b"HTTP/1.1 408 Request Timeout\r\nConnection: close\r\nContent-Length: 0\r\n\r\n"


@dataclass(frozen=True)
class ClientTimeouts:
    """The deadlines a client's connection is held to (seconds, each above zero)."""

    headers_s: float = 10.0
    body_s: float = 30.0
    stall_s: float = DEFAULT_STALL_S
    idle_s: float = 75.0
    linger_s: float = 2.0

    def __post_init__(self) -> None:
        for name in ("headers_s", "body_s", "stall_s", "idle_s", "linger_s"):
            value = getattr(self, name)
            if not value > 0:
                raise ValueError(f"client timeout {name} must be above zero, not {value}")


class BodyTimeout(Exception):
    """A request body paused longer than its deadline."""


async def read_body(request: web.Request, idle_s: float) -> bytes:
    """The request's whole body (read and cached as ``request.read()`` does); raises
    ``BodyTimeout`` when no byte of it arrives for ``idle_s`` seconds."""
    reading = asyncio.ensure_future(request.read())
    seen = request.content.total_bytes
    try:
        while True:
            done, _ = await asyncio.wait((reading,), timeout=idle_s)
            if done:
                return reading.result()
            if request.content.total_bytes == seen:
                raise BodyTimeout(f"no byte of the request body for {idle_s:g} s")
            seen = request.content.total_bytes
    finally:
        if not reading.done():
            reading.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await reading


class _Guarded(asyncio.Protocol):
    """A connection's protocol (aiohttp's request handler) with a deadline on each request's
    headers: armed when the connection opens and at the first byte after a request ended,
    disarmed when the next request reaches the app."""

    def __init__(self, inner: asyncio.Protocol, guard: ClientGuard) -> None:
        self.inner = inner
        self.guard = guard
        self.transport: asyncio.Transport | None = None
        self.in_request = False
        self.timer: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = stream = cast(asyncio.Transport, transport)  # a stream server's
        self.guard.connections[stream] = self
        self.arm()
        self.inner.connection_made(transport)

    def data_received(self, data: bytes) -> None:
        if not self.in_request and self.timer is None:
            self.arm()
        self.inner.data_received(data)

    def eof_received(self) -> bool | None:
        return self.inner.eof_received()

    def connection_lost(self, exc: Exception | None) -> None:
        self.disarm()
        if self.transport is not None:
            self.guard.connections.pop(self.transport, None)
        self.inner.connection_lost(exc)

    def pause_writing(self) -> None:
        self.inner.pause_writing()

    def resume_writing(self) -> None:
        self.inner.resume_writing()

    def arm(self) -> None:
        loop = asyncio.get_running_loop()
        self.timer = loop.call_later(self.guard.timeouts.headers_s, self.expired)

    def disarm(self) -> None:
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None

    def expired(self) -> None:
        self.timer = None
        transport = self.transport
        if self.in_request or transport is None or transport.is_closing():
            return
        self.guard.cut()
        log.debug("connection from %s cut: no whole request head within %g s",
                  transport.get_extra_info("peername"), self.guard.timeouts.headers_s)
        transport.write(TIMED_OUT)
        transport.close()


class ClientGuard:
    """The header deadline of every connection of one listener: its protocol factory
    (``protocol``) and the app middleware that tells it a request's head has arrived."""

    def __init__(self, timeouts: ClientTimeouts, on_cut: Callable[[], None]) -> None:
        self.timeouts = timeouts
        self.cut = on_cut  # counts a connection cut for its slow headers
        self.connections: dict[asyncio.Transport, _Guarded] = {}

    def protocol(self, inner: asyncio.Protocol) -> asyncio.Protocol:
        return _Guarded(inner, self)

    @web.middleware
    async def middleware(self, request: web.Request,
                         handler: Callable[[web.Request], Awaitable[web.StreamResponse]],
                         ) -> web.StreamResponse:
        guarded = self.connections.get(request.transport) if request.transport else None
        if guarded is None:
            return await handler(request)
        guarded.in_request = True
        guarded.disarm()
        try:
            return await handler(request)
        finally:
            guarded.in_request = False  # the next byte starts the next head's deadline


class GuardedSite(web.BaseSite):
    """A TCP listener whose connections are held to ``guard``'s header deadline."""

    def __init__(self, runner: web.BaseRunner, host: str, port: int, guard: ClientGuard,
                 *, reuse_address: bool = True) -> None:
        super().__init__(runner)
        self.host = host
        self.port = port
        self.guard = guard
        self.reuse_address = reuse_address

    @property
    def name(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"

    async def start(self) -> None:
        await super().start()
        server = self._runner.server
        if server is None:
            raise RuntimeError("the runner is not set up")
        loop = asyncio.get_running_loop()
        self._server = await loop.create_server(
            lambda: self.guard.protocol(server()), self.host, self.port,
            backlog=self._backlog, reuse_address=self.reuse_address)
