# SPDX-License-Identifier: Apache-2.0
"""The region queue's fair share under a flood, replayed without servers: how much longer
the other tenants wait when one tenant floods, for many arrival sequences in seconds.

A discrete-event model of one region: ``--slots`` request slots, each request holding one
for its prefill plus its output tokens at a fixed time per token (no engine, no network),
and the real ``regions.balancer.scheduling.fair_share.FairShare`` choosing the next queued request.
Tenants a, b and c of equal weight send Poisson arrivals at ``load`` of capacity each; in
the flood a sends at ``mult`` times that through a quota of a third of capacity with a
minute's burst (as ``bench/tenant_fleet.py``). Reported per order and condition: b and c's
p99 wait in the queue in the flood over their p99 without it, over the seeds (median, worst,
and how many cells exceed 1.2x). The first 10 s of each run are left out (the flood's onset
is the fleet benchmark's business).

Orders: ``ours`` (the fair share as configured by default), ``no-flooding`` (the same with
the flooding rule off: the order before it), ``strict`` (b and c always before a: the bound
any order that never preempts a running request can reach).

    .venv/bin/python bench/fair_share_replay.py [--slots 16,32] [--seeds 6]
        [--orders ours,no-flooding,strict] [--conditions base,long,heavy,near-share]
"""

from __future__ import annotations

import argparse
import heapq
import math
import random
import statistics
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from regions.balancer.scheduling.fair_share import FairShare, FairShareConfig
from regions.balancer.types import Endpoint, RequestInfo

PROMPT_TOKENS = 200
PREDICTED_OUTPUT = 70.0
SKIP_S = 10.0

CONDITIONS: dict[str, dict] = {
    "base": {},  # outputs uniform 20-120 tokens, 11 ms a token, 30% each, flood 3x
    "long": {"tpot": 0.05, "seconds": 300.0},  # requests 4.5x longer
    "heavy": {"heavy": True},  # lognormal outputs
    "near-share": {"load": 0.32},  # b and c ask for nearly their share
    "light": {"load": 0.25},  # 75% load: little wait without the flood
    "flood-2x": {"mult": 2},
    "flood-6x": {"mult": 6},
}

ORDERS: dict[str, Callable[[], FairShare] | None] = {
    "ours": FairShare,
    "no-flooding": lambda: FairShare(FairShareConfig(flood_turnovers=math.inf)),
    "strict": None,  # b and c before a, else queue order
}


@dataclass
class Entry:
    request: RequestInfo
    since: float


def _request(tenant: str, output: int) -> RequestInfo:
    return RequestInfo(endpoint=Endpoint.COMPLETIONS, model="m", prompt_tokens=PROMPT_TOKENS,
                       max_tokens=output, output_tokens=PREDICTED_OUTPUT,
                       cost_tokens=PREDICTED_OUTPUT + PROMPT_TOKENS, stream=True, tenant=tenant)


def replay(seed: int, flood: bool, order: str, slots: int, *, tpot: float = 0.011,
           prefill: float = 0.03, seconds: float = 120.0, load: float = 0.3, mult: float = 3,
           heavy: bool = False) -> dict[str, list[float]]:
    """Each tenant's queue waits (sorted) of one run, the first ``SKIP_S`` seconds left out."""
    mean_output = math.exp(4.0 + 0.5) if heavy else 70.0
    capacity = slots / (prefill + mean_output * tpot)  # requests per second
    make = ORDERS[order]
    fair = make() if make is not None else FairShare()
    fair.set_tenants({"a": 1.0, "b": 1.0, "c": 1.0}, {})
    events: list[tuple[float, int, int, object, int]] = []  # time, kind, tiebreak, what
    tiebreak = 0
    for tenant in "abc":
        rate = load * capacity * (mult if flood and tenant == "a" else 1)
        rng = random.Random(seed * 1000 + ord(tenant))
        at = 0.0
        while at < seconds:
            at += rng.expovariate(rate)
            output = (min(2000, max(1, int(rng.lognormvariate(4.0, 1.0)))) if heavy
                      else rng.randint(20, 120))
            tiebreak += 1
            heapq.heappush(events, (at, 1, tiebreak, tenant, output))
    quota_rate = capacity / 3
    tokens, refilled = quota_rate * 60, 0.0
    queue: list[Entry] = []
    free = slots
    waits: dict[str, list[float]] = {t: [] for t in "abc"}
    while events:
        now, kind, _, what, output = heapq.heappop(events)
        if kind == 1:
            tenant = str(what)
            if flood and tenant == "a":
                tokens = min(quota_rate * 60, tokens + (now - refilled) * quota_rate)
                refilled = now
                if tokens < 1:
                    continue  # a 429
                tokens -= 1
            fair.arrived(tenant, queue)
            queue.append(Entry(_request(tenant, output), now))
        else:
            assert isinstance(what, RequestInfo)
            fair.finished(what, output)
            free += 1
        while free and queue:
            if make is None:
                i = next((j for j, e in enumerate(queue) if e.request.tenant != "a"), 0)
            else:
                i = fair.next(queue, now, slots)
            entry = queue.pop(i)
            fair.bound(entry.request)
            free -= 1
            if entry.since >= SKIP_S:
                waits[str(entry.request.tenant)].append(now - entry.since)
            tiebreak += 1
            done = now + prefill + (entry.request.max_tokens or 1) * tpot
            heapq.heappush(events, (done, 0, tiebreak, entry.request,
                                    entry.request.max_tokens or 1))
    return {t: sorted(w) for t, w in waits.items()}


def p99(values: list[float]) -> float:
    return values[int(0.99 * (len(values) - 1))] if values else 0.0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--slots", default="16,32")
    parser.add_argument("--seeds", type=int, default=6)
    parser.add_argument("--orders", default="ours,no-flooding,strict")
    parser.add_argument("--conditions", default="base,long,heavy,near-share")
    args = parser.parse_args()
    print("| slots | condition | order | median flood/no-flood p99 wait | worst | over 1.2x |")
    print("|---|---|---|---|---|---|")
    for slots in (int(s) for s in args.slots.split(",")):
        for condition in args.conditions.split(","):
            for order in args.orders.split(","):
                ratios = []
                for seed in range(args.seeds):
                    # the baseline of the strict bound is ours: strict is no policy to run
                    calm = replay(seed, False, "ours" if order == "strict" else order, slots,
                                  **CONDITIONS[condition])
                    flood = replay(seed, True, order, slots, **CONDITIONS[condition])
                    ratios += [p99(flood[t]) / max(p99(calm[t]), 1e-6) for t in "bc"]
                over = sum(r > 1.2 for r in ratios)
                print(f"| {slots} | {condition} | {order} | {statistics.median(ratios):.2f} | "
                      f"{max(ratios):.2f} | {over} of {len(ratios)} |", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
