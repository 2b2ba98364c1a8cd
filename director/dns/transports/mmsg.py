"""Batched UDP I/O on Linux: up to 64 datagrams in one ``recvmmsg`` and their answers in one
``sendmmsg``, as gdnsd does, through ctypes.

Python's ``recvfrom``/``sendto`` cost one system call each per query, and more CPU again to
turn the peer address into a ``(str, int)`` tuple (``inet_ntop`` with ``sprintf``) and back
(``inet_pton``): together a third of the server's CPU per query on a cached answer. Here the
datagrams land in fixed buffer slots, the peer addresses stay raw ``sockaddr`` bytes (turned
into host strings through a small memo), each answer is written into its query's slot, and
one ``sendmmsg`` sends them all back to the raw addresses.

Layout (one per socket, allocated once): ``SLOTS`` buffers of ``SLOT_SIZE`` bytes, ``SLOTS``
``sockaddr_in6``-sized name buffers, and two ``mmsghdr`` arrays, one for receiving (each
header pointing at its own slot, restored from a template before every receive) and one
for sending (pointed at the slots of the queries that got an answer).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import errno
import socket
import sys
import time
from collections.abc import Callable
from typing import cast

from director.dns.ratelimit import SLIP, slipped

SLOTS = 64
SLOT_SIZE = 4096
NAME_SIZE = 28  # sizeof(struct sockaddr_in6)
MSG_DONTWAIT = 0x40
MSG_TRUNC = 0x20
MSG_WAITFORONE = 0x10000  # block for the first datagram only, then take what is queued
_HOST_MEMO_LIMIT = 100_000

Respond = Callable[[bytes, tuple], "bytes | None"]
# the memo, the metric counters, and a lookup answering a query less its ID (or None)
Cached = tuple[dict, list[int], "Callable[[bytes], tuple[bytes, int] | None] | None"]
# response rate limiting (ratelimit.ResponseRateLimiter.limit): network bytes, now -> verdict
Limit = Callable[[bytes, float], int]


class _IoVec(ctypes.Structure):
    _fields_ = [("iov_base", ctypes.c_void_p), ("iov_len", ctypes.c_size_t)]


class _MsgHdr(ctypes.Structure):
    _fields_ = [("msg_name", ctypes.c_void_p), ("msg_namelen", ctypes.c_uint32),
                ("msg_iov", ctypes.c_void_p), ("msg_iovlen", ctypes.c_size_t),
                ("msg_control", ctypes.c_void_p), ("msg_controllen", ctypes.c_size_t),
                ("msg_flags", ctypes.c_int)]


class _MMsgHdr(ctypes.Structure):
    _fields_ = [("msg_hdr", _MsgHdr), ("msg_len", ctypes.c_uint)]


_HDR = ctypes.sizeof(_MMsgHdr)
_LIBC: ctypes.CDLL | None = None


def _libc() -> ctypes.CDLL | None:
    global _LIBC
    if _LIBC is None:
        try:
            libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
            for name in ("recvmmsg", "sendmmsg"):
                function = getattr(libc, name)
                function.restype = ctypes.c_int
            libc.recvmmsg.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_uint, ctypes.c_int,
                                      ctypes.c_void_p]
            libc.sendmmsg.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_uint, ctypes.c_int]
        except (OSError, AttributeError):
            return None
        _LIBC = libc
    return _LIBC


def available() -> bool:
    """Whether this platform's libc has recvmmsg and sendmmsg (and the layout is known)."""
    return _libc() is not None and _HDR % 8 == 0 and _MsgHdr.msg_namelen.offset % 4 == 0


class MmsgEndpoint:
    """Reads, answers and writes batches of datagrams on one non-blocking UDP socket.

    ``memo()`` gives the fast path's UDP memo, counters and lane lookup for the batch (or
    None): a hit in either is answered here, the cached bytes written after the query's ID
    in its own slot; anything else goes through ``responder()(data, (host, port))``.

    Two ways to drive it: ``readable()`` from an event loop on a non-blocking socket, or
    ``wait_batch()`` in a loop of its own thread on a blocking one
    (``director.dns.transports.udp_reader``).
    """

    def __init__(self, sock: socket.socket, responder: Callable[[], Respond],
                 failed: Callable[[bytes, str], bytes | None],
                 memo: Callable[[], Cached | None] = lambda: None,
                 limiter: Callable[[], Limit | None] = lambda: None) -> None:
        libc = _libc()
        if libc is None:
            raise OSError(errno.ENOSYS, "recvmmsg/sendmmsg not available")
        self.sock = sock
        self.fd = sock.fileno()
        self.responder = responder
        self.failed = failed
        self.memo = memo
        self.limiter = limiter
        self._recvmmsg = libc.recvmmsg
        self._sendmmsg = libc.sendmmsg
        self._buffers = (ctypes.c_char * (SLOTS * SLOT_SIZE))()
        self._names = (ctypes.c_char * (SLOTS * NAME_SIZE))()
        self._recv_iov = (_IoVec * SLOTS)()
        self._send_iov = (_IoVec * SLOTS)()
        self._recv = (_MMsgHdr * SLOTS)()
        self._send = (_MMsgHdr * SLOTS)()
        buffers, names = ctypes.addressof(self._buffers), ctypes.addressof(self._names)
        namelen = 16 if sock.family == socket.AF_INET else NAME_SIZE
        for i in range(SLOTS):
            for iov in (self._recv_iov, self._send_iov):
                iov[i].iov_base = buffers + i * SLOT_SIZE
                iov[i].iov_len = SLOT_SIZE
            for headers, iov, length in ((self._recv, self._recv_iov, NAME_SIZE),
                                         (self._send, self._send_iov, namelen)):
                header = headers[i].msg_hdr
                header.msg_name = names + i * NAME_SIZE
                header.msg_namelen = length
                header.msg_iov = ctypes.addressof(iov[i])
                header.msg_iovlen = 1
        # Send header and buffer i point at slot i; a batch where some query gets no answer
        # points later headers elsewhere, then restores these.
        self._recv_template = bytes(self._recv)
        self._send_template = bytes(self._send)
        self._send_iov_template = bytes(self._send_iov)
        self._recv_bytes = memoryview(self._recv).cast("B")
        self._recv_words = self._recv_bytes.cast("I")
        self._send_bytes = memoryview(self._send).cast("B")
        self._send_words = self._send_bytes.cast("I")
        self._send_iov_bytes = memoryview(self._send_iov).cast("B")
        self._send_iov_words = self._send_iov_bytes.cast("Q")
        self._buffer_view = memoryview(self._buffers).cast("B")
        self._buffers_at = buffers
        self._names_at = names
        self._hosts: dict[bytes, str] = {}
        stride = _HDR // 4
        # Slicing a ctypes char array gives bytes in one step; a memoryview slice of the
        # same buffer first builds a view object (twice the CPU of the whole lookup).
        slot_arrays = [(ctypes.c_char * SLOT_SIZE).from_buffer(self._buffers, i * SLOT_SIZE)
                       for i in range(SLOTS)]
        address_at = 4 if sock.family == socket.AF_INET else 8
        address_end = 8 if sock.family == socket.AF_INET else 28  # v6: address and scope id
        network_size = 3 if sock.family == socket.AF_INET else 7  # the RRL's /24 or /56
        self._slots = [(i, i * stride + _MsgHdr.msg_flags.offset // 4,
                        i * stride + _MMsgHdr.msg_len.offset // 4, i * SLOT_SIZE,
                        slot_arrays[i], i * NAME_SIZE + address_at, i * NAME_SIZE + address_end,
                        i * NAME_SIZE + address_at + network_size)
                       for i in range(SLOTS)]

    def readable(self) -> None:
        """Answer what is waiting (event-loop reader callback)."""
        for _ in range(4):
            if self._batch() <= 0:
                return

    def wait_batch(self) -> int:
        """Wait for datagrams (blocking socket), answer what is queued by then; the number
        read, 0 when the socket was shut down, or -1 (errno set) on a timeout or error."""
        return self._batch(MSG_WAITFORONE)

    def _batch(self, receive_flags: int = MSG_DONTWAIT) -> int:
        """One ``recvmmsg``, then one ``sendmmsg``; the number of datagrams read."""
        self._recv_bytes[:] = self._recv_template
        count = self._recvmmsg(self.fd, self._recv, SLOTS, receive_flags, None)
        if count <= 0:
            return count
        cached = self.memo()
        memo_get = cached[0].get if cached is not None else None
        counts: list[int] = cached[1] if cached is not None else []
        lane = cached[2] if cached is not None else None
        limit = self.limiter()
        now = time.monotonic() if limit is not None else 0.0
        respond: Respond | None = None
        words, iov, buffers = self._recv_words, self._send_iov_words, self._buffer_view
        names, hosts = self._names.raw, self._hosts
        answers = 0
        moved = False  # whether some answer is not in the send header of its own slot
        for (i, flags_at, length_at, start, slot, address_at, address_end,
             network_end) in self._slots[:count]:
            if words[flags_at] & MSG_TRUNC:
                moved = True
                continue  # longer than a slot: no DNS query over UDP is; drop it
            length = words[length_at]
            if limit is not None and (verdict := limit(names[address_at:network_end], now)):
                response = slipped(cast(bytes, slot[:length])) if verdict == SLIP else None
            else:
                if memo_get is not None:
                    query: bytes = slot[2:length]  # type: ignore[assignment]  # c_char: bytes
                    entry = memo_get(query)
                    if entry is None:
                        if lane is not None:
                            entry = lane(query)
                    elif entry.__class__ is dict:  # answers per resolver
                        raw = names[address_at:address_end]
                        host = hosts.get(raw)
                        entry = entry.get(host if host is not None else self._host(raw))
                    if entry is not None:
                        body, counter = entry
                        try:
                            counts[counter] += 1
                        except IndexError:  # a counter list of the transport's own, short
                            counts.extend([0] * (counter + 1 - len(counts)))
                            counts[counter] += 1
                        size = len(body)
                        buffers[start + 2:start + 2 + size] = body
                        if moved:
                            self._point(answers, i)
                        iov[answers * 2 + 1] = size + 2
                        answers += 1
                        continue
                if respond is None:
                    respond = self.responder()
                data = cast(bytes, slot[:length])  # a c_char array's slice is bytes
                host = self._host(names[address_at:address_end])
                port = int.from_bytes(names[i * NAME_SIZE + 2:i * NAME_SIZE + 4], "big")
                try:
                    response = respond(data, (host, port))
                except Exception:
                    response = self.failed(data, host)
            if response is None or len(response) > SLOT_SIZE:
                moved = True
                continue
            buffers[start:start + len(response)] = response
            if moved:
                self._point(answers, i)
            iov[answers * 2 + 1] = len(response)
            answers += 1
        self._flush(answers)
        if moved:
            self._send_bytes[:] = self._send_template
            self._send_iov_bytes[:] = self._send_iov_template
        return count

    def _host(self, raw: bytes) -> str:
        """A peer's host string from its raw address bytes, through a memo."""
        host = self._hosts.get(raw)
        if host is None:
            host = _host(raw)
            if len(self._hosts) >= _HOST_MEMO_LIMIT:
                self._hosts.clear()
            self._hosts[raw] = host
        return host

    def _point(self, answer: int, i: int) -> None:
        """Send header ``answer`` sends slot ``i``'s buffer to slot ``i``'s peer."""
        _set_pointer(self._send_words, answer * (_HDR // 4), self._names_at + i * NAME_SIZE)
        self._send_iov_words[answer * 2] = self._buffers_at + i * SLOT_SIZE

    def _flush(self, answers: int) -> None:
        sent = 0
        send_at = ctypes.addressof(self._send)
        while sent < answers:
            done = self._sendmmsg(self.fd, send_at + sent * _HDR, answers - sent, MSG_DONTWAIT)
            if done > 0:
                sent += done
                continue
            if ctypes.get_errno() in (errno.EAGAIN, errno.EWOULDBLOCK, errno.EINTR):
                return  # the socket buffer is full: like datagrams lost on the way
            sent += 1  # this peer is unreachable or refused: skip its answer


def _set_pointer(words: memoryview, at: int, pointer: int) -> None:
    low, high = pointer & 0xFFFFFFFF, pointer >> 32
    words[at], words[at + 1] = (low, high) if sys.byteorder == "little" else (high, low)


def _host(raw: bytes) -> str:
    """'192.0.2.1' from 4 address bytes; 'fe80::1%2' from 16 address bytes + scope id."""
    if len(raw) == 4:
        return socket.inet_ntop(socket.AF_INET, raw)
    host = socket.inet_ntop(socket.AF_INET6, raw[:16])
    scope = int.from_bytes(raw[16:20], sys.byteorder)
    return f"{host}%{scope}" if scope else host
