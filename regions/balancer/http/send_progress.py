# SPDX-License-Identifier: Apache-2.0
"""How much of what the balancer wrote to a client the client has taken.

Bytes written to a transport wait first in its buffer, then in the kernel's send queue
until the client's TCP stack acknowledges them; a client that stops reading stops
acknowledging once its receive window is full. The kernel's queue can hold megabytes (send
buffers grow on their own), which a stalled client would take minutes of token stream to
fill, so the queue is read too: on Linux, ``SIOCOUTQ`` gives the bytes it holds unacknowledged.
Elsewhere only the transport's buffer is seen, and a stall shows once the kernel's queue is
full.

    taken = written - transport buffer - kernel send queue

``SendProgress.stalled(now)`` is true once bytes are owed to the client and ``taken`` has
not grown for ``stall_s`` seconds.
"""

from __future__ import annotations

import asyncio
import fcntl
import struct
import termios

_OUTQ = getattr(termios, "TIOCOUTQ", None)  # SIOCOUTQ on Linux sockets
_INT = struct.Struct("i")


def kernel_unacked(transport: asyncio.Transport) -> int:
    """Bytes the kernel holds of the transport's socket not yet acknowledged (0 where it
    cannot tell)."""
    sock = transport.get_extra_info("socket")
    if _OUTQ is None or sock is None:
        return 0
    try:
        return int(_INT.unpack(fcntl.ioctl(sock.fileno(), _OUTQ, b"\0" * _INT.size))[0])
    except (OSError, ValueError):
        return 0


class SendProgress:
    """What a client has taken of one answer, and since when it has taken nothing."""

    __slots__ = ("checked_at", "progress_at", "stall_s", "taken", "transport", "written")

    def __init__(self, transport: asyncio.Transport, stall_s: float, now: float) -> None:
        self.transport = transport
        self.stall_s = stall_s
        # what is queued already (the answer's head) counts as written, none of it taken
        self.written = transport.get_write_buffer_size() + kernel_unacked(transport)
        self.taken = 0
        self.progress_at = now
        self.checked_at = now

    def wrote(self, size: int) -> None:
        self.written += size

    def check(self, now: float) -> None:
        """Read how much the client has taken (a system call: at most twice per
        ``stall_s`` on the data path, see ``due``)."""
        self.checked_at = now
        queued = self.transport.get_write_buffer_size() + kernel_unacked(self.transport)
        taken = self.written - queued
        if taken > self.taken or queued == 0:
            self.progress_at = now
        self.taken = max(self.taken, taken)

    def due(self, now: float) -> bool:
        return now - self.checked_at >= self.stall_s / 2

    def stalled(self, now: float) -> bool:
        """Bytes are owed and none was taken for ``stall_s`` (as of the last check)."""
        return self.written > self.taken and now - self.progress_at >= self.stall_s
