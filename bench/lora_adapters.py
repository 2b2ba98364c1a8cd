# SPDX-License-Identifier: Apache-2.0
"""LoRA adapters on demand: does the balancer keep each adapter where its requests go,
load little, and answer as fast as a fleet with every adapter loaded everywhere?

One region in process: ``--servers`` simulated vLLM servers (``--speed``) with LoRA on
(``--max-loras`` adapters per batch, ``lora_load_s`` per load) and the balancer in front.
Requests replay a slice of the Azure conversation trace (its gaps and token counts) at
``--load`` of the fleet's capacity, streamed; each names one of ``--adapters`` adapters,
drawn with Zipf popularity (``--zipf``). Runs, per seed (another trace slice and draw):

- ``preloaded``: every adapter loaded on every server at start (``--max-cpu-loras`` as
  many as there are adapters); the balancer finds them in ``/v1/models`` and balances by
  load alone: the reference.
- ``on-demand-C`` for each C of ``--cpu-slots``: no adapter loaded at start; servers keep
  C loaded (``--max-cpu-loras``, declared as ``adapter-slots``); the policy declares the
  adapters and the balancer places and loads them.
- ``free-loads-C`` (the largest C): the same, but a load costs the server nothing: what
  the placement alone gives, so that on-demand-C over it is the price of loading.

With ``--max-loras`` below the adapters a server sees at once, requests of a further
adapter wait in the engine until one of the batch's adapters has no request left (as in
vLLM): loading everything everywhere and balancing by load alone is then slow, which is
why the preloaded reference is not the only one.

Time is model time: the simulator runs ``--time-scale`` model seconds per wall second, and
TTFT (at the client) and the balancer's idle time before an adapter may be unloaded
(60 model seconds) are scaled to match. After ``--warmup`` model seconds the window of
``--window`` model seconds (default 600, ten minutes) is measured:

- hit rate: adapter requests the balancer sent to servers holding the adapter (no load
  started or waited for), of all;
- loads per adapter per server in the window, as the simulated servers count them (the
  goal: at most one each in ten minutes);
- TTFT p50 and p99 (model seconds) and p99 over the preloaded run's of the same seed,
  with a bootstrap 95% interval over the window's requests; failed requests.

::

    .venv/bin/python bench/lora_adapters.py [--seeds 3] [--cpu-slots 4,16] [--json FILE]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import random
import statistics
import sys
import time
from bisect import bisect
from dataclasses import dataclass, field
from itertools import accumulate
from pathlib import Path

import aiohttp

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchkit.routing_trace import arrivals_at_load, load_named
from regions.balancer import BackendSpec, BalancerConfig, build_balancer
from regions.balancer.adapters.placement import AdapterSpec
from regions.simulator import Fleet, ServerSpec
from regions.simulator.config import EngineConfig

MODEL = "bench-base"
CAPACITY_PER_SERVER = 5.27  # Azure conversation requests per model second at speed 1.0
IDLE_MODEL_S = 60.0  # an adapter idle this long may be unloaded for another


@dataclass
class Run:
    setup: str
    seed: int
    requests: int = 0
    failed: int = 0
    ttft_s: list[float] = field(default_factory=list)  # model seconds, in the window
    outcomes: dict[str, int] = field(default_factory=dict)  # balancer's, in the window
    loads: dict[str, int] = field(default_factory=dict)  # "server/adapter" -> loads
    lost_model_s: float = 0.0

    def p(self, q: float) -> float:
        return quantile(self.ttft_s, q)

    @property
    def hit_rate(self) -> float | None:
        """Adapter requests sent to a server that held the adapter: no load was needed."""
        total = sum(self.outcomes.values())
        held = self.outcomes.get("hit", 0) + self.outcomes.get("queued", 0)
        return held / total if total else None

    def to_json(self) -> dict[str, object]:
        return {"setup": self.setup, "seed": self.seed, "requests": self.requests,
                "failed": self.failed, "ttft_p50_s": self.p(0.5), "ttft_p99_s": self.p(0.99),
                "hit_rate": self.hit_rate, "outcomes": self.outcomes,
                "loads_in_window": sum(self.loads.values()),
                "max_loads_per_adapter_server": max(self.loads.values(), default=0),
                "pairs_over_one_load": sum(1 for n in self.loads.values() if n > 1),
                "lost_model_s": round(self.lost_model_s, 3)}


def quantile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def zipf_picker(n: int, s: float, rng: random.Random):
    weights = [1.0 / (k ** s) for k in range(1, n + 1)]
    cumulative = list(accumulate(weights))
    order = list(range(n))
    rng.shuffle(order)  # which adapter is popular is not its name's order

    def pick() -> str:
        return f"adapter-{order[bisect(cumulative, rng.random() * cumulative[-1])]:02d}"

    return pick


async def one_run(setup: str, cpu_slots: int, seed: int, args: argparse.Namespace) -> Run:
    scale = args.time_scale
    adapters = [AdapterSpec(f"adapter-{i:02d}", MODEL, f"/adapters/{i:02d}")
                for i in range(args.adapters)]
    preloaded = setup == "preloaded"
    engine = EngineConfig(max_loras=args.max_loras, max_cpu_loras=cpu_slots,
                          lora_load_s=0.0 if setup.startswith("free") else args.load_s)
    specs = [ServerSpec(f"gpu{i}", models=(MODEL,), speed=args.speed, engine=engine,
                        lora_modules=tuple((a.name, a.path) for a in adapters)
                        if preloaded else ()) for i in range(args.servers)]
    rng = random.Random(seed)
    trace = load_named("azure-conv")
    capacity = args.servers * CAPACITY_PER_SERVER * args.speed
    span = args.warmup + args.window
    arrivals = arrivals_at_load(trace, offset=rng.randrange(len(trace)), load=args.load,
                                capacity=capacity, until=span, span=span).arrivals
    pick = zipf_picker(args.adapters, args.zipf, random.Random(seed + 1))
    run = Run(setup, seed)
    async with Fleet(specs, time_scale=scale) as fleet:
        backends = [BackendSpec(s.spec.name, s.url, (MODEL,), adapter_slots=cpu_slots)
                    for s in fleet]
        config = BalancerConfig(adapters=() if preloaded else tuple(adapters),
                                adapter_sync_s=2.0)
        balancer = build_balancer("bench", backends, config)
        balancer.placement.min_idle_s = IDLE_MODEL_S / scale
        async with balancer, aiohttp.ClientSession(base_url=balancer.url) as client:
            if preloaded:  # wait until the balancer has found every adapter everywhere
                async with asyncio.timeout(30):
                    while any(len(balancer.placement.holding(s.spec.name)) < args.adapters
                              for s in fleet):
                        await asyncio.sleep(0.2)
            started = time.monotonic()
            window_at = started + args.warmup / scale
            before: dict[str, object] = {}

            async def ask(arrival_prompt: int, arrival_output: int, adapter: str) -> None:
                body = {"model": adapter, "prompt": "hi", "stream": True,
                        "max_tokens": arrival_output, "x_output_tokens": arrival_output,
                        "x_prompt_tokens": arrival_prompt}
                sent = time.monotonic()
                in_window = sent >= window_at
                first: float | None = None
                try:
                    async with client.post("/v1/completions", json=body) as resp:
                        async for _ in resp.content.iter_any():
                            if first is None:
                                first = time.monotonic()
                        ok = resp.status == 200
                except aiohttp.ClientError:
                    ok = False
                if in_window:
                    run.requests += 1
                    if not ok or first is None:
                        run.failed += 1
                    else:
                        run.ttft_s.append((first - sent) * scale)

            tasks: set[asyncio.Task[None]] = set()
            for a in arrivals:
                if not before and time.monotonic() >= window_at:
                    before = snapshot(fleet, balancer)
                delay = started + a.at / scale - time.monotonic()
                if delay > 0:
                    await asyncio.sleep(delay)
                task = asyncio.create_task(ask(a.prompt_tokens, a.output_tokens, pick()))
                tasks.add(task)
                task.add_done_callback(tasks.discard)
            await asyncio.gather(*tasks, return_exceptions=True)
            after = snapshot(fleet, balancer)
    run.outcomes = diff(after["outcomes"], before.get("outcomes", {}))
    run.loads = {k: v for k, v in diff(after["loads"], before.get("loads", {})).items() if v}
    run.lost_model_s = sum(s.engine.state().lost_s for s in fleet)
    return run


def snapshot(fleet: Fleet, balancer) -> dict[str, object]:
    loads = {f"{s.spec.name}/{a}": n for s in fleet for a, n in s.engine.adapters.loads.items()}
    outcomes = {sample.labels["outcome"]: int(sample.value)
                for metric in balancer.metrics.adapter_requests.collect()
                for sample in metric.samples if sample.name.endswith("_total")}
    return {"loads": loads, "outcomes": outcomes}


def diff(after: object, before: object) -> dict[str, int]:
    assert isinstance(after, dict) and isinstance(before, dict)
    return {k: v - before.get(k, 0) for k, v in after.items()}


def bootstrap_ratio(a: list[float], b: list[float], q: float, rng: random.Random,
                    rounds: int = 400) -> tuple[float, float]:
    """95% interval of quantile(a)/quantile(b), resampling each run's requests."""
    ratios = sorted(quantile(rng.choices(a, k=len(a)), q) / quantile(rng.choices(b, k=len(b)), q)
                    for _ in range(rounds))
    return ratios[int(0.025 * rounds)], ratios[int(0.975 * rounds) - 1]


def summary(runs: list[Run]) -> str:
    rng = random.Random(0)
    lines = ["| setup | seed | requests (failed) | hit rate | loads in window (max per "
             "adapter and server; pairs over one) | TTFT p50 s | TTFT p99 s | p99 / "
             "preloaded [95% CI] | p99 / free loads [95% CI] |",
             "|---|---|---|---|---|---|---|---|---|"]
    reference = {r.seed: r for r in runs if r.setup == "preloaded"}
    free = {r.seed: r for r in runs if r.setup.startswith("free")}
    for r in runs:
        ratios = []
        for ref in (reference.get(r.seed), free.get(r.seed)):
            if ref is None or r is ref or not r.ttft_s or not ref.ttft_s:
                ratios.append("-")
                continue
            lo, hi = bootstrap_ratio(r.ttft_s, ref.ttft_s, 0.99, rng)
            ratios.append(f"{r.p(0.99) / ref.p(0.99):.2f} [{lo:.2f}-{hi:.2f}]")
        hit = f"{r.hit_rate:.1%}" if r.hit_rate is not None else "-"
        data = r.to_json()
        lines.append(f"| {r.setup} | {r.seed} | {r.requests} ({r.failed}) | {hit} | "
                     f"{data['loads_in_window']} ({data['max_loads_per_adapter_server']}; "
                     f"{data['pairs_over_one_load']}) | {r.p(0.5):.3f} | {r.p(0.99):.3f} | "
                     f"{ratios[0]} | {ratios[1]} |")
    by_setup: dict[str, list[Run]] = {}
    for r in runs:
        by_setup.setdefault(r.setup, []).append(r)
    lines.append("")
    for setup, mine in by_setup.items():
        p99 = [r.p(0.99) for r in mine]
        hits = [r.hit_rate for r in mine if r.hit_rate is not None]
        lines.append(f"- {setup}: TTFT p99 median {statistics.median(p99):.3f} s "
                     f"({min(p99):.3f}-{max(p99):.3f})"
                     + (f", hit rate median {statistics.median(hits):.1%} "
                        f"({min(hits):.1%}-{max(hits):.1%})" if hits else ""))
    return "\n".join(lines)


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--first-seed", type=int, default=0)
    parser.add_argument("--servers", type=int, default=8)
    parser.add_argument("--adapters", type=int, default=50)
    parser.add_argument("--zipf", type=float, default=1.0)
    parser.add_argument("--max-loras", type=int, default=4)
    parser.add_argument("--cpu-slots", default="4,16",
                        help="comma-separated --max-cpu-loras of the on-demand runs")
    parser.add_argument("--load-s", type=float, default=0.5, help="model seconds per load")
    parser.add_argument("--speed", type=float, default=0.25)
    parser.add_argument("--load", type=float, default=0.3,
                        help="share of the fleet's capacity without LoRA")
    parser.add_argument("--time-scale", type=float, default=4.0)
    parser.add_argument("--warmup", type=float, default=240.0, help="model seconds")
    parser.add_argument("--window", type=float, default=600.0, help="model seconds")
    parser.add_argument("--only", default=None,
                        help="comma-separated setups to run (default: all)")
    parser.add_argument("--json", type=Path, default=None, help="write every run here")
    args = parser.parse_args()
    runs: list[Run] = []
    slots = [int(c) for c in args.cpu_slots.split(",")]
    setups = [("preloaded", args.adapters), *((f"on-demand-{c}", c) for c in slots),
              (f"free-loads-{max(slots)}", max(slots))]
    if args.only:
        setups = [s for s in setups if s[0] in args.only.split(",")]
    for seed in range(args.first_seed, args.first_seed + args.seeds):
        for setup, cpu_slots in setups:
            run = await one_run(setup, cpu_slots, seed, args)
            print(json.dumps(run.to_json()), flush=True)
            runs.append(run)
            if args.json is not None:
                args.json.write_text(json.dumps(
                    [{**r.to_json(), "ttft_s": r.ttft_s} for r in runs]))
    print(summary(runs))


if __name__ == "__main__":
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(main())
