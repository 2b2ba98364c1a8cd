"""The DNS server of one process: its listen sockets and transports around a ``DnsApp``.

UDP, three ways, fastest first (``director.dns.transports``):
- on Linux, the event loop's reader callback answers batches of non-blocking
  ``recvmmsg``/``sendmmsg`` itself (``transports.mmsg``);
- opt-in with RRL off, a reader thread per socket answers memo hits in blocking batches
  and hands the rest to the loop (``transports.udp_reader``);
- elsewhere, the reader callback reads up to ``udp_batch`` datagrams per wake-up with
  ``recvfrom`` and answers each with ``sendto`` (``transports.udp``).
All work with the stdlib loop and with uvloop. TCP: ``transports.tcp``
(an idle timeout, a cap in total and one per client /24 or /56).

IPv4 and IPv6, any number of listen addresses, port 0 picks a free port (the same for UDP
and TCP) (``transports.sockets``). ``reuse_port`` sets SO_REUSEPORT for ``--workers``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass

from director.dns.app import DnsApp
from director.dns.transports import mmsg
from director.dns.transports.mmsg import MmsgEndpoint
from director.dns.transports.sockets import BoundSockets, bind_sockets
from director.dns.transports.tcp import TcpConnection
from director.dns.transports.udp import UdpEndpoint
from director.dns.transports.udp_reader import UdpReaderThread

log = logging.getLogger(__name__)



@dataclass(frozen=True)
class ServerConfig:
    listen: tuple[tuple[str, int], ...] = (("127.0.0.1", 5353),)
    tcp_idle_timeout: float = 10.0
    tcp_max_frame: int = 16384
    tcp_max_connections: int = 1024
    tcp_max_per_network: int = 16  # open TCP connections per client /24 (IPv6: /56)
    udp_batch: int = 64
    reuse_port: bool = False
    udp_mmsg: bool = True  # batched recvmmsg/sendmmsg where libc has them (Linux)
    # with udp_mmsg: a reader thread per socket when RRL is off; opt-in: it answers memo
    # hits faster but hands every miss to the loop (udp_reader)
    udp_threads: bool = False


class DnsServer:
    """UDP and TCP listeners for one ``DnsApp`` in the running event loop."""

    def __init__(self, app: DnsApp, config: ServerConfig | None = None,
                 sockets: list[BoundSockets] | None = None) -> None:
        self.app = app
        self.config = config or ServerConfig()
        self._sockets = sockets
        self.bound: list[BoundSockets] = []
        self.connections: set[TcpConnection] = set()
        self.network_connections: dict[str, int] = {}  # open TCP connections per network
        self.udp_endpoints: list[UdpEndpoint | MmsgEndpoint] = []
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
                            else UdpEndpoint(bound.udp, self.app, self.config.udp_batch))
                self.udp_endpoints.append(endpoint)
                self.loop.add_reader(bound.udp.fileno(), endpoint.readable)
            server = await self.loop.create_server(lambda: TcpConnection(self), sock=bound.tcp)
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
