# SPDX-License-Identifier: Apache-2.0
"""How fast an exact-match cache hit answers, at the client and inside the balancer.

A simulated GPU server behind our balancer with the cache on (``BalancerConfig.cache``),
the store in a real embedded Valkey (as a region with shared state runs it) or in the
balancer's memory. One deterministic request is answered once by the GPU (stored), then
``--requests`` times from the cache, one at a time: the client's time to first byte and
to the end, and the balancer's own lookup-to-end histogram. Medians and p99 with 95%
bootstrap intervals; a hit must answer in under 5 ms to first byte.

::

    .venv/bin/python bench/cache_hit.py                   # both stores, 500 hits each
    .venv/bin/python bench/cache_hit.py --tokens 500 --requests 1000
"""

from __future__ import annotations

import argparse
import asyncio
import random
import statistics
import sys
import time
from pathlib import Path

import aiohttp

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from policies.model import ResponseCache
from regions.balancer import BackendSpec, BalancerConfig, SharedStateConfig, build_balancer
from regions.simulator import Fleet, ServerSpec
from state import EmbeddedValkey

MODEL = "sim-model"


def quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def bootstrap(values: list[float], q: float, rounds: int = 1000) -> tuple[float, float]:
    rng = random.Random(0)
    estimates = sorted(quantile(rng.choices(values, k=len(values)), q) for _ in range(rounds))
    return estimates[int(0.025 * rounds)], estimates[int(0.975 * rounds)]


async def run(store: str, tokens: int, requests: int) -> dict[str, list[float]]:
    fleet = Fleet([ServerSpec("gpu0", models=(MODEL,))], time_scale=20)
    valkey = EmbeddedValkey() if store == "valkey" else None
    if valkey is not None:
        valkey.__enter__()
    try:
        async with fleet:
            shared = SharedStateConfig(valkey.url, prefix="bench") if valkey else None
            config = BalancerConfig(cache=ResponseCache(ttl=600), shared_state=shared)
            backends = [BackendSpec("gpu0", fleet["gpu0"].url, (MODEL,), 8)]
            async with build_balancer("bench", backends, config) as balancer, \
                    aiohttp.ClientSession(base_url=balancer.url) as client:
                body = {"model": MODEL, "messages": [{"role": "user", "content": "2+2?"}],
                        "max_tokens": tokens, "temperature": 0, "stream": True}
                async with client.post("/v1/chat/completions", json=body) as resp:
                    await resp.read()
                await asyncio.sleep(0.2)  # the store follows the answer
                first, whole = [], []
                for _ in range(requests):
                    start = time.perf_counter()
                    async with client.post("/v1/chat/completions", json=body) as resp:
                        assert resp.headers.get("x-director-cache") == "hit", "not a hit"
                        await resp.content.readany()
                        first.append(time.perf_counter() - start)
                        await resp.read()
                        whole.append(time.perf_counter() - start)
                return {"first byte": first, "whole answer": whole}
    finally:
        if valkey is not None:
            valkey.__exit__(None, None, None)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tokens", type=int, default=100)
    parser.add_argument("--requests", type=int, default=500)
    parser.add_argument("--stores", default="valkey,memory")
    args = parser.parse_args()
    print(f"cache hits: {args.requests} one at a time, {args.tokens}-token streamed answers")
    print("| store | measure | p50 ms [95% CI] | p99 ms [95% CI] |")
    print("|---|---|---|---|")
    for store in args.stores.split(","):
        times = asyncio.run(run(store, args.tokens, args.requests))
        for measure, values in times.items():
            ms = [v * 1000 for v in values]
            lo50, hi50 = bootstrap(ms, 0.5)
            lo99, hi99 = bootstrap(ms, 0.99)
            print(f"| {store} | {measure} | {statistics.median(ms):.2f} [{lo50:.2f}-{hi50:.2f}]"
                  f" | {quantile(ms, 0.99):.2f} [{lo99:.2f}-{hi99:.2f}] |")


if __name__ == "__main__":
    main()
