# SPDX-License-Identifier: Apache-2.0
"""Tenants on a simulated fleet: a noisy neighbour, weighted fairness, a quota.

Two simulated GPU servers (their own processes, ``--slots`` sequences each, time scale
``--scale``), an embedded Valkey, and our balancer (``director region serve`` with a
generated policy that declares the tenants and ``--redis``), each tenant sending with its
own API key. The fleet's capacity (completed requests per second, closed loop at twice its
slots) is measured first; every rate below is a share of it.

1. **Noisy neighbour.** Tenants a, b and c of equal weight, each with a quota of a third of
   capacity, at 30% of capacity each (90% load) for ``--seconds``; then a at three times
   that while b and c go on. Reported: b and c's p99 TTFT and completed requests per second
   in the flood over the baseline (goals: at most 1.2x, within 2%), a's 429s. The same
   flood through a balancer whose policy identifies nobody (today's behaviour) is the peer.
   A's quota allows a burst of a minute's worth, so the flood runs long enough to spend it.
2. **Fairness.** Tenants w1 and w2 of weights 1 and 2, no quotas, each offering 1.5x the
   capacity (both backlogged) for ``--seconds``: per 10-second window, the weighted service
   (prompt + 2 x output tokens of the requests completed in it) of w2 over w1's (goal 2).

::

    .venv/bin/python bench/tenant_fleet.py [--seconds 60] [--flood-seconds 120] [--slots 16]
        [--variants ours,plain] [--no-fairness] [--seed 0] [--onset 15]
        [--pin-slots] [--reserve 33 | b:45,c:45]
"""

from __future__ import annotations

import argparse
import asyncio
import random
import statistics
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path

import aiohttp
import uvloop

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchkit.routing_procs import HOST, PYTHON, Proc, _spawn, _wait_port, start_simulator
from regions.simulator.config import EngineConfig
from state import AsyncStateStore, EmbeddedValkey
from state.ports import free_port
from tenants.api_keys import new_key, store_key

MODEL = "sim-model"
PROMPT_TOKENS = 200


def policy_text(sims: list[Proc], tenants: str, identity: bool, pin: int | None = None) -> str:
    seqs = f"; max-seqs {pin}" if pin else ""
    gpus = "\n".join(f"    gpu {p.name} {{ url {p.url}; models {MODEL}{seqs} }}" for p in sims)
    ident = "identity { api-keys on }\n" if identity else ""
    return f"""zone infer.example.com {{ ns ns1.infer.example.com 127.0.0.1 }}
region bench {{
    location 53.35 -6.26
    jurisdiction EU
    endpoints 127.0.0.1
    capacity 100rps
{gpus}
}}
service chat.infer.example.com {{ steer geo; all-down answer-nothing }}
{ident}{tenants if identity else ""}
"""


async def tenant_keys(redis: str, prefix: str) -> dict[str, str | None]:
    """A new API key for every bench tenant in the balancer's shared state."""
    store = AsyncStateStore.from_url(redis, prefix=prefix)
    keys: dict[str, str | None] = {}
    for tenant in ("a", "b", "c", "w1", "w2"):
        made = new_key(tenant)
        await store_key(store, made.stored)
        keys[tenant] = made.token
    await store.close()
    return keys


def start_balancer(workdir: Path, policy: str, redis: str, name: str,
                   extra: tuple[str, ...] = ()) -> Proc:
    path = workdir / f"{name}.dp"
    path.write_text(policy, encoding="utf-8")
    port = free_port()
    log = workdir / f"{name}.log"
    process = _spawn([PYTHON, "-m", "director", "region", "serve", "--policy", str(path),
                      "--region", "bench", "--listen", f"{HOST}:{port}", "--redis", redis,
                      "--state-prefix", name, *extra], log)
    _wait_port(port, process, name, log, 60)
    return Proc(name, process, f"http://{HOST}:{port}", log)


@dataclass
class Outcome:
    sent_at: float
    status: int
    ttft: float | None = None
    queued: float | None = None  # s in the region queue (the balancer's x-director-queue-ms)
    done_at: float | None = None
    weighted: float = 0.0


@dataclass
class Tally:
    outcomes: dict[str, list[Outcome]] = field(default_factory=lambda: defaultdict(list))
    started: float = field(default_factory=time.monotonic)
    window: tuple[float, float] = (0.0, 0.0)
    queue_max: float = 0.0
    limits: set[float] = field(default_factory=set)
    # (s since the phase began, requests in flight by backend, limit by backend), sampled
    samples: list[tuple[float, dict[str, int], dict[str, int]]] = field(default_factory=list)


async def one(session: aiohttp.ClientSession, url: str, key: str | None, tenant: str,
              tally: Tally, rng: random.Random) -> None:
    output = rng.randint(20, 120)
    body = {"model": MODEL, "prompt": "hello", "x_prompt_tokens": PROMPT_TOKENS,
            "max_tokens": output, "stream": True}
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    started = time.monotonic()
    outcome = Outcome(started, 0)
    tally.outcomes[tenant].append(outcome)
    try:
        async with session.post(url + "/v1/completions", json=body, headers=headers) as resp:
            outcome.status = resp.status
            if "x-director-queue-ms" in resp.headers:
                outcome.queued = int(resp.headers["x-director-queue-ms"]) / 1000
            if resp.status != 200:
                await resp.read()
                return
            first = True
            tokens = 0
            async for chunk in resp.content.iter_any():
                if first:
                    outcome.ttft = time.monotonic() - started
                    first = False
                tokens += chunk.count(b"data: {")
            outcome.done_at = time.monotonic()
            outcome.weighted = PROMPT_TOKENS + 2 * tokens
    except (TimeoutError, aiohttp.ClientError):
        outcome.status = -1


async def poisson(session: aiohttp.ClientSession, url: str, key: str | None, tenant: str,
                  rate: float, seconds: float, tally: Tally, seed: int) -> None:
    rng = random.Random(seed)
    end = time.monotonic() + seconds
    tasks = set()
    at = time.monotonic()
    while True:
        at += rng.expovariate(rate)
        if at >= end:
            break
        await asyncio.sleep(max(0.0, at - time.monotonic()))
        task = asyncio.create_task(one(session, url, key, tenant, tally, rng))
        tasks.add(task)
        task.add_done_callback(tasks.discard)
    if tasks:
        await asyncio.wait(tasks, timeout=120)


async def capacity(url: str, key: str | None, seconds: float, concurrency: int) -> float:
    tally = Tally()
    end = time.monotonic() + seconds
    rng = random.Random(1)
    async with aiohttp.ClientSession() as session:
        async def loop() -> None:
            while time.monotonic() < end:
                await one(session, url, key, "probe", tally, rng)
        await asyncio.gather(*(loop() for _ in range(concurrency)))
    done = [o for o in tally.outcomes["probe"] if o.done_at and o.sent_at > end - seconds + 3]
    return len(done) / (seconds - 3)


def p99(values: list[float]) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(0.99 * len(values)))] if values else float("nan")


def waits(tally: Tally, tenant: str) -> tuple[float, float]:
    """p99 of ``tenant``'s time in the region queue, and of its TTFT less that time (s)."""
    pairs = [(o.ttft, o.queued) for o in tally.outcomes[tenant]
             if o.ttft is not None and o.queued is not None]
    return p99([queued for _, queued in pairs]), p99([ttft - queued for ttft, queued in pairs])


def summary(tally: Tally, tenant: str, seconds: float) -> tuple[float, float, int]:
    """(p99 TTFT s, completed per s, 429s) of ``tenant``."""
    outcomes = tally.outcomes[tenant]
    ttfts = [o.ttft for o in outcomes if o.ttft is not None]
    start, end = tally.window
    completed = sum(1 for o in outcomes if o.done_at is not None and start <= o.done_at <= end)
    return p99(ttfts), completed / seconds, sum(1 for o in outcomes if o.status == 429)


async def phase(url: str, keys: dict[str, str | None], rates: dict[str, float],
                seconds: float, seed: int = 0) -> Tally:
    tally = Tally()
    connector = aiohttp.TCPConnector(limit=0)  # the client must not queue requests itself
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=300),
                                     connector=connector) as session:
        sampler = asyncio.create_task(sample_queue(session, url, tally))
        await asyncio.gather(*(poisson(session, url, keys[t], t, rate, seconds, tally,
                                       seed + n)
                               for n, (t, rate) in enumerate(sorted(rates.items()))))
        sampler.cancel()
    tally.window = (tally.started, tally.started + seconds)
    return tally


async def sample_queue(session: aiohttp.ClientSession, url: str, tally: Tally) -> None:
    """The balancer's region queue, requests in flight and learned capacities, four times a
    second."""
    while True:
        await asyncio.sleep(0.25)
        async with session.get(url + "/metrics") as resp:
            text = await resp.text()
        in_flight: dict[str, int] = {}
        limits: dict[str, int] = {}
        for line in text.splitlines():
            if line.startswith("director_balancer_queue "):
                tally.queue_max = max(tally.queue_max, float(line.split()[-1]))
            elif line.startswith("director_balancer_capacity_limit{"):
                tally.limits.add(float(line.split()[-1]))
                limits[_backend(line)] = int(float(line.split()[-1]))
            elif line.startswith("director_balancer_in_flight{"):
                in_flight[_backend(line)] = int(float(line.split()[-1]))
            elif line.startswith("director_balancer_tenant_in_flight{"):
                tenant = line.split('tenant="', 1)[1].split('"', 1)[0]
                in_flight["tenant " + tenant] = int(float(line.split()[-1]))
        tally.samples.append((time.monotonic() - tally.started, in_flight, limits))


def _backend(line: str) -> str:
    return line.split('backend="', 1)[1].split('"', 1)[0]


def onset(tally: Tally, seconds: int, what: str = "the flood") -> None:
    """A phase's first ``seconds``, second by second: b and c's longest TTFT and region
    queue wait for the requests sent in it, and the balancer's last sample in it."""
    print(f"\n| second of {what} | b longest TTFT s | b longest queue wait s | c longest "
          "TTFT s | c longest queue wait s | in flight / limit by backend, in flight by "
          "tenant (-: no limit) |")
    print("|---|---|---|---|---|---|")
    for second in range(seconds):
        cells = []
        for tenant in "bc":
            sent = [o for o in tally.outcomes[tenant]
                    if second <= o.sent_at - tally.started < second + 1]
            cells.append(max((o.ttft for o in sent if o.ttft is not None), default=0.0))
            cells.append(max((o.queued for o in sent if o.queued is not None), default=0.0))
        seen = [(f, lim) for at, f, lim in tally.samples if second <= at < second + 1]
        in_flight, limits = seen[-1] if seen else ({}, {})
        shown = ", ".join(f"{name} {count} / {limits.get(name, '-')}"
                          for name, count in sorted(in_flight.items()))
        print(f"| {second} | " + " | ".join(f"{v:.2f}" for v in cells) + f" | {shown} |")


@dataclass
class Bench:
    """What ``simulated_fleet`` started: the servers, the Valkey, the measured capacity and
    every process to stop at the end (balancers started later go in ``procs`` too)."""

    workdir: Path
    sims: list[Proc]
    redis: str
    plain: Proc  # the balancer that identifies nobody (today's behaviour)
    cap: float
    procs: list[Proc]


@asynccontextmanager
async def simulated_fleet(slots: int, scale: float, probe_seconds: float,
                          prefix: str) -> AsyncIterator[Bench]:
    """Two simulated GPU servers of ``slots`` sequences, an embedded Valkey, and the fleet's
    capacity (completed requests per second, closed loop at twice its slots) measured
    through a balancer that identifies nobody; every process in ``Bench.procs`` is stopped
    on exit."""
    workdir = Path(tempfile.mkdtemp(prefix=prefix))
    engine = EngineConfig(max_num_seqs=slots)
    sims = [start_simulator(workdir, f"gpu{i}", 1.0, scale, engine) for i in range(2)]
    procs: list[Proc] = list(sims)
    try:
        with EmbeddedValkey() as valkey:
            plain = start_balancer(workdir, policy_text(sims, "", False), valkey.url, "plain")
            procs.append(plain)
            cap = await capacity(plain.url, None, probe_seconds, 4 * slots)
            print(f"capacity: {cap:.1f} completed requests/s (closed loop)", flush=True)
            yield Bench(workdir, sims, valkey.url, plain, cap, procs)
    finally:
        for proc in procs:
            proc.stop(10)


def tenant_reserves(text: str) -> dict[str, float]:
    """``--reserve``: "33" (each of a, b and c) or "b:45,c:45" -> percent by tenant."""
    if not text:
        return {}
    if ":" not in text:
        return dict.fromkeys("abc", float(text))
    return {t.strip(): float(p) for t, p in (item.split(":") for item in text.split(","))}


async def main_async(args: argparse.Namespace) -> None:
    async with simulated_fleet(args.slots, args.scale, args.probe_seconds,
                               "bench-tenants-") as bench:
        workdir, sims, cap, plain = bench.workdir, bench.sims, bench.cap, bench.plain
        share_rpm = cap / 3 * 60
        reserves = tenant_reserves(args.reserve)
        tenants = "".join(f"tenant {t} {{ quota {{ requests {share_rpm:.0f}/min }}"
                          + (f" reserve {reserves[t]:g}%" if reserves.get(t) else "") + " }\n"
                          for t in "abc")
        tenants += "tenant w1 { weight 1 }\ntenant w2 { weight 2 }\n"
        pin = args.slots if args.pin_slots else None
        extra = ("--late-binding",) if args.late_binding else ()
        if args.provisional_growth is not None:
            extra += ("--provisional-growth", str(args.provisional_growth))
        ours = start_balancer(workdir, policy_text(sims, tenants, True, pin), bench.redis,
                              "ours", extra)
        bench.procs.append(ours)
        keys = await tenant_keys(bench.redis, "ours")
        await asyncio.sleep(1.0)
        third = 0.3 * cap
        rows = []
        variants = [v.strip() for v in args.variants.split(",") if v.strip()]
        for variant in variants:
            if variant == "ours":
                url, variant_keys, label = ours.url, keys, "ours"
            elif variant == "plain":
                url, variant_keys, label = plain.url, {t: None for t in "abc"}, \
                    "no identity (today)"
            else:
                raise SystemExit(f"unknown variant {variant!r}: ours, plain")
            before = await phase(url, variant_keys, {"a": third, "b": third, "c": third},
                                 args.seconds, args.seed)
            during = await phase(url, variant_keys, {"a": 3 * third, "b": third,
                                                     "c": third}, args.flood_seconds,
                                 args.seed)
            for tenant in "bc":
                b99, brate, _ = summary(before, tenant, args.seconds)
                f99, frate, _ = summary(during, tenant, args.flood_seconds)
                rows.append((label, tenant, b99, f99, f99 / b99, brate, frate,
                             frate / brate))
                (bq, bt), (fq, ft) = waits(before, tenant), waits(during, tenant)
                print(f"{label}, {tenant}: p99 in the region queue {bq:.3f} s before, "
                      f"{fq:.3f} s in the flood; p99 TTFT less the queue {bt:.3f} s "
                      f"before, {ft:.3f} s in the flood", flush=True)
            print(f"{label}: region queue at most {during.queue_max:.0f} in the flood, "
                  f"capacity limits {sorted(during.limits)}", flush=True)
            if args.onset:
                onset(before, args.onset, "the baseline")
                onset(during, args.onset)
            _, arate, a429 = summary(during, "a", args.flood_seconds)
            rows.append((label, "a (3x)", float("nan"), float("nan"), float("nan"),
                         float("nan"), arate, a429))
        print(f"\nNoisy neighbour: capacity {cap:.1f} req/s, 90% load, baseline "
              f"{args.seconds:.0f} s, flood {args.flood_seconds:.0f} s; a's quota "
              f"{share_rpm:.0f}/min.\n")
        print("| balancer | tenant | p99 TTFT before s | during s | ratio | req/s before "
              "| during | ratio or 429s |")
        print("|---|---|---|---|---|---|---|---|")
        for row in rows:
            print("| " + " | ".join(
                f"{v:.3f}" if isinstance(v, float) else str(v) for v in row) + " |")
        if not args.fairness:
            return
        fair = await phase(ours.url, keys, {"w1": 1.5 * cap, "w2": 1.5 * cap},
                           args.seconds)
        print(f"fairness: region queue at most {fair.queue_max:.0f}")
        print(f"\nFairness: weights 1 and 2, each offering 1.5x capacity for "
              f"{args.seconds:.0f} s; weighted service per 10 s window.\n")
        print("| window | w1 | w2 | w2 / w1 |")
        print("|---|---|---|---|")
        start = min(o.sent_at for outs in fair.outcomes.values() for o in outs)
        windows: dict[int, dict[str, float]] = defaultdict(lambda: defaultdict(float))
        for tenant, outs in fair.outcomes.items():
            for o in outs:
                if o.done_at is not None:
                    windows[int((o.done_at - start) // 10)][tenant] += o.weighted
        ratios = []
        # the first window fills the queue; after the arrivals stop one tenant drains
        whole = [w for w in sorted(windows) if w >= 1 and (w + 1) * 10 <= args.seconds]
        for window in whole:
            w1, w2 = windows[window]["w1"], windows[window]["w2"]
            ratios.append(w2 / w1 if w1 else float("inf"))
            print(f"| {window * 10}-{window * 10 + 10} s | {w1:.0f} | {w2:.0f} | "
                  f"{ratios[-1]:.2f} |")
        if ratios:
            print(f"\nmedian w2/w1 {statistics.median(ratios):.2f}, worst "
                  f"{max(ratios, key=lambda r: abs(r - 2)):.2f}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--flood-seconds", type=float, default=120.0)
    parser.add_argument("--probe-seconds", type=float, default=15.0)
    parser.add_argument("--slots", type=int, default=16)
    parser.add_argument("--variants", default="ours,plain",
                        help="balancers to flood, in order: ours, plain (a policy that "
                        "identifies nobody: today's behaviour)")
    parser.add_argument("--fairness", action=argparse.BooleanOptionalAction, default=True)
    parser.add_argument("--seed", type=int, default=0,
                        help="first seed of the tenants' arrival sequences")
    parser.add_argument("--scale", type=float, default=2.0,
                        help="simulator time scale (higher: more requests per second for "
                        "the one client process to drive; 2 keeps it below saturation)")
    parser.add_argument("--pin-slots", action="store_true",
                        help="our balancer's policy pins each server's slots (max-seqs) "
                        "instead of leaving the balancer to learn them")
    parser.add_argument("--reserve", default="",
                        help="reserves (percent of the region's slots): one number for each "
                        "of a, b and c, or per tenant as b:45,c:45 (default: none)")
    parser.add_argument("--onset", type=int, default=0,
                        help="print the flood's first N seconds second by second")
    parser.add_argument("--provisional-growth", type=float, default=None,
                        help="our balancer's --provisional-growth (0: unbounded until the "
                        "servers are seen saturated; default: the balancer's)")
    parser.add_argument("--late-binding", action=argparse.BooleanOptionalAction, default=True,
                        help="our tenant balancer holds requests at the learned capacity "
                        "(the region queue, where fair sharing happens)")
    args = parser.parse_args()
    uvloop.run(main_async(args))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
