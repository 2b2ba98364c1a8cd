# SPDX-License-Identifier: Apache-2.0
"""Measure the sustained throughput of one simulated GPU server on the Azure conversation trace.

Requests are drawn (seeded) from ``AzureLLMInferenceTrace_conv.csv.gz`` with their exact
prompt and output token counts. A closed loop of ``--clients`` (default twice
``max_num_seqs``) keeps the server saturated; after a warm-up, completions and output tokens
are counted over a window. Each speed is measured twice:

- ``virtual``: the engine alone on a virtual clock (exact model capacity, no HTTP);
- ``http``: a real server over loopback HTTP at ``--time-scale``, with non-streaming requests
  (shows what the event loop and time scaling preserve).

Figures are per *model* second, so they hold for any time scale. The routing benchmark sets
its 70% / 90% offered load from the ``virtual`` req/s summed over the fleet.

    .venv/bin/python bench/simulator_check.py [--speeds 1.0,0.6,0.4] [--time-scale 20]
"""

from __future__ import annotations

import argparse
import asyncio
import csv
import dataclasses
import gzip
import random
import statistics
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import aiohttp

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

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


async def main(argv: list[str] | None = None) -> int:
    """Run the check and print one table."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--speeds", default="1.0,0.6,0.4")
    p.add_argument("--time-scale", type=float, default=20.0)
    p.add_argument("--warmup", type=float, default=60.0, help="model seconds")
    p.add_argument("--window", type=float, default=600.0, help="model seconds (virtual)")
    p.add_argument("--http-window", type=float, default=240.0, help="model seconds (http)")
    p.add_argument("--clients", type=int, default=0, help="default: 2 * max_num_seqs")
    p.add_argument("--no-http", action="store_true")
    p.add_argument("--chunked-prefill", type=int, default=0, metavar="TOKENS",
                   help="vLLM v1's chunked prefill with TOKENS per iteration")
    args = p.parse_args(argv)
    reqs = load_trace(TRACE)
    base = EngineConfig()
    if args.chunked_prefill:
        base = base.chunked(args.chunked_prefill)
    clients = args.clients or 2 * base.max_num_seqs
    prompts = [r[0] for r in reqs]
    outputs = [r[1] for r in reqs]
    print(f"trace: {len(reqs)} requests; prompt mean {statistics.mean(prompts):.0f} / "
          f"p50 {statistics.median(prompts):.0f}; output mean {statistics.mean(outputs):.0f} / "
          f"p50 {statistics.median(outputs):.0f} tokens")  # fmt: skip
    print(f"engine: {base}")
    print(f"closed loop, {clients} clients; figures per model second\n")
    header = (f"{'speed':>5}  {'mode':<9}  {'req/s':>6}  {'out tok/s':>9}  "
              f"{'p50 TTFT':>8}  {'p50 E2E':>7}  {'unloaded TTFT/E2E (p50 req)':>27}  "
              f"{'lost':>5}")  # fmt: skip
    print(header)
    print("-" * len(header))
    capacity: dict[float, float] = {}
    for speed in (float(s) for s in args.speeds.split(",")):
        config = EngineConfig(**{**vars(base), "speed": speed})
        u_ttft, u_e2e = unloaded(config, 1020, 129)
        results = [await measure_virtual(config, reqs, clients, args.warmup, args.window)]
        capacity[speed] = results[0].req_per_s
        if not args.no_http:
            results.append(
                await measure_http(
                    config, reqs, clients, args.warmup, args.http_window, args.time_scale
                )
            )
        for r in results:
            print(f"{r.speed:>5.1f}  {r.mode:<9}  {r.req_per_s:>6.2f}  {r.out_tok_per_s:>9.0f}  "
                  f"{r.ttft_p50:>7.2f}s  {r.e2e_p50:>6.1f}s  "
                  f"{u_ttft:>15.3f}s / {u_e2e:.2f}s  {r.lost_share:>5.1%}")  # fmt: skip
    fleet = 2 * sum(capacity.values())
    names = " + ".join(f"2 x {speed:g}" for speed in capacity)
    print(f"\nfleet {names}: {fleet:.2f} req/s (virtual); "
          f"70% = {0.7 * fleet:.2f} req/s, 90% = {0.9 * fleet:.2f} req/s")  # fmt: skip
    print("lost: model time the HTTP server could not catch up on (CPU starvation); "
          "if above ~1%, lower --time-scale")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
