# SPDX-License-Identifier: Apache-2.0
"""What tenant identity and quotas add to a request at the regional balancer.

Four balancers on loopback in front of one stand-in GPU server (an aiohttp app answering a
small non-streamed completion at once, so the balancer's own work is what is timed), with
a real embedded Valkey as the shared state:

- ``none``: no ``identity`` in the policy (today's behaviour);
- ``key``: a tenant identified by API key (``Authorization: Bearer dk_...``);
- ``key+quota``: the same tenant with request, input-token and output-token limits far above
  the offered load: admitted from the slices of its budget the balancer holds (a Valkey
  round trip now and then, off the request path, to top them up);
- ``key+concurrency``: the same limits and a concurrency limit, never reached: one Valkey
  round trip per request (the lease, which also charges the rates), released off the path.

Requests go one at a time, in interleaved blocks so that drift hits every setup alike; the
table gives p50 and p99 of the client's latency and the p50 added over ``none`` (the
tenants issue's goal: identification plus quota at most 0.2 ms p50). Medians of
``--rounds`` rounds::

    .venv/bin/python bench/tenant_overhead.py [--requests 3000] [--rounds 3]
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import sys
import time
from pathlib import Path

import aiohttp
import uvloop
from aiohttp import web

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from director import policy_gate
from policies.model import Identity, Policy, Tenant, TenantQuota
from regions.balancer import (
    BackendSpec,
    BalancerConfig,
    SharedStateConfig,
    build_balancer,
)
from state import AsyncStateStore, EmbeddedValkey
from tenants.api_keys import new_key, store_key

MODEL = "bench-model"
POLICY = Path(__file__).resolve().parents[1] / "policies/examples/global.dp"
BLOCK = 100
BODY = {"model": MODEL, "prompt": "hello there", "max_tokens": 4, "stream": False}


async def stand_in_gpu() -> tuple[web.AppRunner, str]:
    async def completions(_request: web.Request) -> web.Response:
        return web.json_response({"id": "x", "object": "text_completion", "choices": [
            {"index": 0, "text": "hi", "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 3, "completion_tokens": 1, "total_tokens": 4}})

    app = web.Application()
    app.router.add_post("/v1/completions", completions)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    return runner, f"http://127.0.0.1:{runner.addresses[0][1]}"


def policies(base: Policy) -> dict[str, Policy]:
    rates = TenantQuota(requests_per_minute=1e9, input_tokens_per_minute=1e12,
                        output_tokens_per_minute=1e12)
    slots = dataclasses.replace(rates, concurrent=10_000)
    return {
        "none": base,
        "key": dataclasses.replace(base, identity=Identity(), tenants=(Tenant("acme"),)),
        "key+quota": dataclasses.replace(base, identity=Identity(), tenants=(
            Tenant("acme", quota=rates),)),
        "key+concurrency": dataclasses.replace(base, identity=Identity(), tenants=(
            Tenant("acme", quota=slots),)),
    }


async def run(requests: int, rounds: int) -> None:
    base = policy_gate.load(str(POLICY))
    with EmbeddedValkey() as valkey:
        shared = SharedStateConfig(valkey.url, prefix="bench-tenants")
        made = new_key("acme")
        store = AsyncStateStore.from_url(valkey.url, prefix=shared.prefix)
        await store_key(store, made.stored)
        await store.close()
        headers = {"Authorization": f"Bearer {made.token}"}
        gpu, url = await stand_in_gpu()
        backends = [BackendSpec("gpu0", url, (MODEL,), 64)]
        balancers = {
            name: build_balancer(
                f"r-{name}",
                backends,
                BalancerConfig(scrape_every_s=0, shared_state=shared, policy=policy),
            )
            for name, policy in policies(base).items()
        }
        results: dict[str, list[tuple[float, float]]] = {name: [] for name in balancers}
        try:
            for balancer in balancers.values():
                await balancer.start()
            async with aiohttp.ClientSession() as client:
                for round_ in range(rounds):
                    times: dict[str, list[float]] = {name: [] for name in balancers}
                    for _ in range(max(1, requests // BLOCK)):
                        for name, balancer in balancers.items():
                            for _ in range(BLOCK):
                                started = time.perf_counter()
                                async with client.post(balancer.url + "/v1/completions",
                                                       json=BODY, headers=headers) as resp:
                                    await resp.read()
                                    assert resp.status == 200, (name, resp.status)
                                times[name].append((time.perf_counter() - started) * 1000)
                    for name, values in times.items():
                        values.sort()
                        results[name].append((statistics.median(values),
                                              values[int(0.99 * (len(values) - 1))]))
                    print(f"round {round_ + 1}: " + ", ".join(
                        f"{n} p50 {results[n][-1][0]:.3f} ms" for n in balancers), flush=True)
        finally:
            for balancer in balancers.values():
                await balancer.stop()
            await gpu.cleanup()
    none = statistics.median(p50 for p50, _ in results["none"])
    print(f"\n{requests} requests per setup and round, one at a time; medians of {rounds} "
          "rounds.\n")
    print("| setup | p50 ms | p99 ms | p50 added over none, ms |")
    print("|---|---|---|---|")
    for name, rows in results.items():
        p50 = statistics.median(p for p, _ in rows)
        p99 = statistics.median(p for _, p in rows)
        print(f"| {name} | {p50:.3f} | {p99:.3f} | {p50 - none:+.3f} |")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--requests", type=int, default=3000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    uvloop.run(run(args.requests, args.rounds))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
