# SPDX-License-Identifier: Apache-2.0
"""Our balancer in its own process, for the routing benchmark (same code path as
``director region serve``, on uvloop as it runs; ``--loop asyncio`` for the stock loop).

    python bench/routing_balancer.py --listen 127.0.0.1:8080 --profile default \\
        --backend gpu0=http://127.0.0.1:8001 --backend gpu1=http://127.0.0.1:8002

Profiles: ``default`` (the balancer's default pipeline; speeds are learned, not told),
``round-robin`` (filters model/health/not-tried, no scorer, the round-robin picker, and a
cap high enough that the balancer never holds a request: plain round robin),
``prefix`` (``least-requests`` and ``prefix-affinity`` at weight 2; with ``--kv-events``,
its precise index), ``completion-time`` (``completion-time`` and ``queue-depth`` scorers,
to compare) and ``outstanding-work`` (the default before the ``size-aware`` scorer:
``outstanding-work`` and ``queue-depth``, to compare). Tracing as ``region serve`` has it:
on when the ``OTEL_*`` variables ask (``telemetry.otel``).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import signal
import sys
from pathlib import Path

import uvloop

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from regions.balancer import BackendSpec, BalancerConfig, serve
from telemetry.otel import tracing_from_env

MODEL = "sim-model"
PROFILES = {
    "default": BalancerConfig(),
    "round-robin": BalancerConfig(
        filters=("model", "health", "not-tried"),
        scorers=(),
        picker="round-robin",
        max_concurrency=100_000,
    ),
    "prefix": BalancerConfig(scorers=(("least-requests", 1.0), ("prefix-affinity", 2.0))),
    "completion-time": BalancerConfig(scorers=(("completion-time", 2.0), ("queue-depth", 1.0))),
    "outstanding-work": BalancerConfig(scorers=(("outstanding-work", 2.0), ("queue-depth", 1.0))),
}


async def run(listen: tuple[str, int], backends: list[BackendSpec], config: BalancerConfig) -> None:
    task = asyncio.create_task(serve("bench", backends, dataclasses.replace(config, listen=listen)))
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, task.cancel)
    with contextlib.suppress(asyncio.CancelledError):
        await task


def scorer_params(items: list[str]) -> dict[str, dict[str, float]]:
    """``["size-aware.hold=0.5", ...]`` -> ``{"size-aware": {"hold": 0.5}}``."""
    params: dict[str, dict[str, float]] = {}
    for item in items:
        key, _, value = item.partition("=")
        scorer, _, name = key.rpartition(".")
        if not scorer or not name or not value:
            raise SystemExit(f"--scorer-param: expected SCORER.NAME=VALUE, got {item!r}")
        params.setdefault(scorer, {})[name] = float(value)
    return params


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--listen", required=True, help="HOST:PORT")
    parser.add_argument("--profile", choices=sorted(PROFILES), default="default")
    parser.add_argument("--backend", action="append", required=True, help="NAME=URL")
    parser.add_argument("--loop", choices=("asyncio", "uvloop"), default="uvloop")
    parser.add_argument("--cap", type=int, default=None, help="per-backend concurrency cap")
    parser.add_argument(
        "--scorer-param",
        action="append",
        default=[],
        metavar="SCORER.NAME=VALUE",
        help="a scorer's parameter, e.g. size-aware.hold=0.5 (repeatable)",
    )
    parser.add_argument("--kv-events", action="append", default=[],
                        metavar="NAME=PUB[,REPLAY]",
                        help="where backend NAME publishes its KV events (repeatable)")
    args = parser.parse_args()
    config = PROFILES[args.profile]
    events = dict(item.partition("=")[::2] for item in args.kv_events)
    if args.cap is not None:
        config = dataclasses.replace(config, max_concurrency=args.cap)
    if args.scorer_param:
        config = dataclasses.replace(config, scorer_params=scorer_params(args.scorer_param))
    backends = []
    for item in args.backend:
        name, _, url = item.partition("=")
        pub, _, replay = events.get(name, "").partition(",")
        # the benchmark's servers are the simulator: its tokenizer keys their KV blocks
        backends.append(BackendSpec(name, url, (MODEL,), config.max_concurrency,
                                    kv_events=pub or None, kv_events_replay=replay or None,
                                    tokenizer="simulator"))
    host, _, port = args.listen.rpartition(":")
    tracing = tracing_from_env("director-balancer", "director.balancer")  # as region serve
    if tracing is not None:
        config = dataclasses.replace(config, tracer=tracing.tracer)
    if args.loop == "uvloop":
        asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())
    try:
        asyncio.run(run((host, int(port)), backends, config))
    finally:
        if tracing is not None:
            tracing.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
