"""Several server processes sharing one port (``--workers N``), the way Python scales past
one core: each worker has its own SO_REUSEPORT UDP and TCP sockets and the kernel spreads
queries across them: UDP datagrams by ECS client subnet, so each worker's caches hold its
own share of the subnets, and by source /24 (/56) without ECS, the rate limiter's key
(``director.dns.transports.reuseport``); TCP connections by the kernel's hash.

The parent binds first (so port 0 resolves to one port for everyone), forks the workers
(worker 0 takes over the parent's sockets; the others, and every replacement, bind their
own to the same address once they can answer, so the kernel sends a starting worker no
query it would hold unanswered), then only supervises: it serves the merged metrics (each
worker sends its counters every second over a pipe), forwards SIGTERM/SIGINT/SIGHUP, and
replaces a worker that dies.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import pickle
import signal
import struct
import sys
import threading
import time
from collections.abc import Awaitable, Callable

from director.dns.metrics import DnsStats, StatsHub, serve_metrics
from director.dns.server import ServerConfig
from director.dns.transports.reuseport import steer_by_subnet
from director.dns.transports.sockets import BoundSockets, bind_sockets

log = logging.getLogger(__name__)

# the worker's sockets come from a call it makes once it is ready to answer
SocketSource = Callable[[], list[BoundSockets]]
WorkerMain = Callable[[SocketSource, Callable[[DnsStats], Awaitable[None]]], int]


def run_workers(config: ServerConfig, workers: int, worker_main: WorkerMain,
                metrics_listen: str | None = None,
                announce: Callable[[list[tuple[str, int]]], None] | None = None) -> int:
    """Fork ``workers`` processes running ``worker_main(sockets, report)`` and keep them
    running (a worker that dies is replaced, with backoff) until SIGTERM or SIGINT."""
    first = [bind_sockets(host, port, reuse_port=True) for host, port in config.listen]
    addresses = [b.address for b in first]
    for bound in first:
        steer_by_subnet(bound.udp, workers)
    hub = StatsHub()
    children: dict[int, int] = {}  # pid -> worker index

    def spawn(index: int, sockets: list[BoundSockets] | None) -> None:
        read_fd, write_fd = os.pipe()
        pid = os.fork()
        if pid == 0:  # the worker
            _die_with_parent()
            # Not the parent's handlers: default TERM/INT, and SIGHUP held until the worker
            # has its reload handler (a reload asked for during start-up is not lost).
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
            signal.signal(signal.SIGINT, signal.SIG_DFL)
            signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGHUP})
            os.close(read_fd)
            if sockets is None:
                for bound in first:
                    bound.udp.close()
                    bound.tcp.close()
            code = 1
            try:
                code = worker_main(_source(sockets, addresses), _reporter(write_fd))
            finally:
                os._exit(code)
        os.close(write_fd)
        children[pid] = index
        threading.Thread(target=_collect, args=(read_fd, index, hub), daemon=True).start()

    for index in range(workers):
        spawn(index, first if index == 0 else None)
    for bound in first:
        bound.udp.close()
        bound.tcp.close()
    if metrics_listen:
        host, port = serve_metrics(metrics_listen, hub.read)
        print(f"metrics {host}:{port}", flush=True)
    if announce is not None:
        announce(addresses)

    stopping = False

    def forward(signum: int, _frame: object) -> None:
        nonlocal stopping
        stopping = stopping or signum != signal.SIGHUP
        for pid in list(children):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signum)

    signal.signal(signal.SIGTERM, forward)
    signal.signal(signal.SIGINT, forward)
    signal.signal(signal.SIGHUP, forward)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGHUP})  # serve() held it until now
    backoff = _Backoff()
    while children:
        try:
            pid, code = os.wait()
        except ChildProcessError:
            break
        except InterruptedError:
            continue
        gone = children.pop(pid) if pid in children else None
        if gone is None or stopping:
            continue
        exit_code = os.waitstatus_to_exitcode(code)
        delay = backoff.next()
        log.error("DNS worker %d (pid %d) exited with %d; replacing it in %.1f s",
                  gone, pid, exit_code, delay)
        time.sleep(delay)
        if not stopping:
            spawn(gone, None)
    return 0


def _source(sockets: list[BoundSockets] | None,
            addresses: list[tuple[str, int]]) -> SocketSource:
    """The parent's sockets (worker 0), or a call that binds the worker's own."""
    if sockets is not None:
        return lambda: sockets
    return lambda: [bind_sockets(host, port, reuse_port=True) for host, port in addresses]


class _Backoff:
    """0.5 s doubling to 10 s between replacements; back to 0.5 s after a quiet minute."""

    def __init__(self) -> None:
        self.delay = 0.25
        self.last = 0.0

    def next(self) -> float:
        now = time.monotonic()
        self.delay = 0.5 if now - self.last > 60 else min(self.delay * 2, 10.0)
        self.last = now
        return self.delay


def _die_with_parent() -> None:
    """Linux: have the kernel send SIGTERM to this worker if the parent dies first."""
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def _reporter(fd: int) -> Callable[[DnsStats], Awaitable[None]]:
    async def report(stats: DnsStats) -> None:
        while True:
            _send(fd, stats.snapshot())
            await asyncio.sleep(1.0)

    return report


def _send(fd: int, snapshot: dict) -> None:
    data = pickle.dumps(snapshot)
    with contextlib.suppress(OSError):
        os.write(fd, struct.pack("!I", len(data)) + data)


def _collect(fd: int, index: int, hub: StatsHub) -> None:
    with os.fdopen(fd, "rb") as pipe:
        while True:
            head = pipe.read(4)
            if len(head) < 4:
                return
            (size,) = struct.unpack("!I", head)
            body = pipe.read(size)
            if len(body) < size:
                return
            try:
                hub.put(index, pickle.loads(body))
            except Exception:  # a torn message from a dying worker
                print("bad stats message from worker", index, file=sys.stderr)
