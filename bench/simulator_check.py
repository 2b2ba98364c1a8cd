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
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchkit.capacity import TRACE, load_trace, measure_http, measure_virtual, unloaded
from regions.simulator.config import EngineConfig


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
