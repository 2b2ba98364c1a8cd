# SPDX-License-Identifier: Apache-2.0
"""What the provisional capacity limit costs a tenanted region whose load steps up.

A region with tenants holds requests in its region queue at each GPU server's capacity.
Before a server has been seen saturated its capacity is unknown; the balancer then allows
it a provisional limit (``regions.balancer.scheduling.capacity``: 1.25 times the most it was seen
running, doubling while it runs all it is given, scraped every 0.1 s meanwhile). That keeps
a flood out of the engines' own queues, but a legitimate step in load is held at the
provisional limit for the scrapes it takes to grow.

This measures that cost: two simulated GPU servers (``--slots`` each), three tenants at
``--low`` of capacity (together) for ``--seconds``, then at ``--high`` for ``--seconds``.
The same through a balancer with ``--provisional-growth 0`` (unbounded until saturated,
as before) is the peer. Reported per balancer: the tenants' p99 TTFT and region queue wait
in the first 10 s after the step, over the whole high phase, and the low phase's.

    .venv/bin/python bench/tenant_step.py [--slots 32] [--low 0.1] [--high 0.9] [--seconds 30]
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from pathlib import Path

import uvloop

sys.path.insert(0, str(Path(__file__).resolve().parent))
from tenant_fleet import (
    Tally,
    p99,
    phase,
    policy_text,
    simulated_fleet,
    start_balancer,
    tenant_keys,
)

STEP_WINDOW_S = 10.0
TENANTS = "abc"


def cells(tally: Tally, until: float | None = None) -> tuple[float, float, int]:
    """p99 TTFT, p99 region queue wait (s) and requests of every tenant's requests sent in the
    phase's first ``until`` seconds (all of them: None)."""
    sent = [o for t in TENANTS for o in tally.outcomes[t]
            if until is None or o.sent_at - tally.started < until]
    return (p99([o.ttft for o in sent if o.ttft is not None]),
            p99([o.queued for o in sent if o.queued is not None]), len(sent))


async def main_async(args: argparse.Namespace) -> None:
    tenants = "".join(f"tenant {t} {{ }}\n" for t in TENANTS)
    rows = []
    async with simulated_fleet(args.slots, args.scale, args.probe_seconds,
                               "bench-tenant-step-") as bench:
        cap = bench.cap
        for label, growth in (("provisional limit (default)", None),
                              ("unbounded until saturated (growth 0)", "0")):
            extra = ("--provisional-growth", growth) if growth else ()
            name = "ours" if growth is None else "peer"
            balancer = start_balancer(bench.workdir, policy_text(bench.sims, tenants, True),
                                      bench.redis, name, extra)
            bench.procs.append(balancer)
            keys = await tenant_keys(bench.redis, name)
            await asyncio.sleep(1.0)
            low = await phase(balancer.url, keys, {t: args.low * cap / 3 for t in TENANTS},
                              args.seconds, args.seed)
            high = await phase(balancer.url, keys, {t: args.high * cap / 3 for t in TENANTS},
                               args.seconds, args.seed + 10)
            rows.append((label, cells(high, STEP_WINDOW_S), cells(high), cells(low),
                         sorted(high.limits)))
            balancer.stop(10)
            await asyncio.sleep(5.0)  # the servers finish what they run
    print(f"\nLoad step on 2 x {args.slots} slots: {args.low:.0%} -> {args.high:.0%} of "
          f"capacity ({cap:.1f} req/s), {args.seconds:.0f} s each, three tenants.\n")
    print(f"| balancer | first {STEP_WINDOW_S:.0f} s after the step: p99 TTFT s | p99 queue s "
          "| whole high phase: p99 TTFT s | p99 queue s | low phase: p99 TTFT s | limits seen |")
    print("|---|---|---|---|---|---|---|")
    for label, first, whole, before, limits in rows:
        print(f"| {label} | {first[0]:.3f} | {first[1]:.3f} | {whole[0]:.3f} | {whole[1]:.3f} "
              f"| {before[0]:.3f} | {', '.join(f'{v:.0f}' for v in limits) or '-'} |")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--slots", type=int, default=32)
    parser.add_argument("--low", type=float, default=0.1)
    parser.add_argument("--high", type=float, default=0.9)
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--probe-seconds", type=float, default=15.0)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--scale", type=float, default=2.0)
    args = parser.parse_args()
    uvloop.run(main_async(args))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
