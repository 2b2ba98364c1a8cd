# SPDX-License-Identifier: Apache-2.0
"""The autoscaling signal on a replayed trace: does ``director_desired_replicas`` track a
step in demand within two scrape intervals, and hold still under a constant load?

One region: ``--servers`` simulated vLLM servers (speed ``--speed``, time scale
``--time-scale``, a batch of ``--max-seqs``, the capacity the balancer is told) and the
balancer (its defaults, but for the demand signal's window and stabilization, set in
scrape intervals: ``window = --window`` x the interval, ``settle = --settle`` x it; at the
15 s default interval, the signal's own defaults of 15 s and 60 s), in this process. A
slice of the Azure conversation trace (its gaps, prompt and output token counts; another
slice per seed) is replayed at a constant rate
that is ``--load`` of the fleet's capacity for ``--phase`` scrape intervals, then at twice
that rate for as long (the step). Every ``--scrape`` seconds the admin ``/metrics`` is
read, as Prometheus would, for the model's ``director_desired_replicas``.

Per seed:

- **level before / after**: the median of the readings over the second half of each
  phase;
- **step delay**: scrape intervals from the step to the first reading at or above the
  level after minus one (a one-replica tolerance: the levels are integers);
- **changes**: how many times the reading changed over the second half of each phase (a
  constant load), and the range of readings there;
- **the need**: what the requests really needed, read at each scrape: the requests in
  flight and queued over a server's batch at the signal's target (``ceil``); its level
  after the step (the median of the second half) and the delay to that level, of the
  need itself and of the signal (the goal's measure: a level the demand reaches late, or
  a peak the signal's stabilization holds on to, is not counted as the signal's lag).

Reported: each seed, and the median step delay over the seeds with its range; the goal is
at most two intervals in every seed, and at most one change per steady half-phase.

::

    .venv/bin/python bench/desired_replicas.py        # 3 seeds, 15 s scrapes: the defaults
    .venv/bin/python bench/desired_replicas.py --scrape 5 --time-scale 5   # compressed
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import random
import re
import statistics
import sys
import time
from pathlib import Path

import aiohttp
import uvloop

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import itertools

from benchkit.routing_client import MODEL, body
from benchkit.routing_trace import load_named, replay
from regions.balancer import BackendSpec, BalancerConfig, build_balancer
from regions.balancer.scheduling.demand import DemandSettings
from regions.simulator import Fleet, ServerSpec
from regions.simulator.config import EngineConfig

CAPACITY_PER_SERVER = 5.27  # Azure conversation requests per model second at speed 1.0
GAUGE = re.compile(r'^director_desired_replicas\{model="([^"]+)"\} ([0-9.e+]+)$', re.M)
IN_FLIGHT = re.compile(r'^director_balancer_in_flight\{backend="[^"]+"\} ([0-9.e+]+)$', re.M)
QUEUE = re.compile(r'^director_balancer_queue ([0-9.e+]+)$', re.M)


async def one_seed(seed: int, args: argparse.Namespace) -> dict[str, object]:
    rng = random.Random(seed)
    trace = load_named("azure-conv")
    capacity = args.servers * CAPACITY_PER_SERVER * args.speed  # requests per model second
    rate = args.load * capacity * args.time_scale  # requests per wall second, before
    phase_s = args.phase * args.scrape
    count = int(rate * phase_s) + 2
    offset = rng.randrange(len(trace))
    before = replay(trace, offset, count, rate)
    after = replay(trace, offset + count, 2 * count, 2 * rate)
    arrivals = [(a.at, a) for a in before if a.at < phase_s]
    arrivals += [(phase_s + a.at, a) for a in after if a.at < phase_s]
    demand = DemandSettings(window_s=args.window * args.scrape,
                            settle_s=args.settle * args.scrape)
    engine = EngineConfig(max_num_seqs=args.max_seqs)
    specs = [ServerSpec(f"gpu{i}", models=(MODEL,), speed=args.speed, engine=engine)
             for i in range(args.servers)]
    readings: list[tuple[float, int]] = []
    busy: list[tuple[float, float]] = []  # (t, requests in flight and queued)
    async with Fleet(specs, time_scale=args.time_scale, seed=seed) as fleet:
        # capacity pinned to the batch, as a policy's max-seqs does
        backends = [BackendSpec(s.spec.name, s.url, (MODEL,), args.max_seqs) for s in fleet]
        async with build_balancer("bench", backends, BalancerConfig(demand=demand)) as bal, \
                aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as http:
            start = time.monotonic()

            failed = 0

            async def send(at: float, a: object) -> None:
                nonlocal failed
                await asyncio.sleep(max(0.0, start + at - time.monotonic()))
                try:
                    async with http.post(f"{bal.url}/v1/completions",
                                         json=body(a, max_tokens=None)) as resp:  # type: ignore[arg-type]
                        await resp.read()
                        failed += resp.status != 200
                except aiohttp.ClientError:
                    failed += 1

            async def scrape() -> None:
                n = 0
                while True:
                    n += 1
                    await asyncio.sleep(max(0.0, start + n * args.scrape - time.monotonic()))
                    async with http.get(f"{bal.admin_url}/metrics") as resp:
                        text = await resp.text()
                    found = dict(GAUGE.findall(text))
                    now = time.monotonic() - start
                    readings.append((now, int(float(found.get(MODEL, 0)))))
                    busy.append((now, sum(float(v) for v in IN_FLIGHT.findall(text))
                                 + sum(float(v) for v in QUEUE.findall(text))))

            scraper = asyncio.create_task(scrape())
            await asyncio.gather(*(send(at, a) for at, a in arrivals))
            scraper.cancel()
    # the need the requests really made: those in the system at once, over a server's
    # share at the signal's target (the reference the signal is judged against)
    per_server = args.max_seqs * demand.target
    need = [(t, math.ceil(b / per_server)) for t, b in busy]
    return with_need(summarize(seed, readings, phase_s, args.scrape, rate) | {
        "failed": failed, "need": need}, phase_s, args.scrape)


def with_need(result: dict[str, object], phase_s: float, interval: float) -> dict[str, object]:
    """``result`` with the need's own step delay, and the signal's delay to the need's
    level after the step (within one replica below it)."""
    need = result["need"]
    judged = summarize(int(result["seed"]), need, phase_s, interval, 0.0)  # type: ignore[arg-type]
    level = judged["level_after"]
    reached = next((t for t, v in result["readings"]  # type: ignore[attr-defined]
                    if t >= phase_s and v >= level - 1), None)
    return result | {
        "need_level_after": level,
        "need_delay_intervals": judged["step_delay_intervals"],
        "delay_to_need_intervals": None if reached is None else (reached - phase_s) / interval}


def summarize(seed: int, readings: list[tuple[float, int]], phase_s: float, interval: float,
              rate: float) -> dict[str, object]:
    def half(lo: float, hi: float) -> list[int]:
        return [v for t, v in readings if lo <= t < hi]

    steady_before = half(phase_s / 2, phase_s)
    steady_after = half(phase_s * 1.5, 2 * phase_s)
    level_before = statistics.median(steady_before)
    level_after = statistics.median(steady_after)
    reached = next((t for t, v in readings if t >= phase_s and v >= level_after - 1), None)
    delay = None if reached is None else (reached - phase_s) / interval

    def changes(values: list[int]) -> int:
        return sum(1 for a, b in itertools.pairwise(values) if a != b)

    return {"seed": seed, "rate_before": round(rate, 2), "level_before": level_before,
            "level_after": level_after, "step_delay_intervals": delay,
            "changes_before": changes(steady_before), "changes_after": changes(steady_after),
            "range_before": [min(steady_before), max(steady_before)],
            "range_after": [min(steady_after), max(steady_after)],
            "readings": readings}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--servers", type=int, default=24)
    parser.add_argument("--speed", type=float, default=0.5)
    parser.add_argument("--time-scale", type=float, default=2.0)
    parser.add_argument("--max-seqs", type=int, default=24, help="each server's batch")
    parser.add_argument("--load", type=float, default=0.2,
                        help="the first phase's demand, a share of the fleet's capacity")
    parser.add_argument("--scrape", type=float, default=15.0,
                        help="seconds between scrapes (Prometheus' and KEDA's default)")
    parser.add_argument("--phase", type=int, default=6, help="scrape intervals per phase")
    parser.add_argument("--window", type=float, default=1.0,
                        help="the signal's window, in scrape intervals")
    parser.add_argument("--settle", type=float, default=4.0,
                        help="its scale-down stabilization, in scrape intervals")
    parser.add_argument("--json", type=Path, default=None, help="append each seed here")
    args = parser.parse_args()
    results = []
    for seed in range(args.seeds):
        result = uvloop.run(one_seed(seed, args))
        results.append(result)
        if args.json is not None:
            with args.json.open("a") as f:
                f.write(json.dumps(result) + "\n")
        print(f"seed {seed}: {result['rate_before']} req/s then twice that; level "
              f"{result['level_before']} -> {result['level_after']}; step delay "
              f"{result['step_delay_intervals']} intervals; changes while steady "
              f"{result['changes_before']} / {result['changes_after']} (range "
              f"{result['range_before']} / {result['range_after']}); failed "
              f"{result['failed']}; the requests' own need reached its level "
              f"({result['need_level_after']}) after {result['need_delay_intervals']} "
              f"intervals, the signal reached it after {result['delay_to_need_intervals']}",
              flush=True)
    delays = [r["step_delay_intervals"] for r in results]
    known = [d for d in delays if d is not None]
    print(f"\nstep delay: median {statistics.median(known) if known else None} intervals "
          f"(range {min(known) if known else None}-{max(known) if known else None}; "
          f"{len(delays) - len(known)} seeds never reached the level); at most 2 in "
          f"{sum(1 for d in known if d <= 2)} of {len(delays)} seeds")
    worst = max(max(r["changes_before"], r["changes_after"]) for r in results)  # type: ignore[type-var]
    to_need = [r["delay_to_need_intervals"] for r in results]
    print(f"the signal at the need's level after the step: worst "
          f"{max((d for d in to_need if d is not None), default=None)} intervals "
          f"({sum(1 for d in to_need if d is None)} seeds never)")
    print(f"changes over a steady half-phase: worst {worst} "
          f"(of {args.phase // 2} readings)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
