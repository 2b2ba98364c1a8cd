"""The transports: asyncio UDP and TCP servers around a ``DnsApp``.

UDP, three ways, fastest first:
- on Linux with rate limiting off (the default), a reader thread per socket answers memo
  hits in batches of blocking ``recvmmsg``/``sendmmsg`` and hands the rest to the event
  loop (``director.dns.udp_reader``);
- on Linux otherwise, the event loop's reader callback does the same batches
  non-blocking, answering everything itself (``director.dns.mmsg``);
- elsewhere, the reader callback reads up to ``udp_batch`` datagrams per wake-up with
  ``recvfrom`` and answers each with ``sendto`` (no datagram transport: the stdlib one reads
  one datagram per wake-up into a 256 KiB buffer).
All work with the stdlib loop and with uvloop.

TCP: 2-byte length framing, pipelined queries answered in order, frames over
``tcp_max_frame`` close the connection, a connection that completes no query within
``tcp_idle_timeout`` is closed (trickling clients), reading pauses while the client does
not read its answers, and at most ``tcp_max_connections`` are open at once. Nothing a TCP
client does blocks the loop, so it never stalls other clients.

IPv4 and IPv6 (v6-only sockets), any number of listen addresses, port 0 picks a free port
(the same for UDP and TCP). ``reuse_port`` sets SO_REUSEPORT for ``--workers``.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import logging
import socket
import threading
from collections.abc import Callable
from dataclasses import dataclass, field

from director.dns import mmsg
from director.dns.app import DnsApp
from director.dns.mmsg import MmsgEndpoint
from director.dns.udp_answer import answer_all
from director.dns.udp_reader import UdpReaderThread
from state.ports import hostport, parse_hostport

log = logging.getLogger(__name__)

UDP_READ_SIZE = 4096


@dataclass(frozen=True)
class ServerConfig:
    listen: tuple[tuple[str, int], ...] = (("127.0.0.1", 5353),)
    tcp_idle_timeout: float = 10.0
    tcp_max_frame: int = 16384
    tcp_max_connections: int = 1024
    udp_batch: int = 64
    reuse_port: bool = False
    udp_mmsg: bool = True  # batched recvmmsg/sendmmsg where libc has them (Linux)
    # with udp_mmsg: a reader thread per socket when RRL is off; opt-in: it answers memo
    # hits faster but hands every miss to the loop (udp_reader)
    udp_threads: bool = False


@dataclass
class BoundSockets:
    """A UDP and a TCP socket bound to the same address and port."""

    udp: socket.socket
    tcp: socket.socket
    address: tuple[str, int] = field(init=False)

    def __post_init__(self) -> None:
        host, port = self.udp.getsockname()[:2]
        self.address = (host, port)


def parse_listen(listen: str) -> tuple[tuple[str, int], ...]:
    """'127.0.0.1:5353,[::1]:5353' -> (('127.0.0.1', 5353), ('::1', 5353))."""
    out = []
    for item in listen.split(","):
        try:
            out.append(parse_hostport(item))
        except ValueError as exc:
            raise ValueError(f"listen address {item.strip()!r}: {exc}") from None
    return tuple(out)


def bind_sockets(host: str, port: int, reuse_port: bool = False,
                 attempts: int = 20) -> BoundSockets:
    """Bind UDP and TCP on ``host:port``; with port 0, one free port for both."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    for _ in range(attempts):
        udp = _socket(family, socket.SOCK_DGRAM, reuse_port)
        try:
            udp.bind((host, port))
        except OSError as exc:
            udp.close()
            raise _bind_error(exc, "UDP", host, port) from None
        bound_port = udp.getsockname()[1]
        tcp = _socket(family, socket.SOCK_STREAM, reuse_port)
        tcp.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            tcp.bind((host, bound_port))
        except OSError as exc:
            udp.close()
            tcp.close()
            if port == 0 and exc.errno == errno.EADDRINUSE:
                continue
            raise _bind_error(exc, "TCP", host, bound_port) from None
        tcp.listen(1024)
        return BoundSockets(udp, tcp)
    raise OSError(errno.EADDRINUSE, f"no free port for UDP and TCP on {host}")


def _bind_error(exc: OSError, protocol: str, host: str, port: int) -> OSError:
    return OSError(exc.errno, f"cannot bind DNS {protocol} {hostport((host, port))}: "
                   f"{exc.strerror}")


def _socket(family: int, kind: int, reuse_port: bool) -> socket.socket:
    sock = socket.socket(family, kind)
    if family == socket.AF_INET6:
        sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
    if reuse_port:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    if kind == socket.SOCK_DGRAM:
        with contextlib.suppress(OSError):  # absorb bursts (capped by net.core.rmem_max)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 << 20)
    sock.setblocking(False)
    return sock


class _UdpEndpoint:
    def __init__(self, sock: socket.socket, app: DnsApp, batch: int) -> None:
        self.sock = sock
        self.app = app
        self.batch = batch

    def readable(self) -> None:
        recvfrom = self.sock.recvfrom
        received = []
        for _ in range(self.batch):
            try:
                received.append(recvfrom(UDP_READ_SIZE))
            except OSError:  # nothing more waiting (BlockingIOError), or a failed read
                break
        answer_all(self.app, self.sock, received)


class _TcpConnection(asyncio.Protocol):
    def __init__(self, server: DnsServer) -> None:
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


class DnsServer:
    """UDP and TCP listeners for one ``DnsApp`` in the running event loop."""

    def __init__(self, app: DnsApp, config: ServerConfig | None = None,
                 sockets: list[BoundSockets] | None = None) -> None:
        self.app = app
        self.config = config or ServerConfig()
        self._sockets = sockets
        self.bound: list[BoundSockets] = []
        self.connections: set[_TcpConnection] = set()
        self.udp_endpoints: list[_UdpEndpoint | MmsgEndpoint] = []
        self.udp_readers: list[UdpReaderThread] = []
        self._servers: list[asyncio.AbstractServer] = []
        self.loop: asyncio.AbstractEventLoop = None  # type: ignore[assignment]

    @property
    def addresses(self) -> list[tuple[str, int]]:
        """Where the server listens (UDP and TCP on each)."""
        return [b.address for b in self.bound]

    async def start(self) -> None:
        """Bind (unless sockets were given) and start answering."""
        self.loop = asyncio.get_running_loop()
        self.bound = self._sockets if self._sockets is not None else [
            bind_sockets(host, port, self.config.reuse_port) for host, port in self.config.listen]
        batched = self.config.udp_mmsg and mmsg.available()
        threaded = batched and self.config.udp_threads and self.app.rrl is None
        for bound in self.bound:
            bound.udp.setblocking(False)
            if threaded:
                reader = UdpReaderThread(bound.udp, self.app, self.loop)
                self.udp_readers.append(reader)
                self.udp_endpoints.append(reader.endpoint)
                reader.start()
            else:
                endpoint = (MmsgEndpoint(bound.udp, self._unlimited_responder, self.app.failed,
                                         self.app.udp_memo, self.app.rate_limit) if batched
                            else _UdpEndpoint(bound.udp, self.app, self.config.udp_batch))
                self.udp_endpoints.append(endpoint)
                self.loop.add_reader(bound.udp.fileno(), endpoint.readable)
            server = await self.loop.create_server(lambda: _TcpConnection(self), sock=bound.tcp)
            self._servers.append(server)
        log.info("DNS server listening on %s (UDP and TCP)",
                 ", ".join(f"{h}:{p}" for h, p in self.addresses))

    def _unlimited_responder(self) -> Callable[[bytes, tuple], bytes | None]:
        return self.app.udp_responder(limited=False)  # the batched endpoint rate-limits

    async def stop(self) -> None:
        """Stop listening and close every connection."""
        for reader in self.udp_readers:
            await reader.stop()
        for bound in self.bound:
            with contextlib.suppress(Exception):
                self.loop.remove_reader(bound.udp.fileno())
            bound.udp.close()
        for server in self._servers:
            server.close()
        for connection in list(self.connections):
            if connection.transport is not None:
                connection.transport.abort()
        for server in self._servers:
            with contextlib.suppress(Exception):
                await server.wait_closed()
        self._servers.clear()


def new_event_loop() -> asyncio.AbstractEventLoop:
    """uvloop's loop when installed (faster), else the stdlib's."""
    try:
        import uvloop
    except ImportError:
        return asyncio.new_event_loop()
    return uvloop.new_event_loop()


class ServerThread:
    """A ``DnsServer`` on its own event loop in a daemon thread (tests, embedded mode).

    ::

        with ServerThread(app, ServerConfig(listen=(("127.0.0.1", 0),))) as server:
            host, port = server.addresses[0]
    """

    def __init__(self, app: DnsApp, config: ServerConfig | None = None) -> None:
        self.server = DnsServer(app, config)
        self.loop = new_event_loop()
        self._thread = threading.Thread(target=self._run, name="dns-server", daemon=True)
        self._ready = threading.Event()
        self._error: BaseException | None = None

    @property
    def addresses(self) -> list[tuple[str, int]]:
        return self.server.addresses

    def start(self) -> ServerThread:
        self._thread.start()
        self._ready.wait(10)
        if self._error is not None:
            raise self._error
        return self

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        try:
            self.loop.run_until_complete(self.server.start())
        except BaseException as exc:  # surfaced to the starting thread
            self._error = exc
            self._ready.set()
            return
        self._ready.set()
        self.loop.run_forever()
        self.loop.run_until_complete(self.server.stop())
        self.loop.close()

    def stop(self) -> None:
        if self._thread.is_alive():
            self.loop.call_soon_threadsafe(self.loop.stop)
            self._thread.join(10)

    def __enter__(self) -> ServerThread:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
