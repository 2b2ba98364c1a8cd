# SPDX-License-Identifier: Apache-2.0
"""``UpstreamPool``: the data path's HTTP/1.1 client, against real sockets on loopback.

A scripted server sends exact bytes (split wherever a test says) so framing is tested at
every byte boundary; an aiohttp server covers keep-alive and ordinary answers.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager

import pytest
from aiohttp import web

from regions.balancer.http.upstream import BodySink, UpstreamProtocolError
from regions.balancer.http.upstream_pool import UpstreamPool, _request_bytes


class Scripted:
    """Answers each request on a connection with the next of ``answers`` (each a list of
    byte pieces, written 5 ms apart), then closes if ``close_after`` says so."""

    def __init__(self, answers: Sequence[Sequence[bytes]], close_after: bool = False) -> None:
        self.answers = list(answers)
        self.close_after = close_after
        self.connections = 0
        self.requests: list[bytes] = []

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            while self.answers:
                head = await reader.readuntil(b"\r\n\r\n")
                length = 0
                for line in head.split(b"\r\n"):
                    if line.lower().startswith(b"content-length:"):
                        length = int(line.split(b":")[1])
                self.requests.append(head + await reader.readexactly(length))
                for piece in self.answers.pop(0):
                    writer.write(piece)
                    await writer.drain()
                    await asyncio.sleep(0.005)
                if self.close_after:
                    break
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()


@asynccontextmanager
async def scripted(server: Scripted) -> AsyncIterator[str]:
    srv = await asyncio.start_server(server.handle, "127.0.0.1", 0)
    port = srv.sockets[0].getsockname()[1]
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        srv.close()


def pool_for(url: str, read_timeout_s: float = 5.0) -> UpstreamPool:
    return UpstreamPool(url, connect_timeout_s=1.0, read_timeout_s=read_timeout_s)


class Recorder(BodySink):
    def __init__(self) -> None:
        self.pieces: list[bytes] = []
        self.ended: asyncio.Future[BaseException | None] = (
            asyncio.get_running_loop().create_future())

    def data(self, payload: bytes) -> None:
        self.pieces.append(payload)

    def end(self, error: BaseException | None) -> None:
        self.ended.set_result(error)


CHUNKED = (b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
           b"Transfer-Encoding: chunked\r\n\r\n"
           b"b\r\ndata: one\n\n\r\n"
           b"B;ext=1\r\ndata: two\n\n\r\n"
           b"e\r\ndata: [DONE]\n\n\r\n"
           b"0\r\nX-Trailer: t\r\n\r\n")
CHUNKED_BODY = b"data: one\n\ndata: two\n\ndata: [DONE]\n\n"


async def test_chunked_answers_split_at_every_byte_are_decoded_whole() -> None:
    cuts = range(1, len(CHUNKED))
    server = Scripted([[CHUNKED[:cut], CHUNKED[cut:]] for cut in cuts])
    async with scripted(server) as url:
        pool = pool_for(url)
        for cut in cuts:
            answer = await pool.request("POST", "/v1/completions", (), b"{}")
            sink = Recorder()
            answer.stream(sink)
            assert await sink.ended is None, cut
            assert b"".join(sink.pieces) == CHUNKED_BODY, cut
            assert answer.content_type == "text/event-stream"
            answer.release()
        assert server.connections == 1  # every answer came back on one kept-alive socket
        await pool.close()


async def test_length_close_delimited_empty_and_interim_answers() -> None:
    answers = [
        [b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhel", b"lo"],
        [b"HTTP/1.1 204 No Content\r\n\r\n"],
        [b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n"],
        [b"HTTP/1.0 200 OK\r\n\r\nuntil ", b"close"],  # no length: the body ends at close
    ]
    async with scripted(Scripted(answers)) as url:
        pool = pool_for(url)
        bodies = []
        for _ in answers:
            answer = await pool.request("POST", "/", (), b"")
            bodies.append((answer.status, await answer.read()))
            answer.release()
        assert bodies == [(200, b"hello"), (204, b""), (200, b""), (200, b"until close")]
        assert pool.idle == 0  # the close-delimited answer's socket is not reused
        await pool.close()


async def test_a_stale_kept_alive_connection_is_replaced_not_reported() -> None:
    one = [b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"]
    server = Scripted([one, one], close_after=True)  # closes each socket after one answer
    async with scripted(server) as url:
        pool = pool_for(url)
        for _ in range(2):
            answer = await pool.request("POST", "/", (), b"")
            assert await answer.read() == b"ok"
            answer.release()
            await asyncio.sleep(0.05)  # the server's close arrives while the socket idles
        assert server.connections == 2
        await pool.close()


async def test_connect_failures_and_silence_are_os_errors() -> None:
    free = await asyncio.start_server(lambda r, w: None, "127.0.0.1", 0)
    port = free.sockets[0].getsockname()[1]
    free.close()
    await free.wait_closed()
    with pytest.raises(ConnectionError):
        await pool_for(f"http://127.0.0.1:{port}").request("POST", "/", (), b"")

    async def silent(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await asyncio.sleep(5)

    srv = await asyncio.start_server(silent, "127.0.0.1", 0)
    url = f"http://127.0.0.1:{srv.sockets[0].getsockname()[1]}"
    with pytest.raises(TimeoutError):
        async with asyncio.timeout(3):
            await pool_for(url, read_timeout_s=0.2).request("POST", "/", (), b"")
    srv.close()


@pytest.mark.parametrize("answer", [
    [b"SPDY/3 200 OK\r\n\r\n"],
    [b"HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n"],
    [b"HTTP/1.1 200 OK\r\nbad header line\r\n\r\n"],
])
async def test_a_malformed_head_is_a_protocol_error(answer: list[bytes]) -> None:
    async with scripted(Scripted([answer])) as url:
        with pytest.raises(UpstreamProtocolError):
            await pool_for(url).request("POST", "/", (), b"")


@pytest.mark.parametrize("pieces", [
    [b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\nzz\r\n"],  # bad size
    [b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nab"],  # closed mid-chunk
    [b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nabc"],  # closed short of its length
])
async def test_a_body_cut_short_or_malformed_ends_with_an_error(pieces: list[bytes]) -> None:
    async with scripted(Scripted([pieces], close_after=True)) as url:
        pool = pool_for(url)
        answer = await pool.request("POST", "/", (), b"")
        sink = Recorder()
        answer.stream(sink)
        async with asyncio.timeout(3):
            error = await sink.ended
        assert isinstance(error, ConnectionError)
        answer.close()
        assert pool.open == 0


async def test_read_with_a_limit_stops_there() -> None:
    big = b"x" * 100_000
    answer_bytes = b"HTTP/1.1 502 Bad Gateway\r\nContent-Length: %d\r\n\r\n%b" % (len(big), big)
    async with scripted(Scripted([[answer_bytes]])) as url:
        pool = pool_for(url)
        answer = await pool.request("POST", "/", (), b"")
        assert answer.status == 502
        assert await answer.read(1000) == b"x" * 1000
        answer.close()


def test_request_bytes_set_length_and_host_and_refuse_line_breaks() -> None:
    wire = _request_bytes("POST", "/v1/chat/completions?x=1", b"10.0.0.5:8000",
                          [("Content-Type", "application/json"), ("Content-Length", "999")],
                          b'{"a":1}')
    head, _, body = wire.partition(b"\r\n\r\n")
    lines = head.split(b"\r\n")
    assert lines[0] == b"POST /v1/chat/completions?x=1 HTTP/1.1"
    assert b"Content-Length: 7" in lines and b"Content-Length: 999" not in lines
    assert b"Host: 10.0.0.5:8000" in lines
    assert body == b'{"a":1}'
    overridden = _request_bytes("POST", "/", b"sibling:80", [("Host", "api.example.com")], b"")
    assert b"Host: api.example.com" in overridden and b"sibling" not in overridden
    with pytest.raises(ValueError, match="line break"):
        _request_bytes("POST", "/", b"h", [("X-Evil", "a\r\nInjected: 1")], b"")


async def test_keep_alive_with_an_aiohttp_server_and_a_base_path() -> None:
    seen: list[str] = []

    async def echo(request: web.Request) -> web.Response:
        seen.append(request.path_qs)
        return web.json_response({"len": len(await request.read()), "host": request.host})

    app = web.Application()
    app.router.add_post("/{tail:.*}", echo)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    pool = pool_for(f"http://127.0.0.1:{port}/base/")
    try:
        for size in (0, 10, 70_000):
            answer = await pool.request("POST", "/v1/embeddings?q=1", (), b"y" * size)
            assert answer.status == 200
            assert b'"len": %d' % size in await answer.read()
            answer.release()
        assert seen == ["/base/v1/embeddings?q=1"] * 3
        assert pool.open == 1 and pool.idle == 1
    finally:
        await pool.close()
        await runner.cleanup()


async def test_a_request_cancelled_before_its_head_closes_the_connection() -> None:
    """The client left while the GPU server was still queueing or prefilling: closing the
    socket is how the server learns to drop the sequence."""
    dropped = asyncio.Event()

    async def slow(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        if await reader.read(1) == b"":
            dropped.set()
        writer.close()

    srv = await asyncio.start_server(slow, "127.0.0.1", 0)
    pool = pool_for(f"http://127.0.0.1:{srv.sockets[0].getsockname()[1]}")
    task = asyncio.create_task(pool.request("POST", "/", (), b""))
    await asyncio.sleep(0.1)
    task.cancel()
    async with asyncio.timeout(3):
        await dropped.wait()
    assert pool.open == 0
    srv.close()


async def test_bytes_on_an_idle_connection_retire_it() -> None:
    answer = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"
    parting = b"HTTP/1.1 408 Request Timeout\r\nContent-Length: 0\r\n\r\n"
    async with scripted(Scripted([[answer, parting], [answer]])) as url:
        pool = pool_for(url)
        first = await pool.request("POST", "/", (), b"")
        assert await first.read() == b"ok"
        first.release()
        await asyncio.sleep(0.1)  # the 408 arrives while the socket idles
        assert pool.idle == 0
        second = await pool.request("POST", "/", (), b"")
        assert await second.read() == b"ok"
        await pool.close()
