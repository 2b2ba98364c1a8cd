# SPDX-License-Identifier: Apache-2.0
"""Routing benchmark, live: trace slices through our balancer, HAProxy ``leastconn`` and
nginx ``least_conn``, over real HTTP, side by side, cell by cell of the matrix
(``bench/matrix.py``: slots per server, speeds, engine, trace, lengths, load).

Per fleet of the selected cells, six simulated GPU servers run as processes
(``routing_sim.py``, each its own process as in ``director up --simulate``); per cell, each
of ``--repeats`` slices (a seeded trace offset) is replayed open-loop and streaming through
every setup in turn, each proxy started fresh; requests arriving in the first ``--warmup``
model seconds are not counted. The load is a share of the fleet's capacity on the cell's
trace, measured in virtual time as ``bench/routing_matrix.py`` measures it, and set in work
(``routing_trace.arrivals_at_load``). No balancer is told the speeds or the slots: ours
learns them (``regions.balancer.scheduling.capacity``).

Setups: ``ours`` (default profile), ``ours-prefix`` (``least-requests`` and
``prefix-affinity``, its approximate index), ``ours-precise`` (the same, with the
simulators' KV events: its precise index), ``nginx`` (``least_conn``, ``proxy_buffering off``),
``haproxy`` (``leastconn``, ``option http-no-delay``), ``round-robin`` (ours with the
round-robin picker and no cap), variants ``ours:SCORER.PARAM=VALUE+...``, and
``smg:POLICY``, the SGLang Model Gateway with one of its policies (``cache_aware``,
``prefix_hash``, ``consistent_hashing``, ``least_load``, ``power_of_two``, ``round_robin``;
``bench/install_peers.sh`` installs it; how it is set up: ``routing_procs.start_smg``). Per
cell it prints each setup's p50/p99 TTFT and E2E, completed req/s, 429s and errors, the
proxy's CPU use (also per streamed request and per output token), the fleet's prefix-cache
hit rate, the collapse check (the worst second's most loaded server over the mean, and the
share of seconds above 1.5x: ``fleet_sampling``), the GPUs' slot use, then each slice's
ours/peer p99 ratios and their median; ``--out FILE`` appends one JSON line per cell with
every slice's figures.

Cells with ``prompts=shared`` (``matrix.py``) send the text of each Mooncake request's
prompt blocks (``shared_prompts``), so that a prefix cache hits; their simulators are
started afresh before each run, so that no setup inherits another's cache. Request bodies
are built before each slice's replays (``routing_client.prepare``); ``--sessions`` also
sends each request's conversation key (``routing_client``).

Times are model seconds (wall seconds times the time scale; ``--time-scale auto`` keeps the
offered wall rate near ``WALL_REQ_PER_S`` requests and, with shared prompts, under
``WALL_BYTES_PER_S`` request bytes). Counted requests still running 90 model seconds
after the last counted arrival are cut and counted as errors; a run whose simulators lost
more than 1% of their model time to CPU starvation (``lost``) is replayed once and the
better attempt kept. Every process binds to 127.0.0.1.

::

    .venv/bin/python bench/routing_live.py --quick           # one cell, one slice, < 2 min
    .venv/bin/python bench/routing_live.py --cells "slots=16;speeds=mixed;trace=azure-conv" \
        --repeats 3 --out bench/results/DATE-routing-live.jsonl
    .venv/bin/python bench/routing_live.py --cells "slots=16;speeds=mixed;engine=whole;\
trace=mooncake-conv;lengths=hidden;load=0.9;prompts=shared" \
        --setups ours,haproxy,smg:cache_aware,smg:prefix_hash --repeats 1

Results: ``bench/results/`` (one Markdown file per run, committed).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import json
import random
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import uvloop
from fleet_sampling import COLLAPSE_LIMIT, FleetSamples, collapse, sample_fleet, sim_states
from matrix import CONTEXT, Cell, Server, parse_cells
from routing_client import Outcome, Prepared, path_of, prepare, run_load
from routing_matrix import fleet_capacity
from routing_procs import (
    SMG_POLICIES,
    Proc,
    have,
    start_haproxy,
    start_nginx,
    start_ours,
    start_simulator,
    start_smg,
)
from routing_trace import arrivals_at_load, load_named

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

    return dataclasses.replace(
        runs[0], **{f.name: med(f.name) for f in dataclasses.fields(RunStats)
                    if f.name not in ("utilization", "by_speed")},
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


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description="Routing benchmark (see the module docstring).")
    parser.add_argument("--quick", action="store_true", help=f"one cell ({QUICK_CELLS}), "
                        "one slice, a short window")
    parser.add_argument("--cells", default=None, help="sub-matrix, as bench/routing_matrix.py")
    parser.add_argument("--setups", default=",".join(SETUPS),
                        help="comma-separated: ours, nginx, haproxy, round-robin, ours:P=V+..., "
                        f"smg:POLICY ({', '.join(SMG_POLICIES)})")
    parser.add_argument("--measure", type=float, default=None,
                        help="model seconds of arrivals counted, after the warm-up")
    parser.add_argument("--warmup", type=float, default=None, help="model seconds not counted")
    parser.add_argument("--repeats", type=int, default=None, help="trace slices per cell")
    parser.add_argument("--time-scale", default="auto",
                        help="model seconds per wall second, or 'auto'")
    parser.add_argument("--timeout", type=float, default=600.0, help="per request, model s")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--retries", type=int, default=1,
                        help="replays of a run whose simulators were starved of CPU")
    parser.add_argument("--loop", choices=("uvloop", "asyncio"), default="uvloop",
                        help="event loop of our balancer")
    parser.add_argument("--out", type=Path, default=None,
                        help="append one JSON line per cell (every slice's figures)")
    parser.add_argument("--sessions", action="store_true",
                        help="prompts=shared: send each request's conversation key in "
                        "x-director-session and X-SMG-Routing-Key")
    args = parser.parse_args()
    quick = args.quick
    defaults = {"measure": 20.0 if quick else 120.0, "repeats": 1 if quick else 3,
                "warmup": 10.0 if quick else 20.0,
                "cells": QUICK_CELLS if quick else "slots=16;speeds=mixed;trace=azure-conv"}
    for key, value in defaults.items():
        if getattr(args, key) is None:
            setattr(args, key, value)
    return args


def fleets(cells: list[Cell]) -> dict[tuple[str, ...], list[Cell]]:
    """Cells grouped by the simulated fleet they run on (and its time scale: shared prompts
    may need a slower one)."""
    groups: dict[tuple[str, ...], list[Cell]] = {}
    for cell in cells:
        key = (cell.slots, cell.speeds, cell.engine, cell.trace, cell.prompts)
        groups.setdefault(key, []).append(cell)
    return groups


def main() -> int:
    args = parse_args()
    setups = [s for s in args.setups.split(",") if s]
    for setup, binary in (("nginx", "nginx"), ("haproxy", "haproxy")):
        if setup in setups and not have(binary):
            raise SystemExit(f"{binary} not found (apt-get install {binary})")
    smg = [s for s in setups if s.startswith("smg:")]
    unknown = [s for s in smg if s[4:] not in SMG_POLICIES]
    if unknown:
        raise SystemExit(f"--setups: {', '.join(unknown)}: smg's policies are "
                         f"{', '.join(SMG_POLICIES)}")
    if smg and not have("smg"):
        raise SystemExit("smg not found in the virtualenv (bench/install_peers.sh)")
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="director-routing-") as tmp:
        workdir = Path(tmp)
        for group in fleets(parse_cells(args.cells)).values():
            first = group[0]
            servers = first.servers()
            capacity = fleet_capacity(first)
            trace = load_named(first.trace, CONTEXT[first.trace])
            # a shared-prompt body is about 4 bytes per prompt token
            body_bytes = 4 * statistics.fmean(r.prompt_tokens for r in trace) \
                if first.prompts == "shared" else 0.0
            args.scale = auto_scale(capacity, body_bytes) if args.time_scale == "auto" \
                else float(args.time_scale)
            offsets = [random.Random(args.seed + i).randrange(len(trace))
                       for i in range(args.repeats)]
            fleet = SimFleet(workdir, servers, args.scale, kv_events=any(
                s.startswith("ours-precise") for s in setups))
            try:
                for cell in group:
                    runs: dict[str, list[RunStats]] = {s: [] for s in setups}
                    offered = []
                    slices = []
                    for repeat, offset in enumerate(offsets):
                        piece = arrivals_at_load(
                            trace, offset, cell.load, capacity,
                            until=args.warmup + args.measure,
                            span=args.warmup + args.measure + TAIL_LOAD_S, config=servers[0].engine)
                        offered.append(piece.rate)
                        row = {"offset": offset, "rate": piece.rate, "work": piece.demand}
                        requests = prepare(piece.arrivals, cell.max_tokens, cell.prompts,
                                           cell.api, args.sessions)
                        for setup in setups:
                            stats = run_one(setup, workdir, fleet, piece.arrivals, requests,
                                            cell, args)
                            runs[setup].append(stats)
                            row[setup] = dataclasses.asdict(stats)
                            print(f"[{time.monotonic() - started:6.0f}s] {cell.label} slice "
                                  f"{repeat + 1} {setup:<10} TTFT p99 {stats.ttft_p99:7.3f} "
                                  f"E2E p99 {stats.e2e_p99:7.2f} ok {stats.req_per_s:5.2f} "
                                  f"req/s 429 {stats.shed} err {stats.errors} cpu "
                                  f"{stats.cpu:.0%} lost {stats.lost:.1f}s hit "
                                  f"{stats.hit_rate:.0%} max/mean {stats.load_ratio_max:.2f}",
                                  file=sys.stderr)
                        slices.append(row)
                    print_cell(cell, statistics.median(offered), runs, args)
                    if args.out is not None:
                        with args.out.open("a") as f:
                            f.write(json.dumps({"cell": cell.to_json(), "label": cell.label,
                                                "capacity": capacity, "time_scale": args.scale,
                                                "slices": slices}) + "\n")
            finally:
                fleet.stop()
    print(f"\n(wall time {time.monotonic() - started:.0f} s)")
    return 0


if __name__ == "__main__":
    with contextlib.suppress(KeyboardInterrupt):
        sys.exit(main())
