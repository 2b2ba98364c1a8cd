"""Spread UDP queries evenly over the workers of a SO_REUSEPORT group.

By default the kernel picks a group's socket by a hash of the peer's address and port, so
a resolver (or a load generator) with few source ports lands unevenly: with 10 sockets on
2 workers, splits of 70/30 are common, and the less-loaded worker then wakes for a few
queries at a time, which costs a Python server more per query than a full batch. A
classic BPF program attached to the group (``SO_ATTACH_REUSEPORT_CBPF``) picks a socket at
random per datagram instead: ``A = random(); A %= workers; return A``. UDP DNS carries no
per-peer state, so any worker may answer any datagram. An index past the group's size
(a worker being replaced) falls back to the kernel's hash.
"""

from __future__ import annotations

import ctypes
import socket
import struct

SO_ATTACH_REUSEPORT_CBPF = 51
_SKF_AD_OFF = -0x1000
_SKF_AD_RANDOM = 56
_BPF_LD_W_ABS = 0x00 | 0x00 | 0x20  # BPF_LD | BPF_W | BPF_ABS
_BPF_ALU_MOD_K = 0x04 | 0x90 | 0x00  # BPF_ALU | BPF_MOD | BPF_K
_BPF_RET_A = 0x06 | 0x10  # BPF_RET | BPF_A


def _program(workers: int) -> bytes:
    instructions = ((_BPF_LD_W_ABS, (_SKF_AD_OFF + _SKF_AD_RANDOM) & 0xFFFFFFFF),
                    (_BPF_ALU_MOD_K, workers),
                    (_BPF_RET_A, 0))
    return b"".join(struct.pack("HBBI", code, 0, 0, k) for code, k in instructions)


def spread_evenly(sock: socket.socket, workers: int) -> bool:
    """Attach the random-pick program to ``sock``'s reuseport group; False where the kernel
    refuses it (then the default hash stays)."""
    code = ctypes.create_string_buffer(_program(workers))
    fprog = struct.pack("HxxxxxxQ", len(code.raw) // 8, ctypes.addressof(code))
    try:
        sock.setsockopt(socket.SOL_SOCKET, SO_ATTACH_REUSEPORT_CBPF, fprog)
    except OSError:
        return False
    return True
