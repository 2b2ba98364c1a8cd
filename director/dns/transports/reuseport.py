"""Steer UDP queries to the workers of a SO_REUSEPORT group by client subnet or source network.

By default the kernel picks a group's socket by a hash of the peer's address and port, so
a resolver (or a load generator) with few source ports lands unevenly. Worse, every worker
keeps its own caches, so a client subnet that reaches every worker in turn makes each of
them locate and widen it and keep its own copy of the answer.

A classic BPF program attached to the group (``SO_ATTACH_REUSEPORT_CBPF``; the kernel runs
it on the UDP payload, i.e. the DNS message) picks the socket instead:

- a query with an ECS option (the first option of the OPT record that follows a single
  question) goes to ``hash(client /16 or IPv6 /32) % workers``: a subnet is always answered
  by the same worker, so its caches stay warm and hold each subnet once;
- anything else (no ECS, a shorter source prefix, an unusual layout) goes to
  ``hash(source /24 or IPv6 /56) % workers``, read from the IP header: the response rate
  limiter's own key, so each network's token bucket lives in one worker and ``--workers N``
  does not multiply its rate by N; the per-resolver answers cached for queries without ECS
  stay in one worker too. Resolvers are many networks, so they still spread.

That keeps a worker's batches whole (what it saves, measured: ``docs/research/dns-transport.md``).
Limits: an ECS query is steered by its client subnet, so a source sending ECS queries for
many /16s has its rate limited per worker; one resolver network sending more than one
worker can answer is not spread.

An index past the group's size (a worker being replaced) falls back to the kernel's hash;
a datagram too short for the loads the program makes goes by source. UDP DNS carries no per-peer
state, so any worker may answer any datagram: the steering is only about load and caches.
"""

from __future__ import annotations

import ctypes
import socket
import struct

SO_ATTACH_REUSEPORT_CBPF = 51
NAME_LABELS = 30  # labels followed in the question name; longer names go by source

# Classic BPF opcodes (linux/filter.h).
_LD, _LDX, _ALU, _JMP, _RET, _MISC = 0x00, 0x01, 0x04, 0x05, 0x06, 0x07
_W, _H, _B = 0x00, 0x08, 0x10
_IMM, _ABS, _IND, _LEN = 0x00, 0x20, 0x40, 0x80
_ADD, _SUB, _MUL, _AND, _RSH, _MOD, _XOR = 0x00, 0x10, 0x20, 0x50, 0x70, 0x90, 0xA0
_JA, _JEQ, _JGT, _JGE = 0x00, 0x10, 0x20, 0x30
_K, _X, _A = 0x00, 0x08, 0x10
_TAX = 0x00
_SKF_NET_OFF = -0x100000 & 0xFFFFFFFF  # loads relative to the IP header
_GOLDEN = 0x9E3779B1  # Knuth's multiplicative hash constant


def _program(workers: int) -> list[tuple[int, int | str, int | str, int]]:
    """The program as (code, jump-if-true, jump-if-false, k); jumps name a label (classic
    BPF jumps only forward, the conditional ones at most 255 instructions)."""
    p: list[tuple[int, int | str, int | str, int]] = [
        (_LD | _W | _LEN, 0, 0, 0),
        (_JMP | _JGE | _K, 0, "source", 12),  # a header at least
        (_LD | _H | _ABS, 0, 0, 4),  # question count
        (_JMP | _JEQ | _K, 0, "source", 1),
        (_LD | _H | _ABS, 0, 0, 10),  # additional count
        (_JMP | _JEQ | _K, "source", 0, 0),
        (_LDX | _W | _IMM, 0, 0, 12),  # X = the question name
    ]
    for _ in range(NAME_LABELS):  # X = the name's root label
        p += [(_LD | _B | _IND, 0, 0, 0),
              (_JMP | _JEQ | _K, "name_end", 0, 0),
              (_JMP | _JGT | _K, "source", 0, 63),  # a pointer or a bad label
              (_ALU | _ADD | _X, 0, 0, 0),
              (_ALU | _ADD | _K, 0, 0, 1),
              (_MISC | _TAX, 0, 0, 0)]
    p += [(_JMP | _JA, 0, 0, "source"),  # type: ignore[list-item]
          ("name_end",),  # type: ignore[list-item]
          # root(1) type(2) class(2), then the OPT record: root name, type 41, class, TTL,
          # length, then the first option: code 8 (ECS), length, family, source, scope,
          # address; a load past the end would end the program (socket 0), so check first
          (_LD | _W | _LEN, 0, 0, 0),
          (_ALU | _SUB | _X, 0, 0, 0),
          (_JMP | _JGE | _K, 0, "source", 26),  # up to an IPv4 /16
          (_LD | _B | _IND, 0, 0, 5),
          (_JMP | _JEQ | _K, 0, "source", 0),
          (_LD | _H | _IND, 0, 0, 6),
          (_JMP | _JEQ | _K, 0, "source", 41),
          (_LD | _H | _IND, 0, 0, 16),
          (_JMP | _JEQ | _K, 0, "source", 8),
          (_LD | _H | _IND, 0, 0, 20),
          (_JMP | _JEQ | _K, "ipv4", 0, 1),
          (_JMP | _JEQ | _K, 0, "source", 2),
          (_LD | _W | _LEN, 0, 0, 0),
          (_ALU | _SUB | _X, 0, 0, 0),
          (_JMP | _JGE | _K, 0, "source", 28),  # up to an IPv6 /32
          (_LD | _B | _IND, 0, 0, 22),
          (_JMP | _JGE | _K, 0, "source", 32),
          (_LD | _W | _IND, 0, 0, 24),  # the client's IPv6 /32
          (_JMP | _JA, 0, 0, "hash"),  # type: ignore[list-item]
          ("ipv4",),  # type: ignore[list-item]
          (_LD | _B | _IND, 0, 0, 22),
          (_JMP | _JGE | _K, 0, "source", 16),
          (_LD | _H | _IND, 0, 0, 24),  # the client's IPv4 /16
          (_JMP | _JA, 0, 0, "hash"),  # type: ignore[list-item]
          ("source",),  # type: ignore[list-item]
          # not ECS: the source's /24 (IPv4) or /56 (IPv6), from the IP header
          (_LD | _B | _ABS, 0, 0, _SKF_NET_OFF),
          (_ALU | _RSH | _K, 0, 0, 4),  # the IP version
          (_JMP | _JEQ | _K, "ipv6_source", 0, 6),
          (_LD | _W | _ABS, 0, 0, _SKF_NET_OFF + 12),
          (_ALU | _AND | _K, 0, 0, 0xFFFFFF00),
          (_JMP | _JA, 0, 0, "hash"),  # type: ignore[list-item]
          ("ipv6_source",),  # type: ignore[list-item]
          (_LD | _W | _ABS, 0, 0, _SKF_NET_OFF + 12),
          (_ALU | _AND | _K, 0, 0, 0xFFFFFF00),
          (_MISC | _TAX, 0, 0, 0),
          (_LD | _W | _ABS, 0, 0, _SKF_NET_OFF + 8),
          (_ALU | _XOR | _X, 0, 0, 0),
          ("hash",),  # type: ignore[list-item]
          (_ALU | _MUL | _K, 0, 0, _GOLDEN),
          (_ALU | _RSH | _K, 0, 0, 16),
          (_ALU | _MOD | _K, 0, 0, workers),
          (_RET | _A, 0, 0, 0)]
    return p


def assemble(workers: int) -> bytes:
    """The program's ``struct sock_filter`` array, labels resolved to relative jumps."""
    listing = _program(workers)
    labels: dict[str, int] = {}
    code: list[tuple] = []
    for item in listing:
        if len(item) == 1:
            labels[item[0]] = len(code)
        else:
            code.append(item)
    out = []
    for at, (op, true, false, k) in enumerate(code):
        if op == _JMP | _JA:
            k, true, false = labels[k] - at - 1, 0, 0
        true = labels[true] - at - 1 if isinstance(true, str) else true
        false = labels[false] - at - 1 if isinstance(false, str) else false
        if not (0 <= true < 256 and 0 <= false < 256):
            raise ValueError(f"jump out of range at instruction {at}")
        out.append(struct.pack("HBBI", op, true, false, k))
    return b"".join(out)


def steer_by_subnet(sock: socket.socket, workers: int) -> bool:
    """Attach the steering program to ``sock``'s reuseport group of ``workers`` sockets;
    False where the kernel refuses it (the default hash stays)."""
    code = ctypes.create_string_buffer(assemble(workers))
    fprog = struct.pack("HxxxxxxQ", len(code.raw) // 8, ctypes.addressof(code))
    try:
        sock.setsockopt(socket.SOL_SOCKET, SO_ATTACH_REUSEPORT_CBPF, fprog)
    except OSError:
        return False
    return True
