# SPDX-License-Identifier: Apache-2.0
"""The aiohttp app of one simulated GPU server: OpenAI-compatible API, health, metrics, faults.

Routes: ``POST /v1/completions``, ``POST /v1/chat/completions``, ``POST /v1/embeddings``,
``GET /v1/models``, ``GET /health``, ``GET /metrics``, ``POST /_sim/fault``, ``GET
/_sim/state``; as vLLM ``GET /version``, ``POST /reset_prefix_cache`` and, with LoRA
(``EngineConfig.max_loras``), ``POST /v1/load_lora_adapter`` and
``/v1/unload_lora_adapter`` (``adapter_routes``); as SGLang ``GET
/v1/loads``, as TGI ``GET /info`` (``engine_info``). Handlers
are thin: parsing and bodies live in ``openai_format``, timing in ``engine``, fault
semantics in ``faults``. A sequence is aborted however its request ends (finished, client
gone, handler cancelled), so slots and KV never leak.

Run the app with ``handler_cancellation=True`` (``SimServer`` does) so that a client which
disconnects while its request is still queued frees its place at once.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import random
import time
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web
from opentelemetry.trace import Tracer

from regions.simulator import openai_format as oai
from regions.simulator.adapter_routes import add_adapter_routes
from regions.simulator.batching import Sequence
from regions.simulator.engine import Engine
from regions.simulator.engine_info import TGI_MAX_CONCURRENT_REQUESTS, sglang_loads, tgi_info
from regions.simulator.errors import (
    FaultSpecError,
    OverloadedError,
    RequestError,
    SequenceAborted,
)
from regions.simulator.faults import Fault, FaultMode
from regions.simulator.metrics import CONTENT_TYPE, ServerMetrics
from regions.simulator.prompt_blocks import prompt_blocks
from regions.simulator.request_span import record_request
from regions.simulator.sleep_mode import SleepMode

MAX_BODY_BYTES = 8 * 1024 * 1024


@dataclass
class SimContext:
    """Everything the handlers of one simulated server share."""

    name: str
    models: tuple[str, ...]
    engine: Engine
    rng: random.Random = field(default_factory=lambda: random.Random(0))
    fault: Fault = field(default_factory=Fault)
    engine_name: str = "vllm"  # whose metric names /metrics uses, whose info endpoints
    # TGI's router limit (queued + running); None: the engine's default (TGI: 128)
    max_concurrent_requests: int | None = None
    # what /v1/models says each model was loaded from (its "root"; default the model's
    # name), as vLLM reports the weights' path; ``POST /_sim/root`` swaps one silently
    roots: dict[str, str] = field(default_factory=dict)
    # LoRA adapters registered (vLLM's lora_requests): name -> the path it was loaded from
    adapters: dict[str, str] = field(default_factory=dict)
    stalled: int = 0  # streams the ``stall`` fault silenced
    tracer: Tracer | None = None  # vLLM's ``llm_request`` span per request (``request_span``)
    sleep: SleepMode | None = None  # vLLM's sleep mode and the cold start (``sleep_mode``)
    metrics: ServerMetrics = field(init=False)
    _revert: asyncio.TimerHandle | None = field(default=None, init=False, repr=False)

    def __post_init__(self) -> None:
        self.metrics = ServerMetrics(self.engine, self.models[0], self.engine_name)
        for name in self.adapters:  # --lora-modules: loaded as the server starts
            self.engine.adapters.load(name)

    @property
    def served(self) -> tuple[str, ...]:
        """The names a request may ask for: its models, then its adapters."""
        return (*self.models, *self.adapters) if self.adapters else self.models

    def set_fault(self, fault: Fault) -> None:
        """Switch the fault mode; ``fail`` also cuts every in-flight request. A fault with a
        ttl is switched back to healthy after it (call from the server's event loop)."""
        if self._revert is not None:
            self._revert.cancel()
            self._revert = None
        self.fault = fault
        self.engine.hung = fault.mode is FaultMode.HANG
        self.engine.slow_factor = fault.factor if fault.mode is FaultMode.SLOW else 1.0
        if fault.mode is FaultMode.FAIL:
            self.engine.abort_all()
        if fault.mode is not FaultMode.NONE and fault.ttl is not None:
            loop = asyncio.get_running_loop()
            self._revert = loop.call_later(fault.ttl, self.set_fault, Fault())

    @property
    def in_flight_limit(self) -> int | None:
        """Requests accepted at once (queued or running) before 429: TGI's router only."""
        if self.engine_name != "tgi":
            return None
        return self.max_concurrent_requests or TGI_MAX_CONCURRENT_REQUESTS

    def state_json(self) -> dict[str, Any]:
        s = self.engine.state()
        return {
            "name": self.name,
            "models": list(self.models),
            "roots": {m: self.roots.get(m, m) for m in self.models},
            "adapters": {"registered": list(self.adapters),
                         "loaded": list(self.engine.adapters.loaded),
                         "loads": dict(self.engine.adapters.loads),
                         "evictions": self.engine.adapters.evictions},
            "speed": self.engine.config.speed,
            "running": s.running,
            "waiting": s.waiting,
            "kv_used_tokens": s.kv_used_tokens,
            "kv_capacity_tokens": s.kv_capacity_tokens,
            "kv_usage": s.kv_usage,
            "prefix_cached_blocks": s.prefix_cached_blocks,
            "fault": self.fault.to_json(),
            "counters": vars(s.counters),
            "lost_model_seconds": round(s.lost_s, 6),
            "stalled_streams": self.stalled,
            "sleep": self.sleep.to_json() if self.sleep is not None else None,
        }


CTX = web.AppKey("sim_context", SimContext)


def build_app(ctx: SimContext) -> web.Application:
    """Build the app for one simulated server (no I/O until it is run)."""
    app = web.Application(client_max_size=MAX_BODY_BYTES, middlewares=[_fault_middleware])
    app[CTX] = ctx
    app.router.add_post("/v1/completions", _completions)
    app.router.add_post("/v1/chat/completions", _chat)
    app.router.add_post("/v1/embeddings", _embeddings)
    app.router.add_get("/v1/models", _models)
    app.router.add_get("/health", _health)
    app.router.add_get("/metrics", _metrics)
    if ctx.engine_name == "vllm":
        app.router.add_get("/version", _vllm_version)
        app.router.add_post("/reset_prefix_cache", _reset_prefix_cache)
        if ctx.engine.config.max_loras:
            add_adapter_routes(app, ctx)
    if ctx.engine_name == "sglang":
        app.router.add_get("/v1/loads", _sglang_loads)
    if ctx.engine_name == "tgi":
        app.router.add_get("/info", _tgi_info)
    if ctx.engine_name == "vllm":
        app.router.add_post("/sleep", _sleep)
        app.router.add_post("/wake_up", _wake_up)
        app.router.add_get("/is_sleeping", _is_sleeping)
    app.router.add_post("/_sim/fault", _set_fault)
    app.router.add_post("/_sim/root", _set_root)
    app.router.add_get("/_sim/state", _state)
    return app


def _error(status: int, message: str, error_type: str, **extra: Any) -> web.Response:
    return web.json_response(oai.error_body(message, error_type, **extra), status=status)


@web.middleware
async def _fault_middleware(request: web.Request, handler: Any) -> web.StreamResponse:
    ctx = request.app[CTX]
    if request.path.startswith("/_sim/"):
        return await handler(request)
    if ctx.fault.mode is FaultMode.FAIL:
        return _error(503, "simulated server failure", "server_error", code=503)
    sleep = ctx.sleep
    if sleep is not None and not sleep.serving and (
            request.path.startswith("/v1/") or request.path == "/health"):
        if request.path == "/health" and not sleep.starting:
            return await handler(request)  # asleep or waking, vLLM's /health answers 200
        what = "loading" if sleep.loading else "asleep"
        return _error(503, f"the engine is {what}", "server_error", code=503)
    if request.method == "POST" and request.path.startswith("/v1/"):
        status = ctx.fault.injected_error(ctx.rng)
        if status is not None:
            return _error(status, f"simulated {status} error", "server_error", code=status)
    return await handler(request)


# -- inference ---------------------------------------------------------------------------------


async def _completions(request: web.Request) -> web.StreamResponse:
    return await _generate(request, oai.Endpoint.COMPLETIONS)


async def _chat(request: web.Request) -> web.StreamResponse:
    return await _generate(request, oai.Endpoint.CHAT)


async def _admit(
    request: web.Request, endpoint: oai.Endpoint
) -> tuple[oai.InferenceRequest, Sequence]:
    ctx = request.app[CTX]
    try:
        body = await request.json()
    except (json.JSONDecodeError, UnicodeDecodeError):
        raise RequestError("request body is not valid JSON") from None
    req = oai.parse_request(endpoint, body, ctx.served)
    if ctx.fault.mode is FaultMode.SHORT and req.output_tokens > 1:  # a bad revision
        req = dataclasses.replace(req, output_tokens=max(1, int(req.output_tokens
                                                                * ctx.fault.factor)))
    limit = ctx.in_flight_limit
    if limit is not None:
        state = ctx.engine.state()
        if state.running + state.waiting >= limit:
            raise OverloadedError("Model is overloaded")
    config = ctx.engine.config
    blocks = prompt_blocks(req.token_stream, config.block_size) if config.prefix_caching \
        else None
    adapter = req.model if req.model in ctx.adapters else None
    return req, ctx.engine.submit(req.prompt_tokens, req.output_tokens, blocks, adapter,
                                  req.priority)


async def _generate(request: web.Request, endpoint: oai.Endpoint) -> web.StreamResponse:
    ctx = request.app[CTX]
    started_ns = time.time_ns() if ctx.tracer is not None else 0
    try:
        req, seq = await _admit(request, endpoint)
    except RequestError as exc:
        return _error(exc.status, exc.message, exc.error_type, param=exc.param, code=exc.code)
    try:
        if req.stream:
            return await _stream(request, req, seq)
        await ctx.engine.wait(seq)
        body = oai.completion_body(req, oai.new_id(endpoint, seq.seq_id), int(time.time()))
        return web.json_response(body)
    except SequenceAborted:
        return _cut(request)
    finally:
        ctx.engine.abort(seq)
        ctx.metrics.observe(seq)
        if ctx.tracer is not None:
            record_request(ctx.tracer, request.headers, oai.new_id(endpoint, seq.seq_id), req,
                           seq, started_ns)


async def _stream(
    request: web.Request, req: oai.InferenceRequest, seq: Sequence
) -> web.StreamResponse:
    ctx = request.app[CTX]
    rid, created = oai.new_id(req.endpoint, seq.seq_id), int(time.time())
    resp = web.StreamResponse(
        headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"}
    )
    await resp.prepare(request)
    stall_after = ctx.fault.stall_after(ctx.rng, req.output_tokens)
    late = ctx.fault.first_token_factor(ctx.rng)
    arrived = time.monotonic()
    try:
        async for index in ctx.engine.stream(seq):
            if index == 0 and late > 1:
                await asyncio.sleep((late - 1) * (time.monotonic() - arrived))
            data = oai.sse(oai.chunk_body(req, rid, created, index))
            if index == 0 and req.endpoint is oai.Endpoint.CHAT:
                data = oai.sse(oai.chunk_body(req, rid, created, None, role=True)) + data
            await resp.write(data)
            if stall_after is not None and index + 1 >= stall_after:
                ctx.engine.abort(seq)
                ctx.stalled += 1
                await asyncio.Event().wait()  # silent until the client leaves
    except SequenceAborted:
        _cut(request)
        return resp
    except ConnectionResetError:  # client gone (when handler cancellation is off)
        return resp
    try:
        if req.include_usage:
            await resp.write(oai.sse(oai.usage_chunk(req, rid, created)))
        await resp.write(oai.SSE_DONE)
        await resp.write_eof()
    except ConnectionResetError:  # the client left after the last token
        pass
    return resp


def _cut(request: web.Request) -> web.Response:
    """Drop the connection mid-request, as a crashed server would.

    The returned response is never delivered: the transport is already gone.
    """
    if request.transport is not None:
        request.transport.abort()
    return web.Response(status=503)


async def _embeddings(request: web.Request) -> web.StreamResponse:
    ctx = request.app[CTX]
    try:
        req, seq = await _admit(request, oai.Endpoint.EMBEDDINGS)
    except RequestError as exc:
        return _error(exc.status, exc.message, exc.error_type, param=exc.param, code=exc.code)
    try:
        await ctx.engine.wait(seq)
        return web.json_response(oai.embeddings_body(req))
    except SequenceAborted:
        return _cut(request)
    finally:
        ctx.engine.abort(seq)
        ctx.metrics.observe(seq)


# -- the rest ----------------------------------------------------------------------------------


async def _models(request: web.Request) -> web.Response:
    ctx = request.app[CTX]
    created = int(time.time())
    data = [
        {
            "id": m,
            "object": "model",
            "created": created,
            "owned_by": "director-simulator",
            "root": ctx.roots.get(m, m),
            "parent": None,
            "max_model_len": ctx.engine.config.max_model_len,
        }
        for m in ctx.models
    ]
    data += [
        {
            "id": name,
            "object": "model",
            "created": created,
            "owned_by": "director-simulator",
            "root": path,
            "parent": ctx.models[0],
            "max_model_len": None,
        }
        for name, path in ctx.adapters.items()
    ]
    return web.json_response({"object": "list", "data": data})


async def _vllm_version(request: web.Request) -> web.Response:
    """vLLM's ``GET /version`` (routers such as the SGLang Model Gateway detect it so)."""
    return web.json_response({"version": "sim"})


async def _reset_prefix_cache(request: web.Request) -> web.Response:
    """vLLM's ``POST /reset_prefix_cache``: forget every cached block no request uses."""
    request.app[CTX].engine.reset_prefix_cache()
    return web.Response(status=200)


async def _sleep(request: web.Request) -> web.Response:
    """vLLM's ``POST /sleep?level=1|2&mode=abort|wait``."""
    ctx = request.app[CTX]
    try:
        level = int(request.query.get("level", "1"))
    except ValueError:
        level = 0
    mode = request.query.get("mode", "abort")
    if level not in (1, 2) or mode not in ("abort", "wait", "keep") or ctx.sleep is None:
        return web.json_response({"error": "level must be 1 or 2, mode abort, wait or keep"},
                                 status=400)
    if mode == "abort":
        ctx.engine.abort_all()
    elif mode == "wait":
        while ctx.engine.state().running or ctx.engine.state().waiting:
            await asyncio.sleep(0.01)
    ctx.sleep.sleep(level)
    return web.json_response({"status": "sleeping", "level": level, "mode": mode})


async def _wake_up(request: web.Request) -> web.Response:
    """vLLM's ``POST /wake_up``: answers once awake."""
    ctx = request.app[CTX]
    if ctx.sleep is not None:
        await ctx.sleep.wake()
    return web.json_response({"status": "awake"})


async def _is_sleeping(request: web.Request) -> web.Response:
    ctx = request.app[CTX]
    return web.json_response({"is_sleeping": ctx.sleep is not None and ctx.sleep.asleep})


async def _health(request: web.Request) -> web.Response:
    return web.Response(status=200)


async def _metrics(request: web.Request) -> web.Response:
    body = request.app[CTX].metrics.render()
    return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE})


async def _sglang_loads(request: web.Request) -> web.Response:
    return web.json_response(sglang_loads(request.app[CTX].engine))


async def _tgi_info(request: web.Request) -> web.Response:
    ctx = request.app[CTX]
    return web.json_response(tgi_info(ctx.models[0], ctx.engine, ctx.in_flight_limit or 0))


async def _set_fault(request: web.Request) -> web.Response:
    ctx = request.app[CTX]
    try:
        fault = Fault.from_json(await request.json())
    except json.JSONDecodeError:
        return _error(400, "fault: body is not valid JSON", "invalid_request_error")
    except FaultSpecError as exc:
        return _error(400, str(exc), "invalid_request_error")
    ctx.set_fault(fault)
    return web.json_response(fault.to_json())


async def _set_root(request: web.Request) -> web.Response:
    """``{"model": m, "root": r}``: from now on the server says it serves ``m`` from ``r``
    (a revision swapped under the operator's feet: a redeploy, a cold start from another
    snapshot); nothing else about it changes."""
    ctx = request.app[CTX]
    try:
        body = await request.json()
    except json.JSONDecodeError:
        return _error(400, "root: body is not valid JSON", "invalid_request_error")
    model = body.get("model") if isinstance(body, dict) else None
    root = body.get("root") if isinstance(body, dict) else None
    if model not in ctx.models or not isinstance(root, str) or not root:
        return _error(400, f"root: expected {{\"model\": one of {list(ctx.models)}, "
                           "\"root\": a non-empty string}", "invalid_request_error")
    ctx.roots[model] = root
    return web.json_response({"model": model, "root": root})


async def _state(request: web.Request) -> web.Response:
    return web.json_response(request.app[CTX].state_json())
