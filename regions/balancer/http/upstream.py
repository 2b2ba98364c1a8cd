# SPDX-License-Identifier: Apache-2.0
"""HTTP/1.1 to one GPU server for the inference data path: keep-alive connections, the
response head parsed once, each piece of the body handed to a sink from the protocol's
``data_received``.

Why not aiohttp's client here: each body read through it costs a future, a task wake-up
and a ``StreamReader`` pass, and a streamed answer is one read per token; in the proxy
benchmark (``bench/proxy_overhead.py --concurrency``) that was most of the balancer's CPU
per token. Here a token goes from the GPU server's socket to the client's in one callback,
the way HAProxy forwards. The engine scraper and the sibling-region overflow keep aiohttp.

``UpstreamPool.request`` sends one request and returns an ``UpstreamResponse`` once its head
has arrived; the body is then either streamed (``UpstreamResponse.stream``) or read
(``read``). Failures are ``ConnectionError`` (refused, reset, closed mid-answer, a malformed
answer) or ``TimeoutError`` (connect, or no byte for ``read_timeout_s``): both are
``OSError``, as the proxy's retry and failure paths expect.
"""

from __future__ import annotations

import asyncio
from typing import Protocol

from multidict import CIMultiDictProxy

from regions.balancer.http.response_head import UpstreamProtocolError, keeps_alive, parse_head

MAX_HEAD_BYTES = 64 * 1024
MAX_CHUNK_LINE = 4096
NO_BODY_STATUS = frozenset({204, 304})


class BodySink:
    """Receives a body as it arrives: ``data`` per piece (framing removed), then ``end``
    once, with ``None`` for a whole body or the error that cut it short."""

    def data(self, payload: bytes) -> None:  # pragma: no cover - interface
        raise NotImplementedError

    def end(self, error: BaseException | None) -> None:  # pragma: no cover - interface
        raise NotImplementedError


class _Collect(BodySink):
    """A sink that keeps up to ``limit`` bytes (for error bodies and plain answers)."""

    def __init__(self, limit: int | None) -> None:
        self.parts: list[bytes] = []
        self.size = 0
        self.limit = limit
        self.done: asyncio.Future[None] = asyncio.get_running_loop().create_future()

    def data(self, payload: bytes) -> None:
        if self.limit is None or self.size < self.limit:
            self.parts.append(payload)
            self.size += len(payload)
        if self.limit is not None and self.size >= self.limit and not self.done.done():
            self.done.set_result(None)

    def end(self, error: BaseException | None) -> None:
        if self.done.done():
            return
        if error is None:
            self.done.set_result(None)
        else:
            self.done.set_exception(error)


class ConnectionOwner(Protocol):
    """What a connection needs of the pool it belongs to (``upstream_pool.UpstreamPool``)."""

    url: str
    read_timeout_s: float
    _idle: list[Connection]

    def _forget(self, conn: Connection) -> None: ...


class Connection(asyncio.Protocol):
    """One TCP connection; one request at a time (no pipelining)."""

    def __init__(self, pool: ConnectionOwner) -> None:
        self.pool = pool
        self.loop = asyncio.get_running_loop()
        self.transport: asyncio.Transport | None = None
        self.closed = False
        self.idle_since = 0.0
        self._reset()

    def _reset(self) -> None:
        self.head: asyncio.Future[UpstreamResponse] | None = None
        self.response: UpstreamResponse | None = None
        self.sink: BodySink | None = None
        self.held: list[bytes] = []  # body pieces that came before a sink
        self.arrived: asyncio.Future[None] | None = None  # set by the first piece or the end
        self.ended = False  # the body is whole or cut short (then ``error`` says why)
        self.error: BaseException | None = None
        self.received = 0
        self._buf = b""
        self._framing = ""  # "length", "chunked", "close" or "none"
        self._remaining = 0
        self._chunk_crlf = False
        self._trailer = False
        self._last_read = 0.0
        self._timer: asyncio.TimerHandle | None = None
        self.keep_alive = False

    # -- asyncio.Protocol ----------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self.pool._forget(self)
        if self._framing == "close" and not self.ended and exc is None:
            self._finish(None)
            return
        if self.head is not None and not self.head.done():
            self.head.set_exception(
                ConnectionError(f"{self.pool.url}: connection closed before an answer"
                                + (f" ({exc})" if exc else ""))
            )
        elif not self.ended and self.response is not None:
            self._finish(ConnectionError(f"{self.pool.url}: connection closed mid-answer"))
        self._stop_timer()

    def data_received(self, data: bytes) -> None:
        self._last_read = self.loop.time()
        self.received += len(data)
        if self.head is None:  # bytes while idle (a server's parting 408): not reusable
            self.abort()
            return
        try:
            if self.response is None:
                self._head(data)
            else:
                self._body(data)
        except UpstreamProtocolError as exc:
            self._fail(exc)

    def eof_received(self) -> bool:
        return False  # close our side too

    # -- request -------------------------------------------------------------------------

    def send(self, request: bytes) -> asyncio.Future[UpstreamResponse]:
        assert self.transport is not None
        self.head = self.loop.create_future()
        self._last_read = self.loop.time()
        self._timer = self.loop.call_later(self.pool.read_timeout_s, self._check_timeout)
        self.transport.write(request)
        return self.head

    def _check_timeout(self) -> None:
        timeout = self.pool.read_timeout_s
        quiet = self.loop.time() - self._last_read
        if quiet < timeout:
            self._timer = self.loop.call_later(timeout - quiet, self._check_timeout)
            return
        self._timer = None
        self._fail(TimeoutError(f"{self.pool.url}: no byte for {timeout:g} s"))

    def _stop_timer(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _fail(self, error: BaseException) -> None:
        if self.head is not None and not self.head.done():
            self.head.set_exception(error)
        elif not self.ended:
            self._finish(error)
        self.abort()

    def abort(self) -> None:
        self.closed = True
        self.pool._forget(self)
        self._stop_timer()
        if self.transport is not None:
            self.transport.abort()

    # -- response head -------------------------------------------------------------------

    def _head(self, data: bytes) -> None:
        buf = self._buf + data if self._buf else data
        while True:
            end = buf.find(b"\r\n\r\n")
            if end < 0:
                if len(buf) > MAX_HEAD_BYTES:
                    raise UpstreamProtocolError(f"{self.pool.url}: response head too large")
                self._buf = buf
                return
            status, reason, version, headers = parse_head(buf[:end])
            buf = buf[end + 4:]
            if 100 <= status < 200:  # an interim answer (100 Continue, 103): skip it
                continue
            break
        self._buf = b""
        self.keep_alive = keeps_alive(version, headers)
        if status in NO_BODY_STATUS:
            self._framing = "none"
        elif "chunked" in headers.get("transfer-encoding", "").lower():
            self._framing = "chunked"
        elif "content-length" in headers:
            try:
                self._remaining = int(headers["content-length"])
            except ValueError:
                raise UpstreamProtocolError(
                    f"{self.pool.url}: bad Content-Length {headers['content-length']!r}"
                ) from None
            if self._remaining < 0:
                raise UpstreamProtocolError(f"{self.pool.url}: negative Content-Length")
            self._framing = "length"
        else:
            self._framing = "close"
            self.keep_alive = False
        self.response = UpstreamResponse(self, status, reason, CIMultiDictProxy(headers))
        assert self.head is not None
        self.head.set_result(self.response)
        if self._framing == "none" or (self._framing == "length" and not self._remaining):
            self._finish(None)
        elif buf:
            self._body(buf)

    # -- response body -------------------------------------------------------------------

    def _body(self, data: bytes) -> None:
        if self.ended:
            return  # bytes after the answer: the connection will not be reused
        framing = self._framing
        if framing == "chunked":
            payload, done = self._dechunk(data)
        elif framing == "length":
            if len(data) >= self._remaining:
                payload, done = data[: self._remaining], True
                self._remaining = 0
            else:
                payload, done = data, False
                self._remaining -= len(data)
        else:
            payload, done = data, False
        if payload:
            sink = self.sink
            if sink is None:
                self.held.append(payload)
                self._arrive()
            else:
                sink.data(payload)
        if done:
            self._finish(None)

    def _dechunk(self, data: bytes) -> tuple[bytes, bool]:
        """The payload in ``data`` (chunk framing removed), and whether the body ended."""
        buf = self._buf + data if self._buf else data
        self._buf = b""
        pieces: list[bytes] = []
        pos, size = 0, len(buf)
        while pos < size:
            if self._remaining:
                take = min(self._remaining, size - pos)
                pieces.append(buf[pos:pos + take] if take < size else buf)
                pos += take
                self._remaining -= take
                if not self._remaining:
                    self._chunk_crlf = True
                continue
            line_end = buf.find(b"\r\n", pos)
            if line_end < 0:
                if size - pos > MAX_CHUNK_LINE:
                    raise UpstreamProtocolError(f"{self.pool.url}: chunk line too long")
                self._buf = buf[pos:]
                break
            line = buf[pos:line_end]
            pos = line_end + 2
            if self._chunk_crlf:  # the CRLF that closes a chunk's data
                if line:
                    raise UpstreamProtocolError(f"{self.pool.url}: bad chunk end")
                self._chunk_crlf = False
            elif self._trailer:
                if not line:  # the empty line after the trailer: the body is whole
                    return b"".join(pieces), True
            else:
                try:
                    length = int(line.split(b";", 1)[0], 16)
                except ValueError:
                    raise UpstreamProtocolError(
                        f"{self.pool.url}: bad chunk size {line[:40]!r}"
                    ) from None
                if length < 0:
                    raise UpstreamProtocolError(f"{self.pool.url}: bad chunk size")
                if length:
                    self._remaining = length
                else:
                    self._trailer = True
        if len(pieces) == 1:
            return pieces[0], False
        return b"".join(pieces), False

    def _arrive(self) -> None:
        if self.arrived is not None and not self.arrived.done():
            self.arrived.set_result(None)

    def body_arrived(self) -> asyncio.Future[None]:
        """Done once the body's first piece is here (or the body ended, or failed)."""
        if self.arrived is None:
            self.arrived = self.loop.create_future()
        if self.held or self.ended:
            self._arrive()
        return self.arrived

    def _finish(self, error: BaseException | None) -> None:
        self.ended = True
        self.error = error
        self._stop_timer()
        self._arrive()
        if self.sink is not None:
            self.sink.end(error)

    def attach(self, sink: BodySink) -> None:
        self.sink = sink
        held, self.held = self.held, []
        for payload in held:
            sink.data(payload)
        if self.ended:
            sink.end(self.error)

    def pause(self) -> None:
        if self.transport is not None and not self.closed:
            self.transport.pause_reading()

    def resume(self) -> None:
        if self.transport is not None and not self.closed:
            self.transport.resume_reading()

    def done_with(self) -> None:
        """The caller is done with this answer: pool the connection if it is reusable."""
        if self.closed:
            return
        if self.ended and self.error is None and self.keep_alive and not self._buf:
            self._reset()
            self.idle_since = self.loop.time()
            self.pool._idle.append(self)
        else:
            self.abort()


class UpstreamResponse:
    """A GPU server's answer: its head, and its body to stream or read."""

    __slots__ = ("_conn", "headers", "reason", "status")

    def __init__(
        self, conn: Connection, status: int, reason: str, headers: CIMultiDictProxy[str]
    ) -> None:
        self._conn = conn
        self.status = status
        self.reason = reason
        self.headers = headers

    @property
    def content_type(self) -> str:
        return self.headers.get("content-type", "application/octet-stream").split(";")[0] \
            .strip().lower()

    @property
    def content_length(self) -> int | None:
        raw = self.headers.get("content-length")
        return int(raw) if raw is not None and raw.isdigit() else None

    @property
    def failed(self) -> bool:
        """The body ended in an error (the connection was cut, or timed out)."""
        return self._conn.ended and self._conn.error is not None

    def first_piece(self) -> asyncio.Future[None]:
        """Done once the first piece of the body has come (or the body ended or failed),
        before any sink is attached: a race between two answers waits on it."""
        return self._conn.body_arrived()

    def stream(self, sink: BodySink) -> None:
        """Hand every piece of the body to ``sink`` (those already here first)."""
        self._conn.attach(sink)

    async def read(self, limit: int | None = None) -> bytes:
        """The body (at most ``limit`` bytes of it: then the rest is not read)."""
        sink = _Collect(limit)
        self._conn.attach(sink)
        await sink.done
        body = b"".join(sink.parts)
        return body if limit is None else body[:limit]

    def pause(self) -> None:
        """Stop reading from the server (the client is slower than it)."""
        self._conn.pause()

    def resume(self) -> None:
        self._conn.resume()

    def release(self) -> None:
        """Done with a whole answer: the connection goes back to the pool."""
        self._conn.done_with()

    def close(self) -> None:
        """Done, maybe mid-answer: close the connection (a GPU server then aborts the
        sequence)."""
        self._conn.abort()
