"""DNS over TCP: 2-byte length framing, pipelined queries answered in order, frames over
``tcp_max_frame`` close the connection, a connection that completes no query within
``tcp_idle_timeout`` is closed (trickling clients), reading pauses while the client does not
read its answers, and at most ``tcp_max_connections`` are open at once. Nothing a TCP
client does blocks the loop, so it never stalls other clients."""

from __future__ import annotations

import asyncio
from typing import Protocol

from director.dns.app import DnsApp


class TcpLimits(Protocol):
    @property
    def tcp_idle_timeout(self) -> float: ...
    @property
    def tcp_max_frame(self) -> int: ...
    @property
    def tcp_max_connections(self) -> int: ...


class TcpServer(Protocol):
    """What a connection needs of its server (``director.dns.server.DnsServer``)."""

    @property
    def app(self) -> DnsApp: ...
    @property
    def config(self) -> TcpLimits: ...
    @property
    def connections(self) -> set[TcpConnection]: ...
    @property
    def loop(self) -> asyncio.AbstractEventLoop: ...


class TcpConnection(asyncio.Protocol):
    """One client connection of ``server``, answered through ``server.app.respond``."""

    def __init__(self, server: TcpServer) -> None:
        self.server = server
        self.loop = server.loop
        self.buffer = bytearray()
        self.transport: asyncio.Transport | None = None
        self.host = ""
        self.last = 0.0
        self.timer: asyncio.TimerHandle | None = None
        self.write_paused = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        if len(self.server.connections) >= self.server.config.tcp_max_connections:
            transport.abort()  # type: ignore[attr-defined]
            return
        self.server.connections.add(self)
        peer = transport.get_extra_info("peername")
        self.host = peer[0] if peer else ""
        self.last = self.loop.time()
        self.timer = self.loop.call_later(self.server.config.tcp_idle_timeout, self._idle)

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        self._process()

    def _process(self) -> None:
        buffer, transport = self.buffer, self.transport
        if transport is None:
            return
        max_frame = self.server.config.tcp_max_frame
        while len(buffer) >= 2 and not self.write_paused:
            size = (buffer[0] << 8) | buffer[1]
            if size > max_frame or size == 0:
                transport.abort()
                return
            if len(buffer) < size + 2:
                return
            frame = bytes(buffer[2:size + 2])
            del buffer[:size + 2]
            self.last = self.loop.time()
            response = self.server.app.respond(frame, self.host, True)
            if response is not None:
                transport.write(len(response).to_bytes(2, "big") + response)

    def pause_writing(self) -> None:
        self.write_paused = True
        if self.transport is not None:
            self.transport.pause_reading()

    def resume_writing(self) -> None:
        self.write_paused = False
        if self.transport is not None and not self.transport.is_closing():
            self.transport.resume_reading()
            self._process()

    def _idle(self) -> None:
        if self.transport is None or self.transport.is_closing():
            return
        deadline = self.last + self.server.config.tcp_idle_timeout
        if self.loop.time() >= deadline:
            self.transport.abort()
        else:
            self.timer = self.loop.call_at(deadline, self._idle)

    def connection_lost(self, exc: Exception | None) -> None:
        if self.timer is not None:
            self.timer.cancel()
        self.server.connections.discard(self)
        self.buffer.clear()
