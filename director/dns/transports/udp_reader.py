"""A UDP socket read by a thread of its own, the way gdnsd reads: a blocking ``recvmmsg``
that waits for the first datagram and takes whatever else is queued by then, the answers to
memo hits sent in one ``sendmmsg``, and back to waiting.

Opt-in (``--udp-reader-threads``, used only with ``--rrl off``): it answers cached mixes
faster than reading from the loop, but never-seen client subnets slower, since every miss
crosses from this thread to the loop's. Read from the event loop instead, every batch costs
an ``epoll_wait`` before it and an empty non-blocking ``recvmmsg`` after it. The figures
(``bench/dns.sh``): ``docs/research/dns-transport.md``.

Only memo hits are answered on this thread: a dict lookup, a counter in a list of the
thread's own (``ReaderCounters``) and a copy into the batch buffer. Everything else (misses,
malformed packets, a memo gone stale with a new snapshot) is handed to the event loop in one
call per batch and answered there through ``DnsApp.udp_responder``, so the caches, the
decision engine and the full path keep a single thread. A handover backlog above
``HANDOVER_LIMIT`` datagrams drops what comes next, as a full socket buffer would.

Stopping: a flag, then ``shutdown(SHUT_RD)``, which wakes a ``recvmmsg`` blocked on a UDP
socket; the receive timeout (``WAKE_INTERVAL``) is the fallback. The socket is closed only
after the thread has ended, so its descriptor cannot be reused under a blocked read.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import errno
import logging
import signal
import socket
import struct
import threading
import time
from collections.abc import Callable

from director.dns.app import DnsApp
from director.dns.transports.mmsg import Cached, MmsgEndpoint
from director.dns.transports.udp_answer import answer_all

log = logging.getLogger(__name__)

HANDOVER_LIMIT = 4096
WAKE_INTERVAL = 0.5  # seconds: the longest a blocked read waits before seeing a stop flag

Handover = list[tuple[bytes, tuple]]


class UdpReaderThread:
    """Answers memo hits on ``sock`` in its own thread, hands the rest to ``loop``."""

    def __init__(self, sock: socket.socket, app: DnsApp, loop: asyncio.AbstractEventLoop) -> None:
        self.sock = sock
        self.app = app
        self.loop = loop
        self.counters = app.stats.new_reader()
        self.handed = 0  # written by the reader thread only
        self.answered = 0  # written by the event-loop thread only
        self._pending: Handover = []
        self._stopping = False
        self.endpoint = MmsgEndpoint(sock, self._handover_responder, app.failed, self._memo)
        self._thread = threading.Thread(target=self._run, name=f"dns-udp-{sock.fileno()}",
                                        daemon=True)

    def start(self) -> None:
        """Make the socket blocking (with a wake-up timeout) and start reading it."""
        self.sock.setblocking(True)
        seconds = int(WAKE_INTERVAL)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVTIMEO,
                             struct.pack("ll", seconds, int((WAKE_INTERVAL - seconds) * 1e6)))
        self._thread.start()

    async def stop(self) -> None:
        """End the thread (the socket stays open: the caller closes it afterwards)."""
        self._stopping = True
        with contextlib.suppress(OSError):  # ENOTCONN on an unconnected socket, still wakes
            self.sock.shutdown(socket.SHUT_RD)
        await asyncio.to_thread(self._thread.join, WAKE_INTERVAL * 4)

    def _memo(self) -> Cached | None:
        memo = self.app.reader_memo()
        return (memo, self.counters.counts, None) if memo is not None else None

    def _handover_responder(self) -> Callable[[bytes, tuple], None]:
        return self._hand_over

    def _hand_over(self, data: bytes, addr: tuple) -> None:
        """The responder seen by the endpoint for what the memo cannot answer: keep it for
        the event loop and send nothing from this thread."""
        if self.handed - self.answered + len(self._pending) >= HANDOVER_LIMIT:
            self.counters.dropped += 1
            return None
        self._pending.append((data, addr))
        return None

    def _run(self) -> None:
        signal.pthread_sigmask(signal.SIG_BLOCK, signal.valid_signals())  # the main thread's
        wait_batch = self.endpoint.wait_batch
        while not self._stopping:
            count = wait_batch()
            if self._pending:
                pending, self._pending = self._pending, []
                self.handed += len(pending)
                try:
                    self.loop.call_soon_threadsafe(self._answer, pending)
                except RuntimeError:  # the loop is closed: the server is going away
                    return
            if count == 0:
                return  # shut down
            failure = ctypes.get_errno() if count < 0 else 0
            if failure in (errno.EBADF, errno.ENOTSOCK):
                return  # closed under us
            if failure not in (0, errno.EAGAIN, errno.EINTR):
                log.warning("UDP read failed: %s", errno.errorcode.get(failure, failure))
                time.sleep(0.01)  # a persistent error must not spin a core
        log.debug("UDP reader for %s stopped", self.sock)

    def _answer(self, pending: Handover) -> None:
        """On the event loop: answer what the reader handed over, one batch."""
        try:
            answer_all(self.app, self.sock, pending)
        finally:
            self.answered += len(pending)
