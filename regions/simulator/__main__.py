# SPDX-License-Identifier: Apache-2.0
"""Run one simulated GPU server as its own process.

::

    python -m regions.simulator --listen 127.0.1.11:8000 --model llama-3-8b --speed 0.6

Prints ``listening on http://HOST:PORT`` once bound (useful with port 0), then serves until
SIGINT or SIGTERM.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import signal
import sys
from collections.abc import Sequence

from regions.simulator.config import EngineConfig
from regions.simulator.errors import SimConfigError
from regions.simulator.fleet import ServerSpec, SimServer, parse_listen
from regions.simulator.metrics import ENGINE_METRICS
from telemetry import genai
from telemetry.otel import TracingConfigError, tracing_from_env


def build_parser() -> argparse.ArgumentParser:
    defaults = EngineConfig()
    p = argparse.ArgumentParser(prog="python -m regions.simulator", description=__doc__)
    p.add_argument("--listen", default="127.0.0.1:8000", help="HOST:PORT (port 0: any)")
    p.add_argument("--name", default=None, help="server name (default: the listen address)")
    p.add_argument("--model", action="append", dest="models", help="served model; repeatable")
    p.add_argument("--root", action="append", dest="roots", default=[], metavar="MODEL=ROOT",
                   help="what /v1/models says MODEL was loaded from (vLLM's root; default "
                        "the model's name); repeatable")
    p.add_argument("--speed", type=float, default=1.0, help="1.0 H100, 0.6 A100, 0.4 throttled")
    p.add_argument("--engine", default="vllm", choices=sorted(ENGINE_METRICS),
                   help="whose metric names and info endpoints it serves (default vllm)")
    p.add_argument("--time-scale", type=float, default=1.0, help="model seconds per wall second")
    p.add_argument("--max-num-seqs", type=int, default=defaults.max_num_seqs)
    p.add_argument("--kv-cache-tokens", type=int, default=defaults.kv_cache_tokens)
    p.add_argument("--max-model-len", type=int, default=defaults.max_model_len)
    p.add_argument("--chunked-prefill", type=int, default=0, metavar="TOKENS",
                   help="vLLM v1 scheduling: decodes and prompt chunks share TOKENS per "
                        "iteration (its --max-num-batched-tokens); 0: prefill apart (default)")
    p.add_argument("--max-concurrent-requests", type=int, default=None,
                   help="--engine tgi: requests in flight before 429 (default TGI's 128)")
    p.add_argument("--no-prefix-caching", dest="prefix_caching", action="store_false",
                   help="turn off automatic prefix caching (vLLM's --no-enable-prefix-caching)")
    p.add_argument("--block-size", type=int, default=defaults.block_size,
                   help="tokens per KV block (vLLM's --block-size)")
    p.add_argument("--kv-events", default=None, metavar="ENDPOINT",
                   help="publish KV events on this ZeroMQ address, as vLLM's "
                        "--kv-events-config endpoint (e.g. tcp://127.0.0.1:5557)")
    p.add_argument("--kv-events-replay", default=None, metavar="ENDPOINT",
                   help="serve replays of missed KV-event batches on this address")
    p.add_argument("--scheduling-policy", default="fcfs", choices=("fcfs", "priority"),
                   help="vLLM's --scheduling-policy: priority orders the waiting queue by "
                        "the requests' priority field (lower first) and preempts the lowest")
    p.add_argument("--max-loras", type=int, default=0,
                   help="LoRA adapters one batch may use (vLLM's --max-loras; 0: no LoRA)")
    p.add_argument("--max-cpu-loras", type=int, default=0,
                   help="adapters kept loaded (vLLM's --max-cpu-loras; 0: --max-loras)")
    p.add_argument("--lora-load-s", type=float, default=defaults.lora_load_s,
                   help="model seconds one adapter load stalls the engine")
    p.add_argument("--lora", action="append", dest="loras", default=[], metavar="NAME=PATH",
                   help="an adapter loaded at start (vLLM's --lora-modules); repeatable")
    p.add_argument("--seed", type=int, default=0, help="seed of the error5xx fault")
    p.add_argument("--wake-s", type=float, default=5.0,
                   help="model seconds a wake from sleep level 1 takes (POST /wake_up)")
    p.add_argument("--cold-start-s", type=float, default=0.0,
                   help="model seconds from the start (or a level 2 sleep) to serving")
    p.add_argument("--asleep", action="store_true",
                   help="start asleep, as a standby server (vLLM's sleep mode)")
    return p


async def serve(spec: ServerSpec, time_scale: float, seed: int) -> None:
    """Run one server until SIGINT/SIGTERM."""
    tracing = tracing_from_env("director-simulator", genai.VLLM_SCOPE)
    server = SimServer(spec, time_scale=time_scale, seed=seed,
                       tracer=tracing.tracer if tracing is not None else None)
    await server.start()
    print(f"listening on {server.url}", flush=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError):
            loop.add_signal_handler(sig, stop.set)
    try:
        await stop.wait()
    finally:
        await server.stop()
        if tracing is not None:
            tracing.shutdown()


def _pair(item: str, flag: str, shape: str) -> tuple[str, str]:
    key, sep, value = item.partition("=")
    if not sep or not key or not value:
        raise SimConfigError(f"{flag}: expected {shape}, got {item!r}")
    return key, value


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``python -m regions.simulator``."""
    args = build_parser().parse_args(argv)
    try:
        host, port = parse_listen(args.listen)
        engine = EngineConfig(
            max_num_seqs=args.max_num_seqs,
            kv_cache_tokens=args.kv_cache_tokens,
            max_model_len=args.max_model_len,
            prefix_caching=args.prefix_caching,
            block_size=args.block_size,
            max_loras=args.max_loras,
            max_cpu_loras=args.max_cpu_loras,
            lora_load_s=args.lora_load_s,
            scheduling_policy=args.scheduling_policy,
        )
        if args.chunked_prefill:
            engine = engine.chunked(args.chunked_prefill)
        spec = ServerSpec(
            name=args.name or args.listen,
            host=host,
            port=port,
            models=tuple(args.models or ["sim-model"]),
            speed=args.speed,
            engine=engine,
            engine_name=args.engine,
            max_concurrent_requests=args.max_concurrent_requests,
            kv_events=args.kv_events,
            kv_events_replay=args.kv_events_replay,
            roots=tuple(_pair(item, "--root", "MODEL=ROOT") for item in args.roots),
            lora_modules=tuple(_pair(item, "--lora", "NAME=PATH") for item in args.loras),
            wake_s=args.wake_s,
            cold_start_s=args.cold_start_s,
            asleep=args.asleep,
        )
        _ = spec.engine_config  # validates speed early
    except SimConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    try:
        asyncio.run(serve(spec, args.time_scale, args.seed))
    except TracingConfigError as exc:
        print(f"error: tracing: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
