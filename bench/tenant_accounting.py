# SPDX-License-Identifier: Apache-2.0
"""Usage accounting against the simulators' own counters, with clients that leave mid-stream.

Two simulated GPU servers (in process), our balancer in front of them with a policy that
identifies three tenants by API key, and an embedded Valkey as the shared state. The
tenants send ``--requests`` requests in batches of ``--batch``: a third not streamed, a fifth
of the streamed ones asking for ``stream_options.include_usage``, and every ``--leave-every``
th streamed one read for a random number of pieces, then closed by its client. When the
balancer has stopped (it reconciles the cancelled streams' tokens from the engines'
generated-token counters then, and at idle moments before), the usage summed per tenant
from the shared state is compared with what the simulators counted. The tenants issue's
goal: equal, exactly, on 10,000 requests with cancellations::

    .venv/bin/python bench/tenant_accounting.py [--requests 10000] [--leave-every 7]
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import random
import sys
import time
from collections import Counter
from pathlib import Path

import aiohttp

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from policies import load_policy
from policies.model import Identity, Tenant
from regions.balancer import BackendSpec, BalancerConfig, SharedStateConfig, build_balancer
from regions.simulator import Fleet, ServerSpec
from state import AsyncStateStore, EmbeddedValkey
from tenants.api_keys import new_key, store_key
from tenants.usage import read_log, usage_between

POLICY = Path(__file__).resolve().parents[1] / "policies" / "examples" / "global.dp"
MODEL = "sim-model"
TENANTS = ("acme", "globex", "initech")


async def run(args: argparse.Namespace) -> int:
    base = load_policy(str(POLICY))
    policy = dataclasses.replace(base, identity=Identity(),
                                 tenants=tuple(Tenant(t) for t in TENANTS))
    rng = random.Random(args.seed)
    with EmbeddedValkey() as valkey:
        shared = SharedStateConfig(valkey.url, prefix="bench-accounting")
        store = AsyncStateStore.from_url(valkey.url, prefix=shared.prefix)
        keys = {}
        for tenant in TENANTS:
            made = new_key(tenant)
            await store_key(store, made.stored)
            keys[tenant] = {"Authorization": f"Bearer {made.token}"}
        started = time.time()
        outcomes: Counter[str] = Counter()
        specs = [ServerSpec(f"gpu{i}", models=(MODEL,)) for i in range(2)]
        async with Fleet(specs, time_scale=args.scale) as fleet:
            backends = [BackendSpec(s.spec.name, s.url, (MODEL,), 32) for s in fleet]
            balancer = build_balancer("eu-west", backends, shared_state=shared,
                                      policy=policy, config=BalancerConfig(scrape_every_s=0))
            async with balancer, aiohttp.ClientSession(base_url=balancer.url) as client:

                async def one(n: int) -> None:
                    tenant = TENANTS[(n // 2) % len(TENANTS)]
                    stream = n % 3 != 0
                    body = {"model": MODEL, "prompt": "hello",
                            "max_tokens": rng.randint(1, 60),
                            "x_prompt_tokens": rng.randint(5, 400), "stream": stream}
                    if stream and n % 5 == 0:
                        body["stream_options"] = {"include_usage": True}
                    leave = stream and args.leave_every and n % args.leave_every == 0
                    async with client.post("/v1/completions", json=body,
                                           headers=keys[tenant]) as resp:
                        if resp.status != 200:
                            outcomes[f"status {resp.status}"] += 1
                            await resp.read()
                            return
                        if leave:  # read a few pieces, then go away mid-stream
                            for _ in range(rng.randint(1, 4)):
                                if not await resp.content.readany():
                                    break
                            outcomes["left mid-stream"] += 1
                            resp.close()
                            return
                        await resp.read()
                        outcomes["read whole"] += 1

                t0 = time.monotonic()
                for first in range(0, args.requests, args.batch):
                    await asyncio.gather(*(one(n) for n in range(
                        first, min(args.requests, first + args.batch))))
                sent_s = time.monotonic() - t0
            sims_prompt = sum(s.engine.state().counters.prompt_tokens for s in fleet)
            sims_output = sum(s.engine.state().counters.generation_tokens for s in fleet)
        rows = await usage_between(store, started - 60, time.time() + 60)
        log_kinds: Counter[str] = Counter()
        relayed = reconciled = 0
        after = "-"
        while page := await read_log(store, after, count=10_000):
            for _, fields in page:
                log_kinds[fields["kind"]] += 1
                if fields["kind"] == "reconcile":
                    reconciled += int(fields["output_tokens"])
                else:
                    relayed += int(fields["output_tokens"])
            after = page[-1][0]
        await store.close()
    print(f"{args.requests} requests in {sent_s:.1f} s, batches of {args.batch}: "
          + ", ".join(f"{k} {v}" for k, v in sorted(outcomes.items())))
    print(f"reconciliations: {dict(balancer.reconcile.outcomes)}; usage log entries: "
          f"{dict(log_kinds)}\n")
    print("| tenant | requests | cancelled | input tokens | output tokens |")
    print("|---|---|---|---|---|")
    for tenant in TENANTS:
        mine = [r for r in rows if r.key.tenant == tenant]
        print(f"| {tenant} | {sum(r.requests for r in mine):.0f} | "
              f"{sum(r.cancelled for r in mine):.0f} | {sum(r.input_tokens for r in mine):.0f}"
              f" | {sum(r.output_tokens for r in mine):.0f} |")
    accounted_in = sum(r.input_tokens for r in rows)
    accounted_out = sum(r.output_tokens for r in rows)
    print(f"\n| | input tokens | output tokens |\n|---|---|---|\n"
          f"| simulators counted | {sims_prompt} | {sims_output} |\n"
          f"| accounted, summed over tenants | {accounted_in:.0f} | {accounted_out:.0f} |\n"
          f"| of which relayed / reconciled | | {relayed} / {reconciled} |")
    exact = accounted_in == sims_prompt and accounted_out == sims_output
    print(f"\naccounting {'EXACT' if exact else 'NOT EXACT'}")
    return 0 if exact else 1


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--requests", type=int, default=10_000)
    parser.add_argument("--batch", type=int, default=50)
    parser.add_argument("--leave-every", type=int, default=7)
    parser.add_argument("--scale", type=float, default=40.0, help="simulator time scale")
    parser.add_argument("--seed", type=int, default=3)
    return asyncio.run(run(parser.parse_args()))


if __name__ == "__main__":
    raise SystemExit(main())
