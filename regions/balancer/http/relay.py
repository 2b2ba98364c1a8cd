# SPDX-License-Identifier: Apache-2.0
"""Relay an upstream answer to the client piece by piece, unbuffered (the proxy to a GPU
server and the overflow to a sibling region both do).

Each piece goes out from the upstream connection's ``data_received`` straight onto the
client's transport (HTTP/1.1 chunk framing added here when the client's answer is
chunked), so a streamed token costs no task wake-up. When the client reads slower than the
server writes (more than ``HIGH_WATER`` bytes wait in the client's socket buffer), reading
from the server pauses until the client catches up.

A client that stops reading altogether (its TCP window full) would hold the GPU's slot,
and its tenant's concurrency, for as long as it likes. So the relay watches what the client
takes of the answer (``send_progress``: acknowledged by its TCP stack, not merely queued
in our buffers): when bytes are owed to it and it has taken none for ``stall_s`` seconds,
its connection is aborted and the relay ends ``CLIENT_STALLED`` (the proxy counts it; the
GPU's sequence is aborted and the lease and quota freed as for any end). A slow reader that
keeps reading is never cut. The deadline runs on the monotonic clock, not the proxy's.

A resumable stream (``silence_s`` given) is watched for the upstream going silent: once
its first piece has arrived, a gap of more than ``silence_s`` between two pieces ends the
relay ``UPSTREAM_STALLED`` with the client's answer still open, for the proxy to splice a
continuation into (``relay`` again with ``prepared=True``); so does an upstream that
fails mid-answer when a ``tap`` is given (the caller resumes it, or ends the answer). The
sink records each answer's longest gap (``longest_gap``), from which the bound is
learned. A ``tap`` sees each piece before anything else (``stream_tap.StreamTap``: whole
events only).

``relay`` ends one of six ways (``RelayEnd``) and leaves the upstream connection in the
right state for each: back in its pool after a whole answer, closed otherwise (closing
it is what aborts the sequence on a GPU server when the client goes away). When the
upstream fails mid-answer the client's connection is aborted, so it sees a truncated
answer rather than a well-formed short one.
"""

from __future__ import annotations

import asyncio
import enum
import time
from collections.abc import Callable, Mapping
from typing import Protocol

from aiohttp import web

from regions.balancer.http.headers import downstream_response_headers
from regions.balancer.http.send_progress import SendProgress
from regions.balancer.http.upstream import BodySink, UpstreamResponse

UPSTREAM_ERRORS = (OSError, ValueError)  # ConnectionError, TimeoutError; a bad header
HIGH_WATER = 64 * 1024
DEFAULT_STALL_S = 30.0  # a client that takes no byte of its answer for this long is cut

OnChunk = Callable[[bytes, float], None]  # (piece, when it was read), after writing it on


class Transform(Protocol):
    """Rewrites the body piece by piece (``usage_stream.UsageEventFilter``)."""

    def __call__(self, piece: bytes) -> bytes: ...
    def rest(self) -> bytes: ...


class RelayEnd(enum.Enum):
    FINISHED = "finished"  # the whole answer went out
    CLIENT_GONE = "client_gone"  # before the headers or during the body
    # every piece went out, the client closed before the terminating chunk (usual after
    # an SSE client reads ``[DONE]``): the answer is whole, the client is not an error
    CLIENT_GONE_AT_END = "client_gone_at_end"
    UPSTREAM_FAILED = "upstream_failed"  # a read from upstream failed mid-answer
    CLIENT_STALLED = "client_stalled"  # took no byte for ``stall_s``: its connection cut
    UPSTREAM_STALLED = "upstream_stalled"  # silent for ``silence_s``: the client's answer open


# how an answer breaks off upstream mid-way, its client's answer left open
BROKE_OFF = frozenset({RelayEnd.UPSTREAM_STALLED, RelayEnd.UPSTREAM_FAILED})


def response_for(upstream: UpstreamResponse, headers: Mapping[str, str]) -> web.StreamResponse:
    """The client's response for ``upstream``: its status and end-to-end headers plus
    ``headers``; the length is kept unless the answer is an event stream."""
    resp = web.StreamResponse(
        status=upstream.status,
        reason=upstream.reason,
        headers=downstream_response_headers(upstream.headers),
    )
    resp.headers.update(headers)
    if upstream.content_type != "text/event-stream" and upstream.content_length is not None:
        resp.content_length = upstream.content_length
    return resp


class _ToClient(BodySink):
    """Writes each piece onto the client's transport as it comes from upstream."""

    def __init__(
        self,
        transport: asyncio.Transport,
        chunked: bool,
        upstream: UpstreamResponse,
        on_chunk: OnChunk | None,
        clock: Callable[[], float],
        progress: SendProgress,
        transform: Transform | None = None,
        tap: Transform | None = None,
        watch: bool = False,
        capture: Callable[[bytes], None] | None = None,
    ) -> None:
        self.transport = transport
        self.progress = progress
        self.transform = transform
        self.tap = tap
        self.capture = capture
        self.watch = watch  # wake the pump on the first piece: it times the silences
        self.last_read: float | None = None  # monotonic time of the last piece
        self.longest_gap = 0.0  # between two pieces, after the first
        self.chunked = chunked
        self.upstream = upstream
        self.on_chunk = on_chunk
        self.clock = clock
        self.wake: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.end_state: RelayEnd | None = None
        self.paused = False

    def data(self, payload: bytes) -> None:
        if self.end_state is not None:
            return
        transport = self.transport
        if transport.is_closing():
            self._stop(RelayEnd.CLIENT_GONE)
            return
        wall = time.monotonic()
        now = wall if self.clock is time.monotonic else self.clock()  # one read, usually
        last, self.last_read = self.last_read, wall
        if last is None:
            if self.watch:
                self._wake()
        elif wall - last > self.longest_gap:
            self.longest_gap = wall - last
        if self.tap is not None:
            payload = self.tap(payload)
            if not payload:
                return
        self.write(self.transform(payload) if self.transform is not None else payload)
        if self.on_chunk is not None:
            self.on_chunk(payload, now)
        progress = self.progress
        if progress.due(wall):
            progress.check(wall)
            if progress.stalled(wall):
                self._stop(RelayEnd.CLIENT_STALLED)
                return
        if transport.get_write_buffer_size() > HIGH_WATER:
            self.paused = True
            self.upstream.pause()
            self._wake()

    def write(self, payload: bytes) -> None:
        if not payload:
            return
        if self.capture is not None:
            self.capture(payload)
        if self.chunked:
            payload = b"%x\r\n%b\r\n" % (len(payload), payload)
        self.transport.write(payload)
        self.progress.wrote(len(payload))

    def end(self, error: BaseException | None) -> None:
        if self.end_state is None:
            self._stop(RelayEnd.FINISHED if error is None else RelayEnd.UPSTREAM_FAILED)

    def _stop(self, end: RelayEnd) -> None:
        self.end_state = end
        self._wake()

    def _wake(self) -> None:
        if not self.wake.done():
            self.wake.set_result(None)


async def relay(
    request: web.Request,
    upstream: UpstreamResponse,
    resp: web.StreamResponse,
    on_chunk: OnChunk | None = None,
    clock: Callable[[], float] = time.monotonic,
    transform: Transform | None = None,
    stall_s: float = DEFAULT_STALL_S,
    *,
    tap: Transform | None = None,
    silence_s: float | None = None,
    prepared: bool = False,
    gaps: Callable[[float], None] | None = None,
    capture: Callable[[bytes], None] | None = None,
) -> RelayEnd:
    """Send ``resp``'s headers (unless ``prepared``: they went out with an earlier
    answer), then every piece of ``upstream``'s body as it arrives.

    ``on_chunk`` runs after each piece is written (the accounting never delays a piece),
    with the piece as it came (through ``tap``); ``transform`` rewrites what the client
    gets; a client that takes no byte for ``stall_s`` seconds is cut (``CLIENT_STALLED``);
    an upstream silent for ``silence_s`` after its first piece ends it
    ``UPSTREAM_STALLED``, the client's answer left open. ``gaps`` is told a whole
    answer's longest silence, ``capture`` each piece as the client is sent it.
    """
    finished = False
    try:
        if not prepared:
            if resp.content_length is None and request.version >= (1, 1):
                resp.enable_chunked_encoding()
            try:
                await resp.prepare(request)  # sends the head (a StreamResponse holds none)
            except ConnectionResetError:
                return RelayEnd.CLIENT_GONE
        transport = request.transport
        if transport is None or transport.is_closing():
            return RelayEnd.CLIENT_GONE
        # the transport pauses the server's protocol above HIGH_WATER, so drain() waits
        transport.set_write_buffer_limits(high=HIGH_WATER)
        progress = SendProgress(transport, stall_s, time.monotonic())
        sink = _ToClient(transport, resp.chunked, upstream, on_chunk, clock, progress,
                         transform, tap, silence_s is not None, capture)
        upstream.stream(sink)
        end = await _pump(request, upstream, sink, progress, silence_s)
        if end is RelayEnd.CLIENT_STALLED or (end is RelayEnd.UPSTREAM_FAILED and tap is None):
            transport.abort()
            return end
        if end is not RelayEnd.FINISHED:
            return end
        finished = True
        if gaps is not None:
            gaps(sink.longest_gap)
        if not transport.is_closing():
            tail = tap.rest() if tap is not None else b""  # an unterminated last event
            if transform is not None:
                tail = (transform(tail) if tail else b"") + transform.rest()
            sink.write(tail)
        return await _end_answer(request, resp, progress, stall_s)
    finally:
        if finished:
            upstream.release()
        else:
            upstream.close()


async def end_open_answer(request: web.Request, resp: web.StreamResponse, tail: bytes,
                          stall_s: float = DEFAULT_STALL_S) -> RelayEnd:
    """End an answer left open by a stalled upstream, with ``tail`` (an error event, or
    the ``[DONE]`` of an answer that was whole but for it) as its last piece."""
    transport = request.transport
    if transport is None or transport.is_closing():
        return RelayEnd.CLIENT_GONE
    if tail:
        transport.write(b"%x\r\n%b\r\n" % (len(tail), tail) if resp.chunked else tail)
    return await _end_answer(request, resp, SendProgress(transport, stall_s, time.monotonic()),
                             stall_s)


async def _pump(request: web.Request, upstream: UpstreamResponse, sink: _ToClient,
                progress: SendProgress, silence_s: float | None = None) -> RelayEnd:
    """Wait while the body goes to the client from the sink's callbacks, resuming the
    upstream each time the client has taken what was paused for, and timing the
    upstream's silences when ``silence_s`` is given; how it ended."""
    while sink.end_state is None:
        if silence_s is None or sink.last_read is None:
            await sink.wake
        else:
            left = sink.last_read + silence_s - time.monotonic()
            if left <= 0:
                return RelayEnd.UPSTREAM_STALLED
            await asyncio.wait((sink.wake,), timeout=left)
            if not sink.wake.done():
                continue
        sink.wake = asyncio.get_running_loop().create_future()
        if sink.paused and sink.end_state is None:
            try:
                if not await _drained(request, progress):
                    sink.transport.abort()
                    return RelayEnd.CLIENT_STALLED
            except ConnectionError:  # reset, or lost while waiting
                return RelayEnd.CLIENT_GONE
            sink.paused = False
            if sink.last_read is not None:  # a paused upstream was not silent
                sink.last_read = time.monotonic()
            upstream.resume()
    return sink.end_state


async def _end_answer(request: web.Request, resp: web.StreamResponse, progress: SendProgress,
                      stall_s: float) -> RelayEnd:
    """The answer is whole upstream (its connection goes back to the pool): see the client
    take the rest, and end the response."""
    transport = request.transport
    if transport is None or transport.is_closing():
        return RelayEnd.CLIENT_GONE_AT_END
    try:
        if not await _drained(request, progress):
            transport.abort()
            return RelayEnd.CLIENT_STALLED
        await asyncio.wait_for(resp.write_eof(), stall_s)
    except ConnectionError:
        return RelayEnd.CLIENT_GONE_AT_END
    except TimeoutError:
        transport.abort()
        return RelayEnd.CLIENT_STALLED
    return RelayEnd.FINISHED


async def _drained(request: web.Request, progress: SendProgress) -> bool:
    """Wait until the client's buffer is below its low-water mark; False once the client
    has taken nothing for ``stall_s`` (checked twice per ``stall_s``). Raises
    ConnectionError if the client went away."""
    if progress.transport.get_write_buffer_size() == 0:
        return True
    drain = asyncio.ensure_future(request.writer.drain())
    try:
        while True:
            done, _ = await asyncio.wait((drain,), timeout=progress.stall_s / 2)
            if done:
                drain.result()
                return True
            now = time.monotonic()
            progress.check(now)
            if progress.stalled(now):
                return False
    finally:
        if not drain.done():
            drain.cancel()
        elif not drain.cancelled():
            drain.exception()  # retrieved: the caller saw it, or has gone (cancelled)
