"""Stand-in servers for the tenant tests: an aiohttp app on loopback at a free port, and a
GPU stand-in that records each completion request and answers at once."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager

from aiohttp import web


@asynccontextmanager
async def serving(app: web.Application) -> AsyncIterator[str]:
    """``app`` on 127.0.0.1 at a free port until the block ends; yields its base URL."""
    runner = web.AppRunner(app)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    try:
        yield f"http://127.0.0.1:{runner.addresses[0][1]}"
    finally:
        await runner.cleanup()


def recording_gpu(record: Callable[[web.Request], Awaitable[None]]) -> web.Application:
    """``POST /v1/completions`` that awaits ``record(request)``, then answers a completion."""
    async def completions(request: web.Request) -> web.Response:
        await record(request)
        return web.json_response({"id": "x", "object": "text_completion", "choices": [
            {"index": 0, "text": "hi", "finish_reason": "stop"}]})

    app = web.Application()
    app.router.add_post("/v1/completions", completions)
    return app
