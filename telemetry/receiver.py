# SPDX-License-Identifier: Apache-2.0
"""An OTLP/HTTP trace receiver that keeps what it is sent: ``POST /v1/traces`` as the
OTLP specification gives it (``application/x-protobuf`` or ``application/json``, gzip
or not), decoded with the protocol's own definitions (``opentelemetry-proto``).

It is what ``director traces receive`` runs and what the tests send traces to: it answers
as a collector does (200 and an empty ``ExportTraceServiceResponse``; 400 for a body that
does not decode, 415 for another content type, 413 above ``max_body``), keeps the spans in
memory (``spans``, the newest ``keep``) and appends each as a JSON line to ``out`` when
given. ``GET /v1/spans`` returns the kept spans as a JSON list (``?trace_id=`` one trace).
Not a collector: no batching, no retries, no forwarding; point the exporter at a real one
in production.
"""

from __future__ import annotations

import asyncio
import gzip
import io
import json
import zlib
from collections import deque
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from aiohttp import web
from google.protobuf import json_format
from google.protobuf.message import DecodeError
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue

PROTOBUF = "application/x-protobuf"
JSON = "application/json"
KINDS = {0: "UNSPECIFIED", 1: "INTERNAL", 2: "SERVER", 3: "CLIENT", 4: "PRODUCER", 5: "CONSUMER"}
STATUS = {0: "UNSET", 1: "OK", 2: "ERROR"}


class OtlpReceiver:
    """Receives spans over OTLP/HTTP on a loopback port (``start``/``stop``)."""

    def __init__(self, host: str = "127.0.0.1", port: int = 0, *, out: Path | None = None,
                 keep: int = 100_000, max_body: int = 16 * 1024 * 1024) -> None:
        self.host, self.port, self.out, self.max_body = host, port, out, max_body
        self.spans: deque[dict[str, Any]] = deque(maxlen=keep)
        self.rejected = 0
        self._runner: web.AppRunner | None = None
        self._arrived = asyncio.Condition()

    @property
    def endpoint(self) -> str:
        """The URL for ``OTEL_EXPORTER_OTLP_ENDPOINT`` (the exporter adds ``/v1/traces``)."""
        return f"http://{self.host}:{self.port}"

    async def start(self) -> None:
        app = web.Application(client_max_size=self.max_body)
        app.router.add_post("/v1/traces", self._traces)
        app.router.add_get("/v1/spans", self._spans)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.host, self.port)
        await site.start()
        self.port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def __aenter__(self) -> OtlpReceiver:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    def trace(self, trace_id: str) -> list[dict[str, Any]]:
        """The kept spans of one trace, oldest start first."""
        return sorted((s for s in self.spans if s["trace_id"] == trace_id),
                      key=lambda s: s["start_ns"])

    async def wait_for(self, count: int, timeout: float, *, name: str | None = None) -> None:
        """Until ``count`` spans (named ``name``, if given) have arrived, or TimeoutError."""
        def enough() -> bool:
            return sum(1 for s in self.spans if name is None or s["name"] == name) >= count

        async with asyncio.timeout(timeout), self._arrived:
            await self._arrived.wait_for(enough)

    async def _traces(self, request: web.Request) -> web.Response:
        kind = request.content_type
        if kind not in (PROTOBUF, JSON):
            self.rejected += 1
            return web.Response(status=415, text=f"content type {kind!r}: send {PROTOBUF}")
        try:
            body = _inflated(await request.read(), request.headers.get("Content-Encoding", ""),
                             self.max_body)
            message = ExportTraceServiceRequest()
            if kind == PROTOBUF:
                message.ParseFromString(body)
            else:
                json_format.Parse(body, message)
        except (DecodeError, json_format.ParseError, ValueError, OSError, zlib.error) as exc:
            self.rejected += 1
            return web.Response(status=400, text=f"not an ExportTraceServiceRequest: {exc}")
        spans = list(decoded_spans(message))
        self._keep(spans)
        async with self._arrived:
            self._arrived.notify_all()
        answer = ExportTraceServiceResponse()
        if kind == JSON:
            return web.json_response(json_format.MessageToDict(answer))
        return web.Response(body=answer.SerializeToString(), content_type=PROTOBUF)

    def _keep(self, spans: list[dict[str, Any]]) -> None:
        self.spans.extend(spans)
        if self.out is not None and spans:
            with self.out.open("a", encoding="utf-8") as f:
                for span in spans:
                    f.write(json.dumps(span, sort_keys=True) + "\n")

    async def _spans(self, request: web.Request) -> web.Response:
        trace_id = request.query.get("trace_id")
        spans = self.trace(trace_id) if trace_id else list(self.spans)
        return web.json_response(spans)


def _inflated(body: bytes, encoding: str, limit: int) -> bytes:
    encoding = encoding.strip().lower()
    if encoding in ("", "identity"):
        return body
    if encoding == "gzip":
        out = gzip.GzipFile(fileobj=io.BytesIO(body)).read(limit + 1)
    elif encoding == "deflate":
        out = zlib.decompressobj().decompress(body, limit + 1)
    else:
        raise ValueError(f"content encoding {encoding!r}")
    if len(out) > limit:
        raise ValueError("inflated body above the limit")
    return out


def decoded_spans(message: ExportTraceServiceRequest) -> Iterable[dict[str, Any]]:
    """Each span of an export request as a plain dict (ids in hex)."""
    for resource_spans in message.resource_spans:
        resource = _attributes(resource_spans.resource.attributes)
        for scope_spans in resource_spans.scope_spans:
            scope = scope_spans.scope.name
            for span in scope_spans.spans:
                yield {
                    "trace_id": span.trace_id.hex(),
                    "span_id": span.span_id.hex(),
                    "parent_span_id": span.parent_span_id.hex() or None,
                    "name": span.name,
                    "kind": KINDS.get(span.kind, str(span.kind)),
                    "start_ns": span.start_time_unix_nano,
                    "end_ns": span.end_time_unix_nano,
                    "attributes": _attributes(span.attributes),
                    "events": [{"name": e.name, "time_ns": e.time_unix_nano,
                                "attributes": _attributes(e.attributes)} for e in span.events],
                    "links": [{"trace_id": link.trace_id.hex(), "span_id": link.span_id.hex(),
                               "attributes": _attributes(link.attributes)}
                              for link in span.links],
                    "status": STATUS.get(span.status.code, str(span.status.code)),
                    "status_message": span.status.message or None,
                    "service": resource.get("service.name"),
                    "scope": scope,
                    "schema_url": scope_spans.schema_url or None,
                }


def _attributes(pairs: Iterable[KeyValue]) -> dict[str, Any]:
    return {kv.key: _value(kv.value) for kv in pairs}


def _value(value: AnyValue) -> Any:
    which = value.WhichOneof("value")
    if which is None:
        return None
    if which == "array_value":
        return [_value(v) for v in value.array_value.values]
    if which == "kvlist_value":
        return _attributes(value.kvlist_value.values)
    if which == "bytes_value":
        return value.bytes_value.hex()
    return getattr(value, which)
