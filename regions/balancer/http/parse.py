# SPDX-License-Identifier: Apache-2.0
"""Stage: read the request body once (bounded) and parse it once into the ``RequestInfo``
every later stage reads.

413 above ``max_body_bytes``, 408 when the body pauses longer than ``client_body_s`` (the
connection is closed: the rest is not waited for), 400 for a body that is not JSON or not
an OpenAI request, or a bad ``x-director-deadline-ms`` (the most the request may wait in
the region queue, in milliseconds, at most ``max_queue_wait_s``)."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field

from aiohttp import web

from regions.balancer.errors import RequestRejected
from regions.balancer.http.client_timeouts import BodyTimeout, read_body
from regions.balancer.http.exchange import Exchange, Next
from regions.balancer.http.refusals import error_response
from regions.balancer.http.request_info import parse_request
from regions.balancer.http.tokenizers import PromptTokenizer, Tokenizers
from regions.balancer.scheduling.kv_event_index import DEFAULT_KV_BLOCK_SIZE, KvEventIndex
from regions.balancer.scheduling.output_lengths import OutputLengths
from regions.balancer.types import Endpoint, RequestInfo

DEADLINE_HEADER = "x-director-deadline-ms"


@dataclass(frozen=True)
class ParseSettings:
    max_body_bytes: int
    prefill_ratio: float
    max_queue_wait_s: float
    prefix_hashes: bool = False  # hash the prompt's leading blocks (a scorer reads them)
    client_body_s: float = 30.0  # a request body that pauses longer: 408
    kv_index: KvEventIndex | None = None  # key the prompt's token blocks for this index
    tokenizers: Tokenizers = field(default_factory=lambda: Tokenizers({}))  # by model


class Parse:
    """Stage: the body read and parsed into the exchange, or the refusal."""

    def __init__(self, settings: ParseSettings, lengths: OutputLengths,
                 slow_body: Callable[[], None]) -> None:
        self.settings = settings
        self.lengths = lengths  # learned from the answers (by the proxy)
        self.slow_body = slow_body  # counts a body cut for pausing

    async def __call__(self, exchange: Exchange, call_next: Next) -> web.StreamResponse:
        try:
            exchange.raw, exchange.info = await self.read(exchange.request, exchange.endpoint)
            exchange.queue_timeout_s = self.queue_timeout(exchange.request)
        except RequestRejected as exc:
            refusal = error_response(exc.status, exc.message, "invalid_request_error",
                                     param=exc.param)
            if exc.status == 408:  # the rest of a stalled body is not waited for
                refusal.force_close()
            return refusal
        return await call_next(exchange)

    async def read(self, request: web.Request, endpoint: Endpoint) -> tuple[bytes, RequestInfo]:
        """The body as sent and as parsed; raises ``RequestRejected``."""
        limit = self.settings.max_body_bytes
        if request.content_length is not None and request.content_length > limit:
            raise RequestRejected(413, f"request body exceeds {limit} bytes")
        try:
            raw = await read_body(request, self.settings.client_body_s)
        except web.HTTPRequestEntityTooLarge:
            raise RequestRejected(413, f"request body exceeds {limit} bytes") from None
        except BodyTimeout as exc:
            self.slow_body()
            raise RequestRejected(408, str(exc)) from None
        try:
            body = json.loads(raw)
        except (json.JSONDecodeError, UnicodeDecodeError):
            raise RequestRejected(400, "request body is not valid JSON") from None
        info = parse_request(
            endpoint,
            body,
            request.headers,
            prefill_ratio=self.settings.prefill_ratio,
            lengths=self.lengths,
            with_prefix=self.settings.prefix_hashes,
            token_block_size=self.token_block_size(),
            tokenizer=self.tokenizer(body),
        )
        return raw, info

    def tokenizer(self, body: object) -> PromptTokenizer:
        """The tokenizer of the model ``body`` asks for (the estimate for any other)."""
        model = body.get("model") if isinstance(body, dict) else None
        return self.settings.tokenizers.of(model if isinstance(model, str) else "")

    def token_block_size(self) -> int | None:
        """The block size to key the prompt's tokens by, while some backend's KV events
        are followed exactly (as its events say; vLLM's 16 until they say)."""
        index = self.settings.kv_index
        if index is None or not index.exact_backends:
            return None
        return index.block_size or DEFAULT_KV_BLOCK_SIZE

    def queue_timeout(self, request: web.Request) -> float:
        raw = request.headers.get(DEADLINE_HEADER)
        limit = self.settings.max_queue_wait_s
        if raw is None:
            return limit
        try:
            return max(0.0, min(limit, int(raw) / 1000.0))
        except ValueError:
            raise RequestRejected(400, f"{DEADLINE_HEADER}: expected milliseconds") from None
