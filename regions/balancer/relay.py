# SPDX-License-Identifier: Apache-2.0
"""Relay an upstream answer to the client chunk by chunk, unbuffered (the proxy to a GPU
server and the overflow to a sibling region both do).

``relay`` ends one of four ways (``RelayEnd``) and leaves the upstream connection in the
right state for each: released to the pool after a whole answer, closed otherwise (closing
it is what aborts the sequence on a GPU server when the client goes away). When the
upstream fails mid-answer the client's connection is aborted, so it sees a truncated
answer rather than a well-formed short one.
"""

from __future__ import annotations

import enum
import time
from collections.abc import Callable, Mapping

import aiohttp
from aiohttp import web

from regions.balancer.headers import downstream_response_headers

UPSTREAM_ERRORS = (aiohttp.ClientError, TimeoutError, OSError)

OnChunk = Callable[[bytes, float], None]  # (chunk, when it was read), after writing it on


class RelayEnd(enum.Enum):
    FINISHED = "finished"  # the whole answer went out
    CLIENT_GONE = "client_gone"  # before the headers or during the body
    # every chunk went out, the client closed before the terminating chunk (usual after
    # an SSE client reads ``[DONE]``): the answer is whole, the client is not an error
    CLIENT_GONE_AT_END = "client_gone_at_end"
    UPSTREAM_FAILED = "upstream_failed"  # a read from upstream failed mid-answer


def response_for(
    upstream: aiohttp.ClientResponse, headers: Mapping[str, str]
) -> web.StreamResponse:
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


async def relay(
    request: web.Request,
    upstream: aiohttp.ClientResponse,
    resp: web.StreamResponse,
    on_chunk: OnChunk | None = None,
    clock: Callable[[], float] = time.monotonic,
) -> RelayEnd:
    """Send ``resp``'s headers, then every chunk of ``upstream`` as it arrives.

    ``on_chunk`` runs after each chunk is written (the accounting never delays a chunk),
    also for the chunk whose write found the client gone.
    """
    finished = False
    try:
        try:
            await resp.prepare(request)
        except ConnectionResetError:
            return RelayEnd.CLIENT_GONE
        while True:
            try:
                chunk = await upstream.content.readany()
            except UPSTREAM_ERRORS:
                if request.transport is not None:
                    request.transport.abort()
                return RelayEnd.UPSTREAM_FAILED
            if not chunk:
                break
            now = clock()
            try:
                await resp.write(chunk)
            except ConnectionResetError:
                return RelayEnd.CLIENT_GONE
            finally:
                if on_chunk is not None:
                    on_chunk(chunk, now)
        finished = True
        try:
            await resp.write_eof()
        except ConnectionResetError:
            return RelayEnd.CLIENT_GONE_AT_END
        return RelayEnd.FINISHED
    finally:
        if finished:
            upstream.release()
        else:
            upstream.close()
