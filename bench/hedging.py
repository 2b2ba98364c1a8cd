# SPDX-License-Identifier: Apache-2.0
"""First-byte hedging: with some servers slow to their first token, does a copy on another
server cut the TTFT tail, and how many extra requests reach the GPUs for it?

One region: ``--servers`` simulated vLLM servers (speed ``--speed``) in a child process
(on the machine's second core), the balancer (``BalancerConfig()``, its defaults, but for
``hedge``) and the clients in this one, both on uvloop as ``region serve`` runs. Requests
replay a slice of the Azure conversation trace (its gaps, prompt and output token counts;
another slice per seed) at a share of the fleet's capacity in work (``--loads``), as
streamed chat completions (``max_tokens`` 1000, the exact output length in the
simulator's ``x_output_tokens``). Each cell (fault x load) and seed runs on the same
arrivals, the same faulty servers and the same simulator seeds:

- ``off``: hedging off (``HedgeSettings()``, the default);
- ``on``: ``HedgeSettings(share=S)`` for each S of ``--shares`` (default 0.05), its other
  settings the defaults (bound: the region's p90 first-byte time for the prompt's size
  class, once it has 50 samples, the region's over all sizes before; burst 10; floor
  50 ms, see Time).

Faults (``--faults``), set on servers drawn per seed before the first request, left on:

- ``late1``: ``late`` factor 5 on 1 server: each of its streams holds its first token
  back until 5x its natural time, decode unaffected (the issue's condition);
- ``late3``: ``late`` factor 5 at rate 0.3 on 3 servers (30 % of their streams);
- ``slow1``: ``slow`` factor 5 on 1 server (every prefill and decode step 5x);
- ``none``: no fault (hedging must not hurt).

The first ``--warmup`` requests are not measured (the bounds are learned meanwhile); the
next ``--requests`` are, and ``--tail`` more keep the load up while they run. Every
request is waited for. Measured at the client, in model seconds (wall x time scale):
TTFT to the first content token (not the chat role chunk), E2E; a request fails unless
it got 200, ``[DONE]`` and exactly its tokens, and a failed request's TTFT is infinite.
Reported per cell and share:

- TTFT p50/p90/p99 and E2E p99 per run; p99 TTFT on/off per seed and over the seeds
  pooled, with a 95% bootstrap interval (requests resampled with replacement, one draw
  for both runs, which replay the same arrivals; stratified by seed), and whether the
  interval is entirely below ``--goal`` (0.70); p50 TTFT and p99 E2E on/off likewise;
- extra requests: what the GPU servers were sent (the balancer's
  ``director_balancer_decisions_total``, summed) less the client's requests, over them,
  from the first measured request to the end; the simulators' count (sequences admitted)
  beside it; hedges by outcome, and (instrumentation: the race's last step wrapped) which
  measured request each was sent for, from which server, and whether it won; extra tokens
  generated (the engines' over the clients', whole run);
- checks: no failed request; hedges within ``share`` x requests + burst (whole run); one
  abort on the engines per hedge (its loser); nothing left on the engines at the end;
  event loop lag (a 10 ms ticker's overshoot) in both processes; model time the engines
  lost to a starved process.

Time: the time scale is set per load so that ``--wall-rate`` requests arrive per wall
second (or ``--time-scale``). The balancer's bound is learned from wall first-byte
times, so it follows the time scale; its 50 ms floor is given in model time
(``floor_s = 0.05 / time_scale``; ``--wall-floor`` keeps it at 50 ms wall). Event loop
work costs wall time, so it is magnified by the time scale in model time: the loop lag
columns say how much.

::

    # one cell (3 seeds x off/on), every run appended to a JSON lines file
    .venv/bin/python bench/hedging.py --faults late1 --loads 0.7 --json runs.jsonl
    # the whole matrix: --faults late1,late3,slow1,none --loads 0.3,0.7 (the defaults)
    # another budget against the same runs without hedging
    .venv/bin/python bench/hedging.py --faults late1 --shares 0.15 --no-off --json runs.jsonl
    # the report over every run in the file
    .venv/bin/python bench/hedging.py --report runs.jsonl [--markdown FILE]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import math
import multiprocessing as mp
import os
import random
import re
import sys
import time
from dataclasses import asdict, dataclass, field
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

import aiohttp
import numpy as np
import uvloop

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchkit.routing_client import MODEL, body
from benchkit.routing_trace import arrivals_at_load, load_named
from regions.balancer import BackendSpec, BalancerConfig, build_balancer
from regions.balancer.http.hedging import HedgeSettings, _size_class
from regions.simulator import Fleet, ServerSpec
from regions.simulator.faults import Fault, FaultMode

CAPACITY_PER_SERVER = 5.27  # Azure conversation requests per model second at speed 1.0
# (mode, factor, rate, servers)
FAULTS: dict[str, tuple[FaultMode, float, float, int]] = {
    "late1": (FaultMode.LATE, 5.0, 1.0, 1),
    "late3": (FaultMode.LATE, 5.0, 0.3, 3),
    "slow1": (FaultMode.SLOW, 5.0, 1.0, 1),
    "none": (FaultMode.NONE, 1.0, 1.0, 0),
}
OUTCOMES = ("won", "lost", "failed", "saturated", "budget", "no_backend")
CONTENT = re.compile(rb'"delta":\{"content":"[^"]')  # a token, not the role chunk's ""
TOKEN = b'"delta":{"content":'
DONE = b"data: [DONE]\n\n"


@dataclass
class Run:
    fault: str
    load: float
    seed: int
    mode: str  # off | on
    share: float
    faulty: list[str]
    time_scale: float
    demand: float  # the work arriving in the nominal stretch, over the fleet's capacity
    rate: float  # requests per model second
    requests: int = 0  # measured
    failed: int = 0
    ttft_s: list[float] = field(default_factory=list)  # model s, per measured request, in
    e2e_s: list[float] = field(default_factory=list)  # arrival order; inf: failed
    on_faulty: int = 0  # measured requests answered by a faulty server
    backend: list[str] = field(default_factory=list)  # per measured request: who answered
    queue_s: list[float] = field(default_factory=list)  # and its wait in the balancer
    # per measured request with a hedge sent: "won" or "lost" (or failed), and from where
    hedged: dict[int, tuple[str, str, str]] = field(default_factory=dict)
    client_sent: int = 0  # requests sent from the first measured one on (measured + tail)
    decisions: int = 0  # requests the balancer sent to GPU servers, same stretch
    admitted: int = 0  # sequences the simulators admitted, same stretch
    gen_tokens: int = 0  # tokens the engines generated, whole run
    client_tokens: int = 0  # tokens the clients received, whole run
    hedges: dict[str, int] = field(default_factory=dict)  # same stretch
    hedges_total: int = 0  # copies sent over the whole run
    eligible_total: int = 0  # requests over the whole run
    bound_s: float | None = None  # model s: the bound for a median prompt, at the window
    own_bound: float = 0.0  # measured requests whose size class had its own bound then
    aborted: int = 0  # sequences the engines aborted, from the first measured request on
    left_running: int = 0  # sequences still on the engines after every request ended
    loop_lag_ms: tuple[float, float] = (0.0, 0.0)  # wall, p99 and max: balancer + client
    fleet_lag_ms: tuple[float, float] = (0.0, 0.0)  # the simulators' process
    lost_model_s: float = 0.0
    wall_s: float = 0.0
    others_cores: float = 0.0  # CPU the machine's other processes used meanwhile, in cores
    cpu_cores: float = 0.0  # CPU this bench used (both processes), in cores

    def q(self, values: list[float], p: float) -> float:
        return quantile(values, p)

    @property
    def extra(self) -> float:
        return (self.decisions - self.client_sent) / self.client_sent if self.client_sent else 0

    def summary_json(self) -> dict[str, Any]:
        d = {k: v for k, v in asdict(self).items()
             if k not in ("ttft_s", "e2e_s", "backend", "hedged", "queue_s")}
        d |= {"ttft_p50": self.q(self.ttft_s, 0.5), "ttft_p90": self.q(self.ttft_s, 0.9),
              "ttft_p99": self.q(self.ttft_s, 0.99), "e2e_p99": self.q(self.e2e_s, 0.99),
              "extra": round(self.extra, 4)}
        return d


def quantile(values: list[float] | np.ndarray, q: float) -> float:
    """The value with a share ``q`` of the others below it (nearest rank, as the other
    benches): inf if that is a failed request."""
    if len(values) == 0:
        return float("nan")
    ordered = np.sort(np.asarray(values, dtype=float))
    return float(ordered[min(len(ordered) - 1, int(q * len(ordered)))])


class LoopLag:
    """A 10 ms ticker: how late the event loop wakes it (wall seconds)."""

    def __init__(self) -> None:
        self.lags: list[float] = []
        self._task: asyncio.Task[None] | None = None

    async def _tick(self) -> None:
        while True:
            due = time.monotonic() + 0.01
            await asyncio.sleep(0.01)
            self.lags.append(max(0.0, time.monotonic() - due))

    def __enter__(self) -> LoopLag:
        self._task = asyncio.create_task(self._tick())
        return self

    def __exit__(self, *exc: object) -> None:
        assert self._task is not None
        self._task.cancel()

    def quantiles(self) -> tuple[float, float]:
        """p99 and max lag so far, wall milliseconds."""
        lags = sorted(self.lags)
        if not lags:
            return (0.0, 0.0)
        return (round(lags[int(0.99 * len(lags))] * 1000, 2), round(lags[-1] * 1000, 2))


def counter(metric: Any) -> dict[str, float]:
    """A labelled prometheus counter's ``_total`` samples by their one label's value."""
    return {next(iter(s.labels.values())): s.value for m in metric.collect()
            for s in m.samples if s.name.endswith("_total")}


def fleet_child(conn: Connection, names: list[str], speed: float, scale: float, seed: int,
                faults: dict[str, dict[str, Any]]) -> None:
    """The simulated servers, in a process of their own (the bench's other core): their
    URLs go back on ``conn`` once they listen; then it answers ``"state"`` with the
    engines' counters and its loop's lag, until ``"stop"``."""

    async def serve() -> None:
        specs = [ServerSpec(n, models=(MODEL,), speed=speed) for n in names]
        async with Fleet(specs, time_scale=scale, seed=seed) as fleet:
            for name, fault in faults.items():
                fleet[name].set_fault(Fault.from_json(fault))
            conn.send(fleet.urls)
            with LoopLag() as lag:
                while (command := await asyncio.to_thread(conn.recv)) != "stop":
                    assert command == "state"
                    states = [s.engine.state() for s in fleet]
                    conn.send({
                        # every admitted sequence ends finished or aborted; count those on
                        "admitted": sum(st.counters.finished + st.counters.aborted
                                        + st.running + st.waiting for st in states),
                        "aborted": sum(st.counters.aborted for st in states),
                        "gen_tokens": sum(st.counters.generation_tokens for st in states),
                        "on_engines": sum(st.running + st.waiting for st in states),
                        "lost_s": sum(st.lost_s for st in states),
                        "lag": lag.quantiles()})
        conn.send("stopped")

    uvloop.run(serve())


class FleetProcess:
    """``fleet_child`` started and stopped from the bench's event loop."""

    def __init__(self, names: list[str], speed: float, scale: float, seed: int,
                 faults: dict[str, dict[str, Any]]) -> None:
        self.conn, child = mp.get_context("spawn").Pipe()
        self.process = mp.get_context("spawn").Process(
            target=fleet_child, args=(child, names, speed, scale, seed, faults), daemon=True)
        self.urls: dict[str, str] = {}

    async def __aenter__(self) -> FleetProcess:
        self.process.start()
        self.urls = await asyncio.to_thread(self.conn.recv)
        return self

    async def state(self) -> dict[str, Any]:
        self.conn.send("state")
        return await asyncio.to_thread(self.conn.recv)

    async def __aexit__(self, *exc: object) -> None:
        self.conn.send("stop")
        with contextlib.suppress(EOFError):
            await asyncio.wait_for(asyncio.to_thread(self.conn.recv), 30)
        await asyncio.to_thread(self.process.join, 10)
        if self.process.is_alive():
            self.process.kill()


USER = re.compile(rb'"user":\s*"r(\d+)"')


def record_hedges(balancer: Any, into: dict[int, tuple[str, str, str]], first: int) -> None:
    """Note, per measured request, each hedge sent: whether it won, the first server and
    the copy's (instrumentation only: wraps the race's last step, unchanged)."""
    race = balancer.proxy.hedging
    run = race._run

    async def recorded(copy: Any, lease: Any, upstream: Any, second: Any, sent: bytes,
                       *rest: Any) -> Any:
        result = await run(copy, lease, upstream, second, sent, *rest)
        match = USER.search(sent)
        if match is not None and int(match.group(1)) >= first:
            into[int(match.group(1)) - first] = ("won" if result is not None else "lost",
                                                 lease.backend.name, second.backend.name)
        return result

    race._run = recorded


CLK_TCK = os.sysconf("SC_CLK_TCK")


def cpu_seconds() -> tuple[float, float]:
    """(CPU seconds the whole machine has been busy, of which this process and its
    children, the fleet: ``/proc``)."""
    fields = Path("/proc/stat").read_text().splitlines()[0].split()[1:]
    busy = sum(int(x) for i, x in enumerate(fields) if i not in (3, 4)) / CLK_TCK
    mine = 0.0
    for pid in [os.getpid(), *children(os.getpid())]:
        with contextlib.suppress(OSError):
            stat = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
            mine += (int(stat[11]) + int(stat[12])) / CLK_TCK
    return busy, mine


def children(pid: int) -> list[int]:
    try:
        return [int(p) for p in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except OSError:
        return []


async def wait_idle(limit: float, patience: float) -> float:
    """Wait until the machine's other processes use less than ``limit`` cores (over 2 s),
    at most ``patience`` seconds; the cores they used in the last 2 s."""
    deadline = time.monotonic() + patience
    while True:
        busy0, mine0 = cpu_seconds()
        await asyncio.sleep(2.0)
        busy1, mine1 = cpu_seconds()
        others = max(0.0, (busy1 - busy0) - (mine1 - mine0)) / 2.0
        if others < limit or time.monotonic() > deadline:
            return others


def own_bounds(balancer: Any, measured: list[Any]) -> float:
    """The share of ``measured`` whose prompt size class has ``min_samples`` first bytes
    (its own bound; the others get the region's)."""
    bound = balancer.proxy.hedging.bound
    learned = {i for i, w in enumerate(bound._classes)
               if len(w.samples) >= bound.settings.min_samples}
    return sum(1 for a in measured if _size_class(a.prompt_tokens) in learned) / len(measured)


def balancer_snapshot(balancer: Any) -> dict[str, Any]:
    return {"decisions": sum(counter(balancer.metrics.decisions).values()),
            "hedges": counter(balancer.metrics.hedges)}


async def one_run(fault: str, load: float, seed: int, share: float,
                  args: argparse.Namespace) -> Run:
    rng = random.Random(seed)
    trace = load_named("azure-conv")
    capacity = args.servers * CAPACITY_PER_SERVER * args.speed
    scale = args.time_scale or round(args.wall_rate / (load * capacity), 2)
    total = args.warmup + args.requests + args.tail
    # the rate is set from the work in the stretch of the run's ``total`` requests (a slice
    # of long answers comes at fewer requests a second): a first guess at that stretch,
    # then the stretch the first slice's ``total`` requests took
    offset = rng.randrange(len(trace))
    until = total / (load * capacity)
    for _ in range(2):
        picked = arrivals_at_load(trace, offset=offset, load=load, capacity=capacity,
                                  until=until, span=2 * until)
        until = picked.arrivals[min(total, len(picked.arrivals)) - 1].at
    arrivals = picked.arrivals[:total]
    if len(arrivals) < total:
        raise SystemExit(f"seed {seed}: the slice has {len(arrivals)} of {total} requests")
    # each names itself in ``user`` (which no balancer stage reads): the hedge record's key
    bodies = [json.dumps(body(a, api="chat") | {"user": f"r{i}"},
                         separators=(",", ":")).encode() for i, a in enumerate(arrivals)]
    mode, factor, rate, count = FAULTS[fault]
    names = [f"gpu{i}" for i in range(args.servers)]
    faulty = sorted(rng.sample(names, count), key=names.index)
    run = Run(fault, load, seed, "on" if share > 0 else "off", share, faulty, scale,
              round(picked.demand, 3), round(picked.rate, 3))
    # the floor (50 ms) in model time, as the bound is (learned from scaled first bytes)
    floor = HedgeSettings().floor_s / (1.0 if args.wall_floor else scale)
    hedge = HedgeSettings(share=share, floor_s=floor) if share > 0 else HedgeSettings()
    ttft: list[float] = [math.inf] * args.requests
    e2e: list[float] = [math.inf] * args.requests
    backends_of: list[str] = [""] * args.requests
    queued: list[float] = [0.0] * args.requests
    tokens_got = [0] * total
    wall0 = time.monotonic()
    busy0, mine0 = cpu_seconds()
    faults = {n: Fault(mode, factor=factor, rate=rate).to_json() for n in faulty}
    async with FleetProcess(names, args.speed, scale, 1000 * seed, faults) as fleet:
        backends = [BackendSpec(n, url, (MODEL,)) for n, url in fleet.urls.items()]
        balancer = build_balancer("bench", backends, BalancerConfig(hedge=hedge))
        record_hedges(balancer, run.hedged, args.warmup)
        connector = aiohttp.TCPConnector(limit=0)
        async with balancer, aiohttp.ClientSession(
                base_url=balancer.url, connector=connector,
                timeout=aiohttp.ClientTimeout(total=None)) as client:
            async with client.get("/v1/models") as resp:  # a connection before the clock
                await resp.read()
            before: dict[str, Any] = {}
            gpus_before: dict[str, Any] = {}

            async def ask(i: int) -> None:
                a = arrivals[i]
                sent = time.monotonic()
                first: float | None = None
                head, tail, got, ok = b"", b"", 0, False
                try:
                    async with client.post("/v1/chat/completions", data=bodies[i],
                                           headers={"Content-Type": "application/json"}) as r:
                        backend = r.headers.get("x-director-backend", "")
                        waited = float(r.headers.get("x-director-queue-ms", 0)) / 1000 * scale
                        async for chunk in r.content.iter_any():
                            if first is None:
                                head += chunk
                                if CONTENT.search(head):
                                    first = time.monotonic()
                            got += chunk.count(TOKEN)
                            tail = (tail + chunk)[-len(DONE):]
                        ok = r.status == 200 and tail == DONE and got == a.output_tokens
                except (aiohttp.ClientError, OSError):
                    backend, waited = "", 0.0
                done = time.monotonic()
                tokens_got[i] = got
                j = i - args.warmup
                if 0 <= j < args.requests:
                    backends_of[j], queued[j] = backend, waited
                    if ok and first is not None:  # else it stays infinite: failed
                        ttft[j] = (first - sent) * scale
                        e2e[j] = (done - sent) * scale

            async def window_start() -> None:
                nonlocal gpus_before
                gpus_before = await fleet.state()

            with LoopLag() as lag:
                t0 = time.monotonic() + 0.1
                tasks = []
                for i, a in enumerate(arrivals):
                    delay = t0 + a.at / scale - time.monotonic()
                    if delay > 0:
                        await asyncio.sleep(delay)
                    if i == args.warmup:
                        before = balancer_snapshot(balancer)
                        tasks.append(asyncio.create_task(window_start()))
                        bound = balancer.proxy.hedging.bound.seconds(1020)
                        run.bound_s = bound * scale if bound is not None else None
                        run.own_bound = own_bounds(balancer, arrivals[args.warmup:][
                            :args.requests])
                    tasks.append(asyncio.create_task(ask(i)))
                _, late = await asyncio.wait(tasks, timeout=args.drain / scale)
                for task in late:  # failed (their TTFT stays infinite)
                    task.cancel()
                await asyncio.gather(*late, return_exceptions=True)
                after = balancer_snapshot(balancer)
            await asyncio.sleep(0.1)
            gpus = await fleet.state()
            busy1, mine1 = cpu_seconds()
    run.requests = args.requests
    run.ttft_s, run.e2e_s = ttft, e2e
    run.failed = sum(1 for x in ttft if math.isinf(x))
    run.on_faulty = sum(1 for b in backends_of if b in faulty)
    run.backend, run.queue_s = backends_of, queued
    run.client_sent = total - args.warmup
    run.client_tokens = sum(tokens_got)
    run.decisions = int(after["decisions"] - before["decisions"])
    run.admitted = int(gpus["admitted"] - gpus_before["admitted"])
    run.aborted = int(gpus["aborted"] - gpus_before["aborted"])
    run.gen_tokens = int(gpus["gen_tokens"])
    run.left_running = int(gpus["on_engines"])
    run.lost_model_s = round(gpus["lost_s"], 3)
    run.hedges = {o: int(after["hedges"].get(o, 0) - before["hedges"].get(o, 0))
                  for o in OUTCOMES}
    run.hedges_total = int(sum(after["hedges"].get(o, 0) for o in ("won", "lost", "failed")))
    run.eligible_total = total if share > 0 else 0
    run.loop_lag_ms = lag.quantiles()
    run.fleet_lag_ms = gpus["lag"]
    run.wall_s = round(time.monotonic() - wall0, 1)
    run.cpu_cores = round((mine1 - mine0) / run.wall_s, 2)
    run.others_cores = round(max(0.0, busy1 - busy0 - (mine1 - mine0)) / run.wall_s, 2)
    return run


# -- report ------------------------------------------------------------------------------


def load_runs(paths: list[Path]) -> list[dict[str, Any]]:
    runs = []
    for path in paths:
        for line in path.read_text().splitlines():
            if line.strip():
                runs.append(json.loads(line))
    return runs


def paired_ratio(pairs: list[tuple[np.ndarray, np.ndarray]], q: float, rounds: int,
                 rng: np.random.Generator) -> tuple[float, float, float]:
    """quantile(on) / quantile(off) over the pooled runs, and its 95% bootstrap interval:
    each round resamples every seed's requests with replacement, one draw for both runs."""
    on = np.concatenate([p[0] for p in pairs])
    off = np.concatenate([p[1] for p in pairs])
    point = quantile(on, q) / quantile(off, q)
    ratios = np.empty(rounds)
    for k in range(rounds):
        a, b = [], []
        for x, y in pairs:
            idx = rng.integers(0, len(x), len(x))
            a.append(x[idx])
            b.append(y[idx])
        ratios[k] = quantile(np.concatenate(a), q) / quantile(np.concatenate(b), q)
    ratios.sort()
    return point, float(ratios[int(0.025 * rounds)]), float(ratios[int(0.975 * rounds) - 1])


def fmt(ratio: tuple[float, float, float]) -> str:
    return f"{ratio[0]:.2f} [{ratio[1]:.2f}-{ratio[2]:.2f}]"


def pooled(runs: list[dict[str, Any]], key: str, q: float) -> float:
    return quantile(np.concatenate([np.array(r[key], dtype=float) for r in runs]), q)


def tail_on_faulty(r: dict[str, Any]) -> float:
    """The share of the run's slowest 1% first tokens that a faulty server sent."""
    t = np.array(r["ttft_s"], dtype=float)
    top = np.argsort(-t)[:max(1, len(t) // 100)]
    return sum(1 for i in top if r["backend"][i] in r["faulty"]) / len(top)


@dataclass
class Cell:
    fault: str
    load: float
    share: float
    ratio: tuple[float, float, float]  # p99 TTFT on/off, pooled, [95% CI]
    p50: tuple[float, float, float]
    e2e: tuple[float, float, float]  # p99 E2E
    per_seed: list[tuple[float, float, float]]
    off: list[dict[str, Any]]
    on: list[dict[str, Any]]

    @property
    def extra_on(self) -> float:
        return (sum(r["decisions"] for r in self.on) / sum(r["client_sent"] for r in self.on)
                - 1.0)


def cell(fault: str, load: float, share: float, runs: list[dict[str, Any]],
         rounds: int) -> Cell | None:
    """The runs with hedging at ``share`` against those without, seed by seed (None
    without a pair)."""
    rng = np.random.default_rng(0)
    by = {(r["seed"], r["share"]): r for r in runs}
    seeds = sorted({s for s, x in by if x == share and (s, 0.0) in by})
    if not seeds:
        return None
    off, on = [by[s, 0.0] for s in seeds], [by[s, share] for s in seeds]

    def pairs(key: str) -> list[tuple[np.ndarray, np.ndarray]]:
        return [(np.array(b[key], dtype=float), np.array(a[key], dtype=float))
                for a, b in zip(off, on, strict=True)]

    return Cell(fault, load, share, paired_ratio(pairs("ttft_s"), 0.99, rounds, rng),
                paired_ratio(pairs("ttft_s"), 0.5, rounds, rng),
                paired_ratio(pairs("e2e_s"), 0.99, rounds, rng),
                [paired_ratio([p], 0.99, rounds, rng) for p in pairs("ttft_s")], off, on)


def run_rows(c: Cell) -> list[str]:
    rows = []
    for r in [x for pair in zip(c.off, c.on, strict=True) for x in pair]:
        h = r["hedges"]
        sent = h["won"] + h["lost"] + h["failed"]
        hedged = r["hedged"].values()
        from_faulty = sum(1 for v in hedged if v[1] in r["faulty"])
        bound = "-" if r["bound_s"] is None else f"{r['bound_s']:.3f}"
        rows.append(
            f"| {r['seed']} | {r['mode']} | {r['requests']} ({r['failed']}) | "
            f"{quantile(r['ttft_s'], 0.5):.3f} | {quantile(r['ttft_s'], 0.9):.3f} | "
            f"{quantile(r['ttft_s'], 0.99):.3f} | {quantile(r['e2e_s'], 0.99):.2f} | "
            f"{r['on_faulty'] / r['requests']:.1%} | {tail_on_faulty(r):.0%} | "
            f"{(r['decisions'] - r['client_sent']) / r['client_sent']:+.2%} | "
            f"{(r['admitted'] - r['client_sent']) / r['client_sent']:+.2%} | "
            f"{sent} ({h['won']}/{h['lost']}/{h['failed']}) | "
            f"{from_faulty} of {len(hedged)} | "
            f"{h['saturated']}/{h['budget']}/{h['no_backend']} | {r['aborted']} | "
            f"{(r['gen_tokens'] - r['client_tokens']) / max(1, r['client_tokens']):+.2%} | "
            f"{bound} | {r['own_bound']:.0%} | {r['left_running']} | "
            f"{r['loop_lag_ms'][0]:.1f}/{r['loop_lag_ms'][1]:.0f}, "
            f"{r['fleet_lag_ms'][0]:.1f}/{r['fleet_lag_ms'][1]:.0f} | "
            f"{r['lost_model_s']:.2f} | {r['cpu_cores']:.2f}, {r['others_cores']:.2f} | "
            f"{r['time_scale']:g} |")
    return rows


RUN_HEADER = [
    "| seed | hedging | requests (failed) | TTFT p50 s | p90 s | p99 s | E2E p99 s | "
    "answered by a faulty server | of the slowest 1% | extra requests (decisions) | "
    "extra (simulators) | hedges sent (won/lost/failed) | of them first on a faulty server "
    "(measured) | not sent (saturated/budget/no backend) | aborted on the engines | extra "
    "tokens generated | bound s, 1,020-token prompt | measured requests with their size "
    "class's own bound | left on engines | loop lag p99/max ms (balancer, fleet) | model s "
    "lost | CPU cores (bench, others) | time scale |",
    "|" + "---|" * 23]


def checks(runs: list[dict[str, Any]]) -> list[str]:
    """What must hold in every run: no failed request, nothing left on the engines, the
    hedges sent within the bucket (``share`` per request plus the burst)."""
    burst = HedgeSettings().burst
    failed = sum(r["failed"] for r in runs)
    left = sum(r["left_running"] for r in runs)
    over = [r for r in runs if r["hedges_total"] > r["share"] * r["eligible_total"] + burst]
    most = max((r["hedges_total"] / r["eligible_total"] for r in runs if r["eligible_total"]),
               default=0.0)
    unaborted = sum(max(0, sum(r["hedges"][o] for o in ("won", "lost", "failed"))
                        - r["aborted"]) for r in runs)
    return [f"Checks over {len(runs)} runs: {failed} measured requests failed; "
            f"{left} sequences left on the engines after the last request ended; "
            f"{len(over)} runs sent more hedges than share x requests + burst (at most "
            f"{most:.2%} of a run's requests were hedged); {unaborted} hedges (summed over "
            f"runs) without an abort on the engines to match (a loser that was not aborted, "
            f"or had already finished there)."]


def report(runs: list[dict[str, Any]], goal: float, rounds: int) -> str:
    groups: dict[tuple[str, float], list[dict[str, Any]]] = {}
    for r in runs:
        groups.setdefault((r["fault"], r["load"]), []).append(r)
    found = [cell(f, load, share, groups[f, load], rounds) for f in FAULTS
             for load in sorted(load for g, load in groups if g == f)
             for share in sorted({r["share"] for r in groups[f, load]} - {0.0})]
    cells = [c for c in found if c is not None]
    out = [f"| fault | load | share | TTFT p99 s off -> on | p99 on/off, seeds pooled [95% CI] | "
           f"entirely below {goal:.2f}? | each seed [95% CI] | TTFT p50 on/off | E2E p99 "
           f"on/off | extra requests to the GPUs (on) |",
           "|---|---|---|---|---|---|---|---|---|---|"]
    main = min({c.share for c in cells}, default=0.0)
    for c in cells:
        verdict = "yes" if c.ratio[2] < goal else "no"
        out.append(
            f"| {c.fault} | {c.load:.0%} | {c.share:g} | {pooled(c.off, 'ttft_s', 0.99):.3f} -> "
            f"{pooled(c.on, 'ttft_s', 0.99):.3f} | {fmt(c.ratio)} | {verdict} | "
            f"{'; '.join(fmt(x) for x in c.per_seed)} | {fmt(c.p50)} | {fmt(c.e2e)} | "
            f"{c.extra_on:+.2%} |")
    faulted = [c for c in cells if c.fault != "none" and c.share == main]
    if faulted:
        best = min(faulted, key=lambda c: c.ratio[0])
        worst = max(faulted, key=lambda c: c.ratio[0])
        out += ["", f"Faulted cells at share {main:g}: best {best.fault} at "
                f"{best.load:.0%}, p99 on/off {fmt(best.ratio)}; worst {worst.fault} at "
                f"{worst.load:.0%}, {fmt(worst.ratio)}."]
    out += ["", *checks(runs)]
    for c in cells:
        out += ["", f"#### {c.fault}, load {c.load:.0%}, share {c.share:g}", "", *RUN_HEADER,
                *run_rows(c)]
    return "\n".join(out)


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--first-seed", type=int, default=0)
    parser.add_argument("--faults", default="late1,late3,slow1,none")
    parser.add_argument("--loads", default="0.3,0.7")
    parser.add_argument("--shares", default="0.05",
                        help="hedging budgets to run, each against hedging off")
    parser.add_argument("--no-off", action="store_true",
                        help="skip the runs without hedging (report them from --json runs "
                             "with the same settings)")
    parser.add_argument("--servers", type=int, default=10)
    parser.add_argument("--speed", type=float, default=0.5)
    parser.add_argument("--time-scale", type=float, default=None,
                        help="model seconds per wall second (default: from --wall-rate)")
    parser.add_argument("--wall-rate", type=float, default=36.0,
                        help="requests per wall second: sets each load's time scale")
    parser.add_argument("--wall-floor", action="store_true",
                        help="keep the hedge floor at 50 ms wall time (default: model time)")
    parser.add_argument("--warmup", type=int, default=400, help="requests not measured")
    parser.add_argument("--requests", type=int, default=1500, help="requests measured")
    parser.add_argument("--tail", type=int, default=100,
                        help="requests after the measured ones (the load goes on)")
    parser.add_argument("--drain", type=float, default=900.0,
                        help="model seconds to wait for the last requests at most")
    parser.add_argument("--goal", type=float, default=0.70)
    parser.add_argument("--wait-idle", type=float, default=0.0, metavar="SECONDS",
                        help="before each run, wait (at most this long) until the machine's "
                             "other processes use under 0.15 cores")
    parser.add_argument("--rounds", type=int, default=1000, help="bootstrap rounds")
    parser.add_argument("--json", type=Path, default=None,
                        help="append every run (with its requests) to this JSON lines file")
    parser.add_argument("--report", type=Path, nargs="*", default=None,
                        help="only report the runs in these JSON lines files")
    parser.add_argument("--markdown", type=Path, default=None, help="write the report here")
    args = parser.parse_args()
    if args.report is not None:
        text = report(load_runs(args.report), args.goal, args.rounds)
    else:
        runs: list[dict[str, Any]] = []
        for fault in args.faults.split(","):
            for load in (float(x) for x in args.loads.split(",")):
                for seed in range(args.first_seed, args.first_seed + args.seeds):
                    shares = [float(x) for x in args.shares.split(",")]
                    for share in ([] if args.no_off else [0.0]) + shares:
                        if args.wait_idle:
                            others = await wait_idle(0.15, args.wait_idle)
                            print(f"others use {others:.2f} cores", file=sys.stderr)
                        run = await one_run(fault, load, seed, share, args)
                        print(json.dumps(run.summary_json()), flush=True)
                        data = asdict(run)
                        runs.append(data)
                        if args.json is not None:
                            with args.json.open("a") as f:
                                f.write(json.dumps(data) + "\n")
        text = report(runs, args.goal, args.rounds)
    print(text)
    if args.markdown is not None:
        args.markdown.write_text(text + "\n")


if __name__ == "__main__":
    with contextlib.suppress(KeyboardInterrupt):
        uvloop.run(main())
