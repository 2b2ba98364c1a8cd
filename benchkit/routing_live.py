# SPDX-License-Identifier: Apache-2.0
"""The live routing benchmark's runs: one trace slice replayed over real HTTP through one
setup (our balancer, nginx, HAProxy, smg) in front of simulated GPU servers run as processes
(``SimFleet``), the figures of a run (``RunStats``: p50/p99 TTFT and E2E, req/s, 429s,
errors, the proxy's CPU, slot use, prefix-cache hit rate, the collapse check) and the table
of a cell with each slice's ours/peer ratios. ``bench/routing_live.py`` runs the cells of the
matrix with it; its docstring says how the load is set and what is counted.
"""

from __future__ import annotations

import asyncio
import dataclasses
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import uvloop

from benchkit.fleet_sampling import COLLAPSE_LIMIT, FleetSamples, collapse, sample_fleet, sim_states
from benchkit.matrix import Cell, Server
from benchkit.routing_client import Outcome, Prepared, path_of, run_load
from benchkit.routing_procs import (
    Proc,
    start_haproxy,
    start_nginx,
    start_ours,
    start_simulator,
    start_smg,
)
from state.ports import free_port

QUICK_CELLS = "slots=16;speeds=mixed;engine=whole;trace=azure-conv;lengths=hidden;load=0.9"
TAIL_LOAD_S = 60.0  # model seconds of arrivals after the counted ones, to keep the load up
MAX_LOST_SHARE = 0.01  # replay a run whose simulators lost more model time than this
WALL_REQ_PER_S = 36.0  # --time-scale auto: offered requests per wall second at most
WALL_BYTES_PER_S = 4e6  # --time-scale auto: request bytes per wall second at most
SETUPS = ("ours", "nginx", "haproxy")
PEERS = ("round-robin", "nginx", "haproxy")


@dataclass(frozen=True)
class RunStats:
    ttft_p50: float
    ttft_p99: float
    e2e_p50: float
    e2e_p99: float
    req_per_s: float
    tok_per_s: float
    shed: int
    errors: int
    counted: int
    cpu: float  # proxy CPU seconds per wall second
    cpu_ms_per_request: float  # proxy CPU per completed streamed request, milliseconds
    cpu_us_per_token: float  # proxy CPU per output token, microseconds
    utilization: dict[str, float]
    by_speed: dict[str, float]  # share of the requests finished per GPU speed (whole run)
    lost: float  # model seconds the simulators could not keep up with (CPU starved)
    hit_rate: float = 0.0  # fleet prefix-cache hits / queries (tokens), counted window
    load_ratio_max: float = float("nan")  # worst second: max server load / mean load
    over_limit_share: float = 0.0  # share of seconds with that ratio above COLLAPSE_LIMIT


def pct(values: list[float], q: float) -> float:
    """Nearest-rank percentile (``q`` in [0, 100]); NaN for no values."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    rank = max(1, min(len(ordered), round(q / 100 * len(ordered) + 0.5)))
    return ordered[rank - 1]


def summarise(outcomes: list[Outcome], window: tuple[float, float], cpu_s: float,
              wall_s: float, utilization: dict[str, float], served: dict[str, float],
              lost: float) -> RunStats:
    """Latencies over the requests arriving in ``window`` (model seconds); throughput over
    the completions (of any request) in it; CPU per request and token over the whole run."""
    start, end = window
    counted = [o for o in outcomes if start <= o.at < end]
    ok = [o for o in counted if o.status == 200 and o.e2e is not None]
    shed = sum(1 for o in counted if o.status == 429)
    ttft = [o.ttft for o in ok if o.ttft is not None]
    e2e = [o.e2e for o in ok if o.e2e is not None]
    done = [o for o in outcomes if o.finished_at is not None and start <= o.finished_at < end]
    finished = [o for o in outcomes if o.status == 200 and o.e2e is not None]
    tokens = sum(o.output_tokens for o in finished)
    length = end - start
    return RunStats(
        ttft_p50=pct(ttft, 50), ttft_p99=pct(ttft, 99), e2e_p50=pct(e2e, 50),
        e2e_p99=pct(e2e, 99), req_per_s=len(done) / length,
        tok_per_s=sum(o.output_tokens for o in done) / length, shed=shed,
        errors=len(counted) - len(ok) - shed, counted=len(counted),
        cpu=cpu_s / max(wall_s, 1e-9),
        cpu_ms_per_request=1000 * cpu_s / max(1, len(finished)),
        cpu_us_per_token=1e6 * cpu_s / max(1, tokens),
        utilization=utilization,
        by_speed=served,
        lost=lost,
    )


async def replay_and_sample(url: str, arrivals, requests: list[Prepared], sims: list[Proc],
                            slots: dict[str, int], args, counted_until: float
                            ) -> tuple[list[Outcome], dict[str, float], FleetSamples]:
    """Replay, and sample the GPUs over the counted window (``fleet_sampling``): utilization
    is the mean share of each GPU's sequence slots in use."""
    stop = asyncio.Event()

    async def sampler() -> FleetSamples:
        await asyncio.sleep(args.warmup / args.scale)
        return await sample_fleet(sims, args.scale, stop)

    task = asyncio.create_task(sampler())
    loop = asyncio.get_running_loop()
    loop.call_later(counted_until / args.scale, stop.set)
    try:
        outcomes = await run_load(url, arrivals, args.scale, counted_until=counted_until,
                                  timeout=args.timeout, requests=requests)
    finally:
        stop.set()
    samples = await task
    util = {n: (statistics.mean(v) / slots[n] if v else float("nan"))
            for n, v in samples.running.items()}
    return outcomes, util, samples


async def wait_idle(sims: list[Proc], timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        states = await sim_states(sims)
        if all(s["running"] + s["waiting"] == 0 for s in states.values()):
            return
        await asyncio.sleep(0.1)


def start_proxy(setup: str, workdir: Path, sims: list[Proc], loop: str,
                kv_events: dict[str, tuple[str, str]] | None = None) -> Proc:
    upstreams = [(p.name, "127.0.0.1", int(p.url.rsplit(":", 1)[1])) for p in sims]
    run_dir = Path(tempfile.mkdtemp(prefix=f"{setup.partition(':')[0]}-", dir=workdir))
    kind, _, variant = setup.partition(":")
    extra = [a for p in variant.split("+") if p for a in ("--scorer-param", p)]
    if kind == "ours-prefix":
        return start_ours(run_dir, "prefix", upstreams, loop, extra)
    if kind == "ours-precise":
        if not kv_events:
            raise ValueError("ours-precise: the simulators publish no KV events")
        extra += [a for name, (pub, replay) in kv_events.items()
                  for a in ("--kv-events", f"{name}={pub},{replay}")]
        return start_ours(run_dir, "prefix", upstreams, loop, extra)
    if kind == "ours":
        return start_ours(run_dir, "default", upstreams, loop, extra)
    if setup == "round-robin":
        return start_ours(run_dir, "round-robin", upstreams, loop)
    if setup == "nginx":
        return start_nginx(run_dir, upstreams)
    if setup == "haproxy":
        return start_haproxy(run_dir, upstreams)
    if setup.startswith("smg:"):
        return start_smg(run_dir, upstreams, setup[4:])
    raise ValueError(setup)


class SimFleet:
    """The cell's simulated GPU servers, one process each; ``restart`` gives cold caches."""

    def __init__(self, workdir: Path, servers: list[Server], scale: float,
                 kv_events: bool = False) -> None:
        self.workdir, self.servers, self.scale = workdir, servers, scale
        self.procs: list[Proc] = []
        self.kv_events: dict[str, tuple[str, str]] = {
            s.name: (f"tcp://127.0.0.1:{free_port()}", f"tcp://127.0.0.1:{free_port()}")
            for s in servers} if kv_events else {}
        self.start()

    def start(self) -> None:
        self.procs = [start_simulator(self.workdir, s.name, s.speed, self.scale, s.engine,
                                      self.kv_events.get(s.name))
                      for s in self.servers]

    def stop(self) -> None:
        for p in self.procs:
            p.stop()
        self.procs = []

    def restart(self) -> None:
        self.stop()
        self.start()


def run_one(setup: str, workdir: Path, fleet: SimFleet, arrivals, requests: list[Prepared],
            cell: Cell, args) -> RunStats:
    """One replay through one setup; replayed again (at most ``--retries`` times) while the
    simulators lose more than ``MAX_LOST_SHARE`` of their model time to CPU starvation (the
    machine is shared), keeping the attempt that lost least. With shared prompts, each
    attempt starts on freshly started simulators (cold prefix caches)."""
    best: RunStats | None = None
    for attempt in range(args.retries + 1):
        if cell.prompts == "shared":
            fleet.restart()
        stats = _run_one(setup, workdir, fleet, arrivals, requests, cell, args)
        if best is None or stats.lost < best.lost:
            best = stats
        span = (args.warmup + args.measure + TAIL_LOAD_S) * len(fleet.servers)
        if stats.lost <= MAX_LOST_SHARE * span:
            break
        if attempt < args.retries:
            print(f"  {setup}: simulators starved of CPU ({stats.lost:.1f} model s lost): "
                  "replaying", file=sys.stderr)
    assert best is not None
    return best


def _run_one(setup: str, workdir: Path, fleet: SimFleet, arrivals, requests: list[Prepared],
             cell: Cell, args) -> RunStats:
    sims, servers = fleet.procs, fleet.servers
    proxy = start_proxy(setup, workdir, sims, args.loop, fleet.kv_events)
    slots = {s.name: s.engine.max_num_seqs for s in servers}
    speeds = {s.name: s.speed for s in servers}
    try:
        before = asyncio.run(sim_states(sims))
        cpu0, wall0 = proxy.cpu_seconds(), time.monotonic()
        window = (args.warmup, args.warmup + args.measure)
        outcomes, util, samples = uvloop.run(replay_and_sample(
            proxy.url + path_of(cell.api), arrivals, requests, sims, slots, args, window[1]))
        cpu_s, wall_s = proxy.cpu_seconds() - cpu0, time.monotonic() - wall0
        after = asyncio.run(sim_states(sims))
    finally:
        proxy.stop()
    asyncio.run(wait_idle(sims))
    lost = sum(after[n]["lost_model_seconds"] - before[n]["lost_model_seconds"] for n in after)
    finished = {n: after[n]["counters"]["finished"] - before[n]["counters"]["finished"]
                for n in after}
    by_speed: dict[str, float] = {}
    for name, count in finished.items():
        key = f"{speeds[name]:g}"
        by_speed[key] = by_speed.get(key, 0) + count / max(1, sum(finished.values()))
    served = {k: round(v, 3) for k, v in sorted(by_speed.items())}
    ratio_max, over = collapse(samples.loads)
    return dataclasses.replace(
        summarise(outcomes, window, cpu_s, wall_s, util, served, lost),
        hit_rate=samples.hit_rate, load_ratio_max=ratio_max, over_limit_share=over)


def median_stats(runs: list[RunStats]) -> RunStats:
    def med(attr: str) -> float:
        return statistics.median(getattr(r, attr) for r in runs)

    medians: dict[str, Any] = {f.name: med(f.name) for f in dataclasses.fields(RunStats)
                               if f.name not in ("utilization", "by_speed")}
    return dataclasses.replace(
        runs[0], **medians,
        utilization={n: statistics.median(r.utilization[n] for r in runs)
                     for n in runs[0].utilization})


def paired(ours: list[RunStats], peer: list[RunStats], attr: str) -> list[float]:
    """Per slice (the same trace slice for every setup), ours over the peer's ``attr``."""
    return [getattr(o, attr) / getattr(p, attr) for o, p in zip(ours, peer, strict=True)]


def print_cell(cell: Cell, offered: float, runs: dict[str, list[RunStats]], args) -> None:
    print(f"\n== {cell.label}: {offered:.2f} req/s offered (median of {args.repeats} "
          f"slices, {args.measure:g} model s counted after {args.warmup:g} s, time scale "
          f"{args.scale:g}) ==")
    names = list(next(iter(runs.values()))[0].utilization)
    width = max(14, *(len(s) for s in runs))
    over = f">{COLLAPSE_LIMIT:g}x"
    print(f"{'setup':<{width}} {'TTFT p50':>9} {'TTFT p99':>9} {'E2E p50':>8} {'E2E p99':>8} "
          f"{'req/s':>6} {'429':>4} {'err':>4} {'cpu':>5} {'ms/req':>7} {'us/tok':>7} "
          f"{'lost':>5} {'hit':>5} {'max/mean':>8} {over:>6}  "
          + " ".join(f"{n:>5}" for n in names) + "  by speed")
    for setup, rs in runs.items():
        r = median_stats(rs)
        util = " ".join(f"{r.utilization[n]:>5.0%}" for n in names)
        print(f"{setup:<{width}} {r.ttft_p50:>9.3f} {r.ttft_p99:>9.3f} {r.e2e_p50:>8.2f} "
              f"{r.e2e_p99:>8.2f} {r.req_per_s:>6.2f} {r.shed:>4.0f} {r.errors:>4.0f} "
              f"{r.cpu:>5.0%} {r.cpu_ms_per_request:>7.2f} {r.cpu_us_per_token:>7.1f} "
              f"{r.lost:>5.1f} {r.hit_rate:>5.0%} {r.load_ratio_max:>8.2f} "
              f"{r.over_limit_share:>6.0%}  {util}  {rs[0].by_speed}")
    peers = [*PEERS, *(n for n in runs if n.startswith("smg:"))]
    for name, ours in runs.items():
        if not name.startswith("ours"):
            continue
        for peer in peers:
            if peer not in runs:
                continue
            parts = []
            for label, attr in (("TTFT p99", "ttft_p99"), ("E2E p99", "e2e_p99"),
                                ("req/s", "req_per_s"),
                                ("CPU/token", "cpu_us_per_token")):
                ratios = paired(ours, runs[peer], attr)
                each = " ".join(f"{x:.2f}" for x in ratios)
                parts.append(f"{label} {statistics.median(ratios):.2f}x [{each}]")
            print(f"  {name}/{peer:<{max(8, width - 5)}} " + "  ".join(parts))


def auto_scale(capacity: float, body_bytes: float = 0.0) -> float:
    """Model seconds per wall second: the fleet's capacity offered at most
    ``WALL_REQ_PER_S`` requests and ``WALL_BYTES_PER_S`` request bytes (``body_bytes`` a
    request on average) per wall second, within [0.25, 5]."""
    limits = [5.0, WALL_REQ_PER_S / capacity]
    if body_bytes > 0:
        limits.append(WALL_BYTES_PER_S / (capacity * body_bytes))
    return max(0.25, min(limits))


def fleets(cells: list[Cell]) -> dict[tuple[str, ...], list[Cell]]:
    """Cells grouped by the simulated fleet they run on (and its time scale: shared prompts
    may need a slower one)."""
    groups: dict[tuple[str, ...], list[Cell]] = {}
    for cell in cells:
        key = (cell.slots, cell.speeds, cell.engine, cell.trace, cell.prompts)
        groups.setdefault(key, []).append(cell)
    return groups
