"""DNS over TCP: 2-byte length framing, pipelined queries answered in order, frames over
``tcp_max_frame`` close the connection, a connection that completes no query within
``tcp_idle_timeout`` is closed (RFC 7766 section 6.2.3: trickling and idle clients alike),
reading pauses while the client does not read its answers, at most
``tcp_max_connections`` are open at once and at most ``tcp_max_per_network`` from one
client network (its /24, or /56 for IPv6: the networks RRL counts). A connection over
either cap is closed as soon as it is accepted and counted in
``director_dns_tcp_refused_total{reason="total"|"per-network"}``. Nothing a TCP client
does blocks the loop, so it never stalls other clients."""

from __future__ import annotations

import asyncio
from typing import Protocol

from director.dns.app import DnsApp
from director.dns.ratelimit import network_key


class TcpLimits(Protocol):
    @property
    def tcp_idle_timeout(self) -> float: ...
    @property
    def tcp_max_frame(self) -> int: ...
    @property
    def tcp_max_connections(self) -> int: ...
    @property
    def tcp_max_per_network(self) -> int: ...


class TcpServer(Protocol):
    """What a connection needs of its server (``director.dns.server.DnsServer``)."""

    @property
    def app(self) -> DnsApp: ...
    @property
    def config(self) -> TcpLimits: ...
    @property
    def connections(self) -> set[TcpConnection]: ...
    @property
    def network_connections(self) -> dict[str, int]: ...
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
        self.network: str | None = None  # counted in server.network_connections
        self.last = 0.0
        self.timer: asyncio.TimerHandle | None = None
        self.write_paused = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        server, limits = self.server, self.server.config
        peer = transport.get_extra_info("peername")
        self.host = peer[0] if peer else ""
        network = network_key(self.host)
        open_here = server.network_connections.get(network, 0)
        if len(server.connections) >= limits.tcp_max_connections:
            self._refuse(transport, "total")
            return
        if open_here >= limits.tcp_max_per_network:
            self._refuse(transport, "per-network")
            return
        server.connections.add(self)
        server.network_connections[network] = open_here + 1
        self.network = network
        self.last = self.loop.time()
        self.timer = self.loop.call_later(limits.tcp_idle_timeout, self._idle)

    def _refuse(self, transport: asyncio.BaseTransport, reason: str) -> None:
        self.server.app.stats.tcp_refused[reason] += 1
        transport.abort()  # type: ignore[attr-defined]

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
        network, self.network = self.network, None
        if network is not None:
            left = self.server.network_connections.get(network, 1) - 1
            if left > 0:
                self.server.network_connections[network] = left
            else:
                self.server.network_connections.pop(network, None)
        self.buffer.clear()
