# SPDX-License-Identifier: Apache-2.0
"""What our proxy adds: latency per request, CPU per streamed token, decision time.

1. **Added latency**: small streaming completions (16 prompt tokens, ``--tokens`` output
   tokens), one at a time, to one simulated GPU server (its own process, time scale 20, so a
   token takes 0.6 ms of wall time) directly and through each proxy: our balancer (default
   profile, uvloop, as ``director region serve`` runs it), nginx (``proxy_buffering off``)
   and HAProxy (``option http-no-delay``) when installed. Added latency = the proxy's
   TTFT / E2E percentile minus the direct one (wall milliseconds). Goal (issue 5): p50 <=
   1 ms, p99 <= 5 ms.
2. **CPU per streamed token**: the proxy process's user + system CPU over the run divided by
   the tokens it relayed.
3. **Decision time**: one synchronous pipeline run + lease + release (``Dispatcher.try_bind``)
   over 1,000 backends with the default profile, timed in-process (goal p99 <= 50 us).

::

    .venv/bin/python bench/proxy_overhead.py [--requests 1000] [--tokens 16] [--decision-only]

The machine is shared and small (2 cores): read the figures as orders of magnitude.
Measured 2026-11-22, medians of 3 runs alternated with runs of the previous code (1,000
requests of 16 tokens; wall milliseconds; another helper's benchmark ran beside them, load
average 1.2-1.7)::

    setup    TTFT p50   p99  E2E p50   p99  added TTFT p50   p99  added E2E p50   p99  CPU/token
    direct       1.18  1.65    10.46 11.49             -      -             -      -        -
    ours         2.40  3.52    11.91 13.24          1.22   1.87          1.45   1.75   139 us
    nginx        1.34  2.54    10.79 12.54          0.16   0.89          0.33   1.05    33 us
    haproxy      1.33  2.01    10.71 12.26          0.15   0.36          0.25   0.77    36 us

    previous code, same runs: added TTFT p50 1.33 ms, added E2E p50 1.38 ms, 147 us/token
    side by side (direct, previous code, this code and a bare aiohttp relay in turns of 100
    requests; medians of 4 runs): added TTFT p50 1.31 / 1.26 / 0.86 ms, CPU per token
    152 / 150 / 119 us

    decision, default profile: 6 backends p50 18 us, p99 44 us; 1,000 backends p50 48 us,
    p99 79 us (previous code, same runs: 59 / 101 us and 91 / 136 us). On a quiet machine
    (the other benchmark idle): 6 backends 16 / 40 us, 1,000 backends 28 / 61 us.

Decision time again on 2026-11-24, after the decision-speed work (steady views built inline,
plugin calls bound once, weighted totals in one pass, one model set per distinct list,
cheaper sampling; the same picks: ``tests/balancer/test_decision_sequence.py``). 15 runs of
``nice -n 19 .venv/bin/python bench/proxy_overhead.py --decision-only`` (5,000 decisions per
size) alternated with the same command on the code before (main at 64f6131); medians of the
runs' p50 / p99 in microseconds, p99 ranges in brackets; the other benchmarks idle, load
average 1.1-1.2::

    backends   before p50   p99            after p50   p99
    6                  11    14 [12-18]            9    13 [11-18]
    1,000              15    23 [18-28]           13    17 [14-24]

    the same loop with both codes in one process, in alternating blocks of 250 decisions
    (10,000 each, 3 runs): p50 -13% (6 backends), -14% (1,000); p99 at 1,000 -7% to -20%

    an earlier series beside another engineer's routing benchmark (load average 1.6-2.2;
    2e701b3 against this work less its sampling commit; 15 runs): 1,000 backends p50
    15 -> 13 us, p99 23 -> 20 us; 6 backends 11 -> 9 us, 16 -> 14 us

The 2026-11-22 figures above are of older code (before 0ac2111, which took about 10 us off a
decision) on a busier machine. The tail is not the collector: 1-2 young collections start
inside 5,000 timed decisions, and turning it off did not lower p99 (so ``gc.freeze()``
cannot). Under heavy load p99 jumps well past p98 (38 -> 56-62 us for the old code at 1,000
backends, 2026-11-24): preemption, which a shorter decision makes rarer but does not remove.

Goals: added p50 <= 1 ms (ours 1.2-1.3 ms: not met here; a bare aiohttp relay, with no
parsing, decision or accounting, adds 0.84-0.94 ms in the same conditions: most of ours is
aiohttp's own cost on this machine; of the rest, ~0.27 ms before the request leaves for the
GPU: JSON and ``RequestInfo`` ~70 us, the decision ~100 us, header filtering ~20 us, all
several times their in-cache cost), p99 <= 5 ms (met); decision p99 <= 50 us with 1,000
backends: met on 2026-11-24 (17 us, 13 us with 6 backends; the code before: 23 / 14 us in
the same runs; 20 us beside the routing benchmark), where the 2026-11-22 runs of older code on
a busier machine measured 61-79 us; under such load it is not assured. CPU
per token counts the per-request work too (one request is 16 tokens).
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import aiohttp
import uvloop

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from routing_procs import (
    Proc,
    have,
    start_haproxy,
    start_nginx,
    start_ours,
    start_simulator,
)

from regions.balancer.admission import Dispatcher
from regions.balancer.backends import BackendPool, BackendSpec
from regions.balancer.registry import Registry, build_profile, register_builtin_plugins
from regions.balancer.types import Endpoint, RequestInfo

TIME_SCALE = 20.0
MODEL = "sim-model"


@dataclass(frozen=True)
class Latency:
    ttft_ms: list[float]
    e2e_ms: list[float]
    tokens: int


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[max(0, min(len(ordered) - 1, round(q / 100 * len(ordered) + 0.5) - 1))]


async def measure(url: str, requests: int, tokens: int) -> Latency:
    body = {"model": MODEL, "prompt": "x", "max_tokens": tokens, "stream": True,
            "x_prompt_tokens": 16, "x_output_tokens": tokens}
    ttft: list[float] = []
    e2e: list[float] = []
    relayed = 0
    connector = aiohttp.TCPConnector(limit=1)
    async with aiohttp.ClientSession(connector=connector) as session:
        for i in range(requests + 20):  # the first 20 warm up connections and caches
            start = time.perf_counter()
            first = None
            async with session.post(url + "/v1/completions", json=body) as resp:
                while chunk := await resp.content.readany():
                    first = first or time.perf_counter()
                    relayed += chunk.count(b"data: {")
            end = time.perf_counter()
            if i >= 20 and first is not None:
                ttft.append((first - start) * 1000)
                e2e.append((end - start) * 1000)
    return Latency(ttft, e2e, relayed)


def decision_times(backends: int, rounds: int) -> list[float]:
    """Microseconds per try_bind + release over ``backends`` backends (default profile)."""
    specs = [BackendSpec(f"gpu{i}", f"http://127.0.0.1:{10000 + i}", (MODEL,), 16)
             for i in range(backends)]
    pool = BackendPool(specs)
    rng = random.Random(1)
    for b in pool:  # learned, varied speeds and load, as in a busy region
        pool.record_rate(b, rng.uniform(20, 120))
    profile = build_profile(register_builtin_plugins(Registry()), rng=random.Random(0))
    dispatcher = Dispatcher(pool, profile)
    held = [pool.lease(rng.randrange(backends), rng.uniform(50, 500)) for _ in range(backends * 8)]
    request = RequestInfo(Endpoint.COMPLETIONS, MODEL, 1000, 1000, 211.0, 217.7, True)
    times = []
    for i in range(rounds):
        # a lease ends somewhere, as in real traffic: the next pick sees a new snapshot
        held[i % len(held)].release()
        held[i % len(held)] = pool.lease(rng.randrange(backends), 200.0)
        start = time.perf_counter_ns()
        lease, _ = dispatcher.try_bind(request)
        elapsed = time.perf_counter_ns() - start
        if lease is not None:
            lease.release()
        times.append(elapsed / 1000)
    return times


def main() -> int:
    parser = argparse.ArgumentParser(description="Proxy overhead (see the module docstring).")
    parser.add_argument("--requests", type=int, default=1000)
    parser.add_argument("--tokens", type=int, default=16)
    parser.add_argument("--backends", type=int, default=1000)
    parser.add_argument("--decision-only", action="store_true",
                        help="only section 3, the decision time (a few seconds)")
    args = parser.parse_args()

    for backends in sorted({6, args.backends}):
        times = decision_times(backends, 5000)
        print(f"decision over {backends} backends (default profile, a lease taken and one "
              f"released before each pick): p50 {pct(times, 50):.0f} us, "
              f"p99 {pct(times, 99):.0f} us")
    if args.decision_only:
        return 0

    results: dict[str, tuple[Latency, float]] = {}
    with tempfile.TemporaryDirectory(prefix="director-overhead-") as tmp:
        workdir = Path(tmp)
        sim = start_simulator(workdir, "gpu0", 1.0, TIME_SCALE)
        upstream = [("gpu0", "127.0.0.1", int(sim.url.rsplit(":", 1)[1]))]
        proxies: list[tuple[str, object]] = [("direct", None),
                                             ("ours", lambda: start_ours(workdir, "default",
                                                                         upstream))]
        if have("nginx"):
            proxies.append(("nginx", lambda: start_nginx(workdir, upstream)))
        if have("haproxy"):
            proxies.append(("haproxy", lambda: start_haproxy(workdir, upstream)))
        try:
            for name, start in proxies:
                proc: Proc | None = start() if start else None  # type: ignore[operator]
                try:
                    url = proc.url if proc else sim.url
                    cpu0 = proc.cpu_seconds() if proc else 0.0
                    latency = uvloop.run(measure(url, args.requests, args.tokens))
                    cpu = (proc.cpu_seconds() - cpu0) if proc else 0.0
                finally:
                    if proc:
                        proc.stop()
                results[name] = (latency, cpu)
        finally:
            sim.stop()

    direct = results["direct"][0]
    print(f"\n{args.requests} sequential streaming requests of {args.tokens} tokens, "
          f"wall milliseconds (added = proxy - direct)")
    print(f"{'setup':<8} {'TTFT p50':>9} {'p99':>7} {'E2E p50':>8} {'p99':>7}  "
          f"{'added TTFT p50':>14} {'p99':>6}  {'added E2E p50':>13} {'p99':>6}  "
          f"{'CPU/token':>9}")
    for name, (lat, cpu) in results.items():
        per_token = f"{cpu / max(lat.tokens, 1) * 1e6:7.1f}us" if name != "direct" else "-"
        print(f"{name:<8} {pct(lat.ttft_ms, 50):9.2f} {pct(lat.ttft_ms, 99):7.2f} "
              f"{pct(lat.e2e_ms, 50):8.2f} {pct(lat.e2e_ms, 99):7.2f}  "
              f"{pct(lat.ttft_ms, 50) - pct(direct.ttft_ms, 50):14.2f} "
              f"{pct(lat.ttft_ms, 99) - pct(direct.ttft_ms, 99):6.2f}  "
              f"{pct(lat.e2e_ms, 50) - pct(direct.e2e_ms, 50):13.2f} "
              f"{pct(lat.e2e_ms, 99) - pct(direct.e2e_ms, 99):6.2f}  {per_token:>9}")
    mean_gap = statistics.mean(direct.e2e_ms) / max(args.tokens, 1)
    print(f"(direct: {mean_gap:.2f} ms of E2E per token at time scale {TIME_SCALE:g})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
