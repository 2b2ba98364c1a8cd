# SPDX-License-Identifier: Apache-2.0
"""``relay``: real HTTP on loopback, an upstream that streams, ends early or is left by the
client, and a front server relaying it."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import aiohttp
import pytest
from aiohttp import web

from regions.balancer.http.relay import RelayEnd, relay, response_for
from regions.balancer.http.upstream_pool import UpstreamPool

CHUNKS = [b"data: one\n\n", b"data: two\n\n", b"data: [DONE]\n\n"]


@asynccontextmanager
async def serving(app: web.Application) -> AsyncIterator[str]:
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    host, port = runner.addresses[0][:2]
    try:
        yield f"http://{host}:{port}"
    finally:
        await runner.cleanup()


class Upstream:
    """Streams ``CHUNKS`` 20 ms apart; ``fail_after`` chunks it drops the connection."""

    def __init__(self, fail_after: int | None = None, linger: float = 0.0) -> None:
        self.fail_after = fail_after
        self.linger = linger  # seconds between the last chunk and the end of the body
        self.closed_early = asyncio.Event()

    async def handle(self, request: web.Request) -> web.StreamResponse:
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        try:
            for i, chunk in enumerate(CHUNKS):
                if i == self.fail_after:
                    assert request.transport is not None
                    request.transport.abort()
                    return resp
                await resp.write(chunk)
                await asyncio.sleep(0.02)
            await asyncio.sleep(self.linger)
            await resp.write_eof()
        except (ConnectionResetError, asyncio.CancelledError):
            self.closed_early.set()
            raise
        return resp


@asynccontextmanager
async def front_of(upstream: Upstream) -> AsyncIterator[tuple[str, list, list]]:
    """(front URL, the RelayEnd of each request, the chunks seen by ``on_chunk``)."""
    ends: list[RelayEnd] = []
    seen: list[bytes] = []
    up_app = web.Application()
    up_app.router.add_get("/", upstream.handle)
    async with serving(up_app) as up_url:
        pool = UpstreamPool(up_url, connect_timeout_s=2, read_timeout_s=10)

        async def handle(request: web.Request) -> web.StreamResponse:
            answer = await pool.request("GET", "/", (), b"")
            resp = response_for(answer, {"x-test": "relayed"})
            ends.append(await relay(request, answer, resp,
                                    lambda chunk, _now: seen.append(chunk)))
            return resp

        front = web.Application()
        front.router.add_get("/", handle)
        async with serving(front) as url:
            yield url, ends, seen
        await pool.close()


async def test_a_whole_stream_is_relayed_chunk_by_chunk() -> None:
    async with front_of(Upstream()) as (url, ends, seen), aiohttp.ClientSession() as client, \
            client.get(url) as resp:
        assert resp.headers["x-test"] == "relayed"
        assert resp.content_type == "text/event-stream"
        received = [await resp.content.readuntil(b"\n\n") for _ in CHUNKS]
        assert await resp.read() == b""
    assert received == CHUNKS
    assert seen == CHUNKS
    assert ends == [RelayEnd.FINISHED]


async def test_an_upstream_failing_mid_stream_truncates_the_clients_answer() -> None:
    async with front_of(Upstream(fail_after=1)) as (url, ends, seen), \
            aiohttp.ClientSession() as client, client.get(url) as resp:
        assert await resp.content.readuntil(b"\n\n") == CHUNKS[0]
        with pytest.raises(aiohttp.ClientPayloadError):
            await resp.read()  # not a clean end: the client knows it is cut short
    assert ends == [RelayEnd.UPSTREAM_FAILED]
    assert seen == CHUNKS[:1]


async def test_a_client_leaving_mid_stream_closes_the_upstream_connection() -> None:
    upstream = Upstream()
    async with front_of(upstream) as (url, ends, _seen), aiohttp.ClientSession() as client:
        async with client.get(url) as resp:
            assert await resp.content.readuntil(b"\n\n") == CHUNKS[0]
            resp.close()  # drop the connection mid-stream
        async with asyncio.timeout(5):
            await upstream.closed_early.wait()  # the GPU server's sequence is aborted
    assert RelayEnd.FINISHED not in ends


async def test_a_client_leaving_after_the_last_chunk_is_a_whole_answer_not_an_error() -> None:
    """An SSE client closes once it reads ``[DONE]``; the end of the body comes later."""
    async with front_of(Upstream(linger=0.3)) as (url, ends, seen), \
            aiohttp.ClientSession() as client:
        async with client.get(url) as resp:
            for chunk in CHUNKS:
                assert await resp.content.readuntil(b"\n\n") == chunk
            resp.close()  # gone after [DONE], before the terminating chunk
        async with asyncio.timeout(5):
            while not ends:
                await asyncio.sleep(0.02)
    assert ends == [RelayEnd.CLIENT_GONE_AT_END]
    assert seen == CHUNKS


async def test_a_slow_client_pauses_reading_from_upstream_and_gets_every_byte() -> None:
    """The client stops reading: the balancer stops reading the server (no unbounded
    buffer in between), and once the client reads again the whole answer arrives."""
    piece, pieces = b"z" * 65536, 512  # 32 MiB
    written = 0

    async def big(request: web.Request) -> web.StreamResponse:
        nonlocal written
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        for _ in range(pieces):
            await resp.write(piece)
            written += len(piece)
        await resp.write_eof()
        return resp

    up_app = web.Application()
    up_app.router.add_get("/", big)
    ends: list[RelayEnd] = []
    async with serving(up_app) as up_url:
        pool = UpstreamPool(up_url, connect_timeout_s=2, read_timeout_s=10)

        async def handle(request: web.Request) -> web.StreamResponse:
            answer = await pool.request("GET", "/", (), b"")
            resp = response_for(answer, {})
            ends.append(await relay(request, answer, resp))
            return resp

        front = web.Application()
        front.router.add_get("/", handle)
        async with serving(front) as url:
            host, port = url.removeprefix("http://").split(":")
            reader, writer = await asyncio.open_connection(host, int(port), limit=2**16)
            writer.write(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
            await reader.readuntil(b"\r\n\r\n")
            await asyncio.sleep(1.0)  # not reading
            stalled_at = written
            received = 0
            async with asyncio.timeout(30):
                while True:
                    line = await reader.readuntil(b"\r\n")
                    size = int(line.strip(), 16)
                    if size == 0:
                        break
                    received += len(await reader.readexactly(size + 2)) - 2
            writer.close()
        await pool.close()
    assert stalled_at < 16 * 2**20, stalled_at  # kernel buffers at most, not the answer
    assert received == len(piece) * pieces
    assert ends == [RelayEnd.FINISHED]
