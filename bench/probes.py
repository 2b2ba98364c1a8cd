"""Benchmark: one Celery worker process (with beat) probing 1,000 simulated GPU endpoints.

One aiohttp server on loopback serves ``/gpu/<n>/health`` for every endpoint and records when
each probe arrives. The schedule batches GPU servers per (region, slot of the interval) (see
:mod:`workers.schedule`); every probe's scheduled time is its batch entry's fire time
(``k * interval + phase``) and lag = arrival - scheduled time, taken modulo the interval (a
lag of more than one interval shows as a missing probe, i.e. a lower rate). Prints the achieved
probe rate against the target, lag p50/p99, and the CPU the worker (with its beat) used.
Run::

    .venv/bin/python bench/probes.py [--endpoints 1000] [--interval 2] [--seconds 30]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import pickle
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from aiohttp import web

from policies.model import (
    Affinity,
    AllDown,
    AllDownKind,
    Capacity,
    Failover,
    GpuServer,
    HealthCheck,
    NoEcs,
    Policy,
    Region,
    Service,
    Soa,
    UnknownKind,
    UnknownLocation,
    Zone,
)
from state import EmbeddedValkey
from workers.config import WorkerSettings
from workers.schedule import build_schedule

REGIONS = 10


def fleet(base: str, endpoints: int, interval: float) -> Policy:
    per_region = endpoints // REGIONS
    regions = tuple(
        Region(
            f"r{r}", 0.0, 0.0, "US", (), (), Capacity(100.0), 1.0,
            tuple(
                GpuServer(f"g{n}", f"{base}/gpu/{r * per_region + n}", ("m",), None, None, "vllm")
                for n in range(per_region)
            ),
            None,
        )
        for r in range(REGIONS)
    )  # fmt: skip
    service = Service(
        "chat.example.com", (), ("geo",), (), 30.0, 5.0, 1, None,
        Failover(3, 2, interval, interval / 2), (), AllDown(AllDownKind.ANSWER_NOTHING),
        UnknownLocation(UnknownKind.ANY), NoEcs.RESOLVER, Affinity.NONE, None,
    )  # fmt: skip
    zone = Zone("example.com", 30.0, Soa("ns1", "host", 1, 1, 1, 1, 1), (), ())
    checks = (HealthCheck("gpu", "/health", 200, interval, 1.0, None),)
    return Policy(zone, (), checks, regions, (service,), 30.0)


def serve(hits: list[tuple[float, int]], ready: threading.Event, port: list[int]) -> None:
    async def health(request: web.Request) -> web.Response:
        hits.append((time.time(), int(request.match_info["n"])))
        return web.Response(text="ok")

    async def main() -> None:
        app = web.Application()
        app.router.add_get("/gpu/{n}/health", health)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0, backlog=1024)
        await site.start()
        port.append(site._server.sockets[0].getsockname()[1])  # type: ignore[union-attr]
        ready.set()
        await asyncio.Event().wait()

    asyncio.run(main())


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--endpoints", type=int, default=1000)
    parser.add_argument("--interval", type=float, default=2.0)
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--warmup", type=float, default=8.0)
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--pool", default="threads", choices=["threads", "prefork", "solo"])
    args = parser.parse_args()

    hits: list[tuple[float, int]] = []
    ready, port = threading.Event(), []
    threading.Thread(target=serve, args=(hits, ready, port), daemon=True).start()
    ready.wait(10)
    policy = fleet(f"http://127.0.0.1:{port[0]}", args.endpoints, args.interval)
    batch_of = {
        int(target["url"].rsplit("/", 1)[1]): name
        for name, entry in build_schedule(policy).items()
        if name.startswith("gpu-health:")
        for target in entry["args"][0]
    }
    phase_of = {
        name: entry["schedule"].phase
        for name, entry in build_schedule(policy).items()
        if name.startswith("gpu-health:")
    }
    phases = {n: phase_of[name] for n, name in batch_of.items()}
    entries = len(phase_of)

    with EmbeddedValkey() as valkey, tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "policy.pickle"
        path.write_bytes(pickle.dumps(policy))
        settings = WorkerSettings(redis_url=valkey.url, state_prefix="bench")
        code = (
            "import pickle, sys; from workers.runner import run_worker; "
            f"run_worker(None, {valkey.url!r}, policy=pickle.load(open(sys.argv[1], 'rb')), "
            f"concurrency={args.concurrency}, pool={args.pool!r}, loglevel='ERROR')"
        )
        env = {**os.environ, **settings.to_env(), "PYTHONPATH": os.pathsep.join(sys.path)}
        worker = subprocess.Popen(
            [sys.executable, "-c", code, str(path)], env=env, start_new_session=True
        )
        try:
            time.sleep(args.warmup)
            start = time.time()
            first = len(hits)
            cpu_before = session_cpu_seconds(worker.pid)
            time.sleep(args.seconds)
            window = hits[first:]
            cpu = (session_cpu_seconds(worker.pid) - cpu_before) / args.seconds
        finally:
            os.killpg(worker.pid, signal.SIGTERM)
            try:
                worker.wait(15)
            except subprocess.TimeoutExpired:
                os.killpg(worker.pid, signal.SIGKILL)

    lags = sorted(((t - phases[n]) % args.interval) * 1000 for t, n in window if t >= start)
    target = args.endpoints / args.interval
    rate = len(lags) / args.seconds
    print(f"endpoints={args.endpoints} interval={args.interval}s window={args.seconds}s "
          f"pool={args.pool} concurrency={args.concurrency} cpus={os.cpu_count()}")  # fmt: skip
    print(f"beat entries: {entries} gpu-health batches "
          f"({args.endpoints / max(entries, 1):.1f} endpoints each)")  # fmt: skip
    print(f"probe rate: {rate:.1f}/s achieved vs {target:.1f}/s target ({rate / target:.1%})")
    if lags:
        p50 = statistics.median(lags)
        p99 = lags[min(len(lags) - 1, int(len(lags) * 0.99))]
        print(f"lag (arrival - scheduled): p50 {p50:.1f} ms, p99 {p99:.1f} ms, "
              f"max {lags[-1]:.1f} ms")  # fmt: skip
        # Where lag comes from: a batch's first probe (beat -> broker -> worker pool -> probe
        # loop) versus its spread (the batch's requests and the simulated servers' answers).
        fires: dict[tuple[str, int], list[float]] = {}
        for t, n in window:
            if t < start:
                continue
            lag = (t - phases[n]) % args.interval
            fires.setdefault((batch_of[n], round((t - lag) / args.interval)), []).append(lag)
        firsts = sorted(min(v) * 1000 for v in fires.values())
        spreads = sorted((max(v) - min(v)) * 1000 for v in fires.values())
        print(f"per batch: first probe lag p50 {statistics.median(firsts):.1f} ms, "
              f"p99 {pct(firsts, 0.99):.1f} ms; spread in batch p50 "
              f"{statistics.median(spreads):.1f} ms, p99 {pct(spreads, 0.99):.1f} ms")  # fmt: skip
    print(f"worker CPU (worker + beat processes): {cpu:.0%} of one core")


def pct(values: list[float], q: float) -> float:
    return values[min(len(values) - 1, int(len(values) * q))]


def session_cpu_seconds(sid: int) -> float:
    """User + system CPU seconds of every live process of session ``sid`` (Linux /proc)."""
    ticks = os.sysconf("SC_CLK_TCK")
    total = 0
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[3]) == sid:  # fields after the name: state ppid pgrp session ...
            total += int(fields[11]) + int(fields[12])
    return total / ticks


if __name__ == "__main__":
    main()
