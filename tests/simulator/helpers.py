# SPDX-License-Identifier: Apache-2.0
"""Helpers shared by the simulator's HTTP tests: a real server on port 0, polling, bodies."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import aiohttp

from regions.simulator.config import EngineConfig
from regions.simulator.fleet import ServerSpec, SimServer

MODEL = "sim-model"


@asynccontextmanager
async def running_server(
    *, time_scale: float = 50.0, speed: float = 1.0, seed: int = 0, engine_name: str = "vllm",
    **engine: Any
) -> AsyncIterator[tuple[SimServer, aiohttp.ClientSession]]:
    """A real server on 127.0.0.1:0 and a client session for it."""
    spec = ServerSpec(
        "test", "127.0.0.1", 0, (MODEL, "sim-lora"), speed=speed, engine=EngineConfig(**engine),
        engine_name=engine_name,
    )
    server = SimServer(spec, time_scale=time_scale, seed=seed)
    await server.start()
    try:
        async with aiohttp.ClientSession(base_url=server.url) as session:
            yield server, session
    finally:
        await server.stop()


async def eventually(
    check: Callable[[], Any], *, timeout: float = 5.0, interval: float = 0.01
) -> Any:
    """Poll an async ``check`` until it returns a truthy value or the timeout expires."""
    async with asyncio.timeout(timeout):
        while True:
            value = await check()
            if value:
                return value
            await asyncio.sleep(interval)


def completion(prompt_tokens: int = 100, output_tokens: int = 10, **extra: Any) -> dict[str, Any]:
    return {
        "model": MODEL,
        "prompt": "hello",
        "max_tokens": output_tokens,
        "x_prompt_tokens": prompt_tokens,
        **extra,
    }
