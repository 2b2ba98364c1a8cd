"""Batch probes: many GPU servers probed concurrently, their results written in one pipeline.

A beat entry covers the GPU servers of one region whose phases fall in one slot of the
interval (:mod:`workers.schedule`); its task calls one function here. The HTTP requests run
concurrently on the process's shared aiohttp session (:mod:`workers.probes.session`); the
results go to Redis in one pipelined round trip. Semantics per target are those of the
single-target probes:

- health: each result goes through the same rise/fall Lua script as
  :func:`workers.probes.http_health.probe_gpu_health`, with the target's own thresholds, the
  time its own request started, and the batch's probe id (a redelivered batch is a no-op for
  every target, since the script compares the id stored on each target's record);
- metrics: each page is parsed as by :func:`workers.probes.metrics_scrape.scrape_gpu_metrics`;
  a target whose scrape fails is logged and left out, the others are stored.

A slow or dead target costs its own timeout only; it never delays the others' results.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass

import aiohttp

from state.guard import describe, redis_errors
from state.hysteresis import SCRIPT, ProbeOutcome, script_args
from state.records import GpuLoad
from state.store import StateStore
from workers.errors import MetricsError
from workers.probes.http import HttpResult
from workers.probes.metrics_scrape import parse_load
from workers.probes.session import ProbeSession, fetch, shared_session
from workers.targets import GpuTarget

log = logging.getLogger(__name__)

GRACE_SECONDS = 2.0  # beyond the longest timeout of a batch before waiting for it gives up


@dataclass(frozen=True)
class Fetched:
    target: GpuTarget
    started_at: float  # Unix time the request started: the probe's time for rise/fall
    result: HttpResult


def fetch_all(
    targets: Sequence[GpuTarget], path_of: str, *, session: ProbeSession | None = None
) -> list[Fetched]:
    """GET ``target.url + getattr(target, path_of)`` for every target, concurrently."""
    if not targets:
        return []

    async def one(http: aiohttp.ClientSession, target: GpuTarget) -> Fetched:
        started_at = time.time()
        url = target.url + getattr(target, path_of)
        return Fetched(target, started_at, await fetch(http, url, timeout=target.timeout))

    async def every(http: aiohttp.ClientSession) -> list[Fetched]:
        return list(await asyncio.gather(*(one(http, t) for t in targets)))

    wait = max(t.timeout for t in targets) + GRACE_SECONDS
    return (session or shared_session()).run(every, timeout=wait)


def probe_gpu_health_batch(
    store: StateStore,
    targets: Sequence[GpuTarget],
    *,
    probe_id: str = "",
    session: ProbeSession | None = None,
) -> list[ProbeOutcome]:
    """Probe every target's health path; apply each result with its rise/fall (in order)."""
    fetched = fetch_all(targets, "health_path", session=session)
    if not fetched:
        return []
    client = store.client
    hysteresis = client.register_script(SCRIPT)
    with redis_errors(describe(client)):
        pipe = client.pipeline(transaction=False)
        for item in fetched:
            target, result = item.target, item.result
            ok = result.status == target.expect
            error = result.error or (
                "" if ok else f"status {result.status}, expected {target.expect}"
            )
            args = script_args(
                ok=ok,
                rise=target.rise,
                fall=target.fall,
                now=item.started_at,
                probe_id=probe_id,
                status=result.status,
                latency_ms=result.elapsed_ms,
                error=error,
                channel=store.keys.changes,
            )
            hysteresis(keys=[store.keys.health(target.region, target.name)], args=args, client=pipe)
        values = pipe.execute()
    return [ProbeOutcome(int(value)) for value in values]


def scrape_gpu_metrics_batch(
    store: StateStore, targets: Sequence[GpuTarget], *, session: ProbeSession | None = None
) -> dict[str, GpuLoad | MetricsError]:
    """Scrape every target with a metrics path; store each load read.

    Returns each target's load or error, keyed ``region/gpu``.
    """
    scraped = fetch_all([t for t in targets if t.metrics_path is not None], "metrics_path",
                        session=session)  # fmt: skip
    outcomes: dict[str, GpuLoad | MetricsError] = {}
    loads: list[tuple[GpuTarget, GpuLoad]] = []
    for item in scraped:
        target, result = item.target, item.result
        try:
            if result.status != 200:
                where = f"{target.url}{target.metrics_path}"
                raise MetricsError(f"{where}: {result.error or f'status {result.status}'}")
            text = result.body.decode("utf-8", errors="replace")
            load = parse_load(text, target.engine, now=item.started_at)
        except MetricsError as exc:
            log.warning("metrics of %s/%s: %s", target.region, target.name, exc)
            outcomes[f"{target.region}/{target.name}"] = exc
            continue
        outcomes[f"{target.region}/{target.name}"] = load
        loads.append((target, load))
    if loads:
        with redis_errors(describe(store.client)):
            pipe = store.client.pipeline(transaction=False)
            for target, load in loads:
                pipe.hset(store.keys.gpu_load(target.region, target.name), mapping=load.to_fields())
            pipe.execute()
    return outcomes
