# SPDX-License-Identifier: Apache-2.0
"""vLLM's runtime LoRA API on a simulated server (``VLLM_ALLOW_RUNTIME_LORA_UPDATING``).

- ``POST /v1/load_lora_adapter`` ``{"lora_name": n, "lora_path": p}``: loads the adapter
  (the engine stalls ``lora_load_s``, ``Engine.load_adapter``), then lists it in
  ``/v1/models`` with the base model as its ``parent`` and ``p`` as its ``root``; 200 with
  vLLM's text. 400 if either field is missing or ``n`` is already registered. As in vLLM
  the name is checked before the load and registered after it, so two concurrent loads of
  one name both load: coalescing them is the caller's job.
- ``POST /v1/unload_lora_adapter`` ``{"lora_name": n}``: forgets it; 404 if unknown.

Error bodies are vLLM's ``ErrorResponse`` (``openai_format.error_body``).
"""

from __future__ import annotations

import json
from typing import Any, Protocol

from aiohttp import web

from regions.simulator import openai_format as oai
from regions.simulator.engine import Engine


class AdapterHost(Protocol):
    """What the routes need of the server's context."""

    engine: Engine
    adapters: dict[str, str]


def add_adapter_routes(app: web.Application, ctx: AdapterHost) -> None:
    """Serve the load and unload endpoints for ``ctx``'s engine."""

    async def load(request: web.Request) -> web.StreamResponse:
        body = await _body(request)
        name, path = body.get("lora_name"), body.get("lora_path")
        if not isinstance(name, str) or not name or not isinstance(path, str) or not path:
            return _error(400, "Both 'lora_name' and 'lora_path' must be provided.",
                          "InvalidUserInput")
        if name in ctx.adapters:
            return _error(400, f"The lora adapter '{name}' has already been loaded.",
                          "InvalidUserInput")
        await ctx.engine.load_adapter(name)
        ctx.adapters[name] = path
        return web.Response(text=f"Success: LoRA adapter '{name}' added successfully.")

    async def unload(request: web.Request) -> web.StreamResponse:
        body = await _body(request)
        name = body.get("lora_name")
        if not isinstance(name, str) or not name:
            return _error(400, "either 'lora_name' and 'lora_int_id' needs to be provided.",
                          "InvalidUserInput")
        if ctx.adapters.pop(name, None) is None:
            return _error(404, f"The lora adapter '{name}' cannot be found.", "NotFoundError")
        ctx.engine.unload_adapter(name)
        return web.Response(text=f"Success: LoRA adapter '{name}' removed successfully.")

    app.router.add_post("/v1/load_lora_adapter", load)
    app.router.add_post("/v1/unload_lora_adapter", unload)


async def _body(request: web.Request) -> dict[str, Any]:
    try:
        body = await request.json()
    except (json.JSONDecodeError, UnicodeDecodeError):
        raise web.HTTPBadRequest(
            text=json.dumps(oai.error_body("request body is not valid JSON", "BadRequestError",
                                           code=400)),
            content_type="application/json") from None
    return body if isinstance(body, dict) else {}


def _error(status: int, message: str, error_type: str) -> web.Response:
    return web.json_response(oai.error_body(message, error_type, code=status), status=status)
