# SPDX-License-Identifier: Apache-2.0
"""The sustained throughput of one simulated GPU server on a trace: a closed loop of clients
keeps it saturated; after a warm-up, completions and output tokens are counted over a window,
per *model* second (so the figures hold for any time scale).

- ``measure_virtual``: the engine alone on a virtual clock (exact model capacity, no HTTP);
  the routing matrix sets each cell's offered load from it (``routing_matrix.server_capacity``);
- ``measure_http``: a real server over loopback HTTP at a time scale (what the event loop and
  time scaling preserve).

``bench/simulator_check.py`` prints both for a few speeds.
"""

from __future__ import annotations

import asyncio
import csv
import dataclasses
import gzip
import random
import statistics
import time
from dataclasses import dataclass
from pathlib import Path

import aiohttp

from director.datasets import trace_path
from regions.simulator.clock import VirtualClock
from regions.simulator.config import EngineConfig
from regions.simulator.engine import Engine
from regions.simulator.fleet import ServerSpec, SimServer

TRACE = trace_path("azure-llm-2023/AzureLLMInferenceTrace_conv.csv.gz")
MODEL = "sim-model"


@dataclass(frozen=True)
class Result:
    speed: float
    mode: str
    req_per_s: float
    out_tok_per_s: float
    ttft_p50: float
    e2e_p50: float
    lost_share: float = 0.0


def load_trace(path: Path) -> list[tuple[int, int]]:
    """(prompt tokens, output tokens) of every request in the trace."""
    with gzip.open(path, "rt", newline="") as f:
        return [(int(r["ContextTokens"]), int(r["GeneratedTokens"])) for r in csv.DictReader(f)]


def _summarise(
    speed: float, mode: str, done: list[tuple[float, float, float, int]], t0: float, t1: float
) -> Result:
    """``done`` holds (finish time, ttft, e2e, output tokens) in model seconds."""
    window = [d for d in done if t0 <= d[0] < t1]
    span = t1 - t0
    return Result(
        speed,
        mode,
        len(window) / span,
        sum(d[3] for d in window) / span,
        statistics.median(d[1] for d in window),
        statistics.median(d[2] for d in window),
    )


async def measure_virtual(
    config: EngineConfig, reqs: list[tuple[int, int]], clients: int, warmup: float, window: float
) -> Result:
    """Saturate the engine alone on a virtual clock."""
    clock = VirtualClock()
    engine = Engine(config, clock)
    await engine.start()
    rng = random.Random(1)
    done: list[tuple[float, float, float, int]] = []
    end = warmup + window

    async def client() -> None:
        while clock.now() < end:
            prompt, output = rng.choice(reqs)
            seq = await engine.wait(engine.submit(prompt, output))
            assert seq.first_token_at is not None and seq.finished_at is not None
            done.append(
                (seq.finished_at, seq.first_token_at - seq.arrival, seq.finished_at - seq.arrival,
                 output)
            )  # fmt: skip

    await asyncio.gather(*(client() for _ in range(clients)))
    await engine.stop()
    return _summarise(config.speed, "virtual", done, warmup, end)


async def measure_http(
    config: EngineConfig,
    reqs: list[tuple[int, int]],
    clients: int,
    warmup: float,
    window: float,
    time_scale: float,
) -> Result:
    """Saturate a real server over loopback HTTP; times converted back to model seconds."""
    server = SimServer(
        ServerSpec("check", models=(MODEL,), speed=config.speed, engine=config),
        time_scale=time_scale,
    )
    await server.start()
    rng = random.Random(1)
    done: list[tuple[float, float, float, int]] = []
    origin = time.monotonic()
    end = warmup + window

    def model_now() -> float:
        return (time.monotonic() - origin) * time_scale

    async def client(session: aiohttp.ClientSession) -> None:
        while model_now() < end:
            prompt, output = rng.choice(reqs)
            body = {"model": MODEL, "prompt": "x", "max_tokens": output,
                    "x_prompt_tokens": prompt, "stream": True}  # fmt: skip
            start = model_now()
            ttft = None
            async with session.post(f"{server.url}/v1/completions", json=body) as resp:
                resp.raise_for_status()
                async for line in resp.content:
                    if ttft is None and line.startswith(b"data: {"):
                        ttft = model_now() - start
            finish = model_now()
            done.append((finish, ttft or 0.0, finish - start, output))

    conn = aiohttp.TCPConnector(limit=clients)
    async with aiohttp.ClientSession(connector=conn) as session:
        await asyncio.gather(*(client(session) for _ in range(clients)))
    lost = server.engine.state().lost_s
    await server.stop()
    result = _summarise(config.speed, f"http x{time_scale:g}", done, warmup, end)
    return dataclasses.replace(result, lost_share=lost / end)


def unloaded(config: EngineConfig, prompt: int, output: int) -> tuple[float, float]:
    """TTFT and E2E of one request alone on the server, from the model's formulas."""
    ttft = config.prefill_seconds(prompt)
    return ttft, ttft + (output - 1) * config.decode_step_seconds(1)
