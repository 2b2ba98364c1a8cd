# SPDX-License-Identifier: Apache-2.0
"""Clients that send slowly are cut, over raw sockets to a real balancer: headers dribbled
a byte at a time (slowloris) and a connection that sends nothing get 408 and a close after
the header deadline, a body that stalls gets 408 and a close after the body deadline; a
kept-alive connection may wait between requests, and a request sent at an ordinary pace is
served."""

from __future__ import annotations

import asyncio
import json
import socket
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from regions.balancer import Balancer, BalancerConfig
from regions.balancer.http.client_timeouts import ClientTimeouts
from tests.balancer.helpers import completion, stack

DEADLINE_S = 2.0
GENEROUS_S = 20.0  # the cut comes within this, where the slow client would take far longer


@asynccontextmanager
async def guarded_balancer() -> AsyncIterator[Balancer]:
    config = BalancerConfig(scrape_every_s=0, client=ClientTimeouts(headers_s=DEADLINE_S,
                                                                     body_s=DEADLINE_S))
    async with stack((1.0,), time_scale=50.0, config=config) as (_, balancer, _):
        yield balancer


async def connect(balancer: Balancer) -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setblocking(False)
    await asyncio.get_running_loop().sock_connect(sock, ("127.0.0.1", balancer.port))
    return sock


async def read_until_closed(sock: socket.socket) -> bytes:
    loop = asyncio.get_running_loop()
    received = b""
    try:
        while data := await loop.sock_recv(sock, 65536):
            received += data
    except ConnectionResetError:  # a byte sent after the close: read what came before
        pass
    return received


def request_bytes(body: dict[str, object]) -> tuple[bytes, bytes]:
    payload = json.dumps(body).encode()
    head = (f"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n"
            f"Content-Type: application/json\r\nContent-Length: {len(payload)}\r\n\r\n")
    return head.encode(), payload


def cut(balancer: Balancer, phase: str) -> float:
    return balancer.metrics.slow_requests.labels(phase)._value.get()


async def test_headers_dribbled_a_byte_at_a_time_are_cut() -> None:
    async with guarded_balancer() as balancer:
        sock = await connect(balancer)
        loop = asyncio.get_running_loop()
        head, _ = request_bytes(completion(2))
        closed = asyncio.ensure_future(read_until_closed(sock))
        try:
            async with asyncio.timeout(GENEROUS_S):
                for byte in head:  # about 40 s of head at this pace
                    if closed.done():
                        break
                    try:
                        await loop.sock_sendall(sock, bytes([byte]))
                    except (BrokenPipeError, ConnectionResetError):
                        break
                    await asyncio.sleep(DEADLINE_S / 4)
                answer = await closed
        finally:
            sock.close()
        assert answer.startswith(b"HTTP/1.1 408 ")
        assert cut(balancer, "headers") == 1


async def test_a_connection_that_sends_nothing_is_closed() -> None:
    async with guarded_balancer() as balancer:
        sock = await connect(balancer)
        try:
            async with asyncio.timeout(GENEROUS_S):
                answer = await read_until_closed(sock)
        finally:
            sock.close()
        assert answer.startswith(b"HTTP/1.1 408 ")


async def test_a_body_that_stalls_is_cut_with_408() -> None:
    async with guarded_balancer() as balancer:
        sock = await connect(balancer)
        head, payload = request_bytes(completion(2))
        try:
            await asyncio.get_running_loop().sock_sendall(sock, head + payload[:10])
            async with asyncio.timeout(GENEROUS_S):
                answer = await read_until_closed(sock)  # the rest of the body never comes
        finally:
            sock.close()
        assert answer.startswith(b"HTTP/1.1 408 ")
        assert b"Connection: close" in answer
        assert b"no byte of the request body" in answer
        assert cut(balancer, "body") == 1
        assert balancer.pool.in_flight() == 0


async def test_a_kept_alive_connection_may_wait_between_requests() -> None:
    """Two requests on one connection, the second sent 1.5 header deadlines after the first
    (the deadline runs from a request's first byte, not from the last answer); its body
    sent in pieces, each within the body deadline."""
    async with guarded_balancer() as balancer:
        sock = await connect(balancer)
        loop = asyncio.get_running_loop()
        head, payload = request_bytes(completion(2, stream=False))
        try:
            for n in range(2):
                if n:  # a pause longer than the header deadline, between requests
                    await asyncio.sleep(1.5 * DEADLINE_S)
                await loop.sock_sendall(sock, head)
                for start in range(0, len(payload), 40):
                    await asyncio.sleep(DEADLINE_S / 8)
                    await loop.sock_sendall(sock, payload[start:start + 40])
                answer = b""
                async with asyncio.timeout(GENEROUS_S):
                    while b'"usage"' not in answer:
                        data = await loop.sock_recv(sock, 65536)
                        assert data, f"closed after {answer!r}"
                        answer += data
                assert answer.startswith(b"HTTP/1.1 200 ")
        finally:
            sock.close()
        assert cut(balancer, "headers") == cut(balancer, "body") == 0
