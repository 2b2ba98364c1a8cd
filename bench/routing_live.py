# SPDX-License-Identifier: Apache-2.0
"""Routing benchmark, live: trace slices through our balancer, HAProxy ``leastconn`` and
nginx ``least_conn``, over real HTTP, side by side, cell by cell of the matrix
(``benchkit/matrix.py``: slots per server, speeds, engine, trace, lengths, load).

Per fleet of the selected cells, six simulated GPU servers run as processes
(``bench/routing_sim.py``, each its own process as in ``director up --simulate``); per cell, each
of ``--repeats`` slices (a seeded trace offset) is replayed open-loop and streaming through
every setup in turn, each proxy started fresh; requests arriving in the first ``--warmup``
model seconds are not counted. The load is a share of the fleet's capacity on the cell's
trace, measured in virtual time as ``bench/routing_matrix.py`` measures it, and set in work
(``benchkit.routing_trace.arrivals_at_load``). No balancer is told the speeds or the slots: ours
learns them (``regions.balancer.scheduling.capacity``).

Setups: ``ours`` (default profile), ``ours-prefix`` (``least-requests`` and
``prefix-affinity``, its approximate index), ``ours-precise`` (the same, with the
simulators' KV events: its precise index), ``nginx`` (``least_conn``, ``proxy_buffering off``),
``haproxy`` (``leastconn``, ``option http-no-delay``), ``round-robin`` (ours with the
round-robin picker and no cap), variants ``ours:SCORER.PARAM=VALUE+...``, and
``smg:POLICY``, the SGLang Model Gateway with one of its policies (``cache_aware``,
``prefix_hash``, ``consistent_hashing``, ``least_load``, ``power_of_two``, ``round_robin``;
``bench/install_peers.sh`` installs it; how it is set up: ``benchkit.routing_procs.start_smg``). Per
cell it prints each setup's p50/p99 TTFT and E2E, completed req/s, 429s and errors, the
proxy's CPU use (also per streamed request and per output token), the fleet's prefix-cache
hit rate, the collapse check (the worst second's most loaded server over the mean, and the
share of seconds above 1.5x: ``benchkit.fleet_sampling``), the GPUs' slot use, then each slice's
ours/peer p99 ratios and their median; ``--out FILE`` appends one JSON line per cell with
every slice's figures.

Cells with ``prompts=shared`` (``benchkit/matrix.py``) send the text of each Mooncake request's
prompt blocks (``benchkit.shared_prompts``), so that a prefix cache hits; their simulators are
started afresh before each run, so that no setup inherits another's cache. Request bodies
are built before each slice's replays (``benchkit.routing_client.prepare``); ``--sessions`` also
sends each request's conversation key (``benchkit.routing_client``).

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
import contextlib
import dataclasses
import json
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchkit.matrix import CONTEXT, parse_cells
from benchkit.routing_client import prepare
from benchkit.routing_live import (
    QUICK_CELLS,
    SETUPS,
    TAIL_LOAD_S,
    RunStats,
    SimFleet,
    auto_scale,
    fleets,
    print_cell,
    run_one,
)
from benchkit.routing_matrix import fleet_capacity
from benchkit.routing_procs import SMG_POLICIES, have
from benchkit.routing_trace import arrivals_at_load, load_named


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
