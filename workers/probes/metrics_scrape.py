"""Scrape a GPU server's Prometheus ``/metrics`` into one normalised :class:`GpuLoad`,
read with the engine's metric names as ``engines.metrics`` knows them (vLLM, SGLang, TGI,
Triton; an unknown engine is detected from the page). A page with none of the engine's
queue metrics is an error, so a misconfigured ``engine`` never reads as an idle server.
"""

from __future__ import annotations

import time

import engines
from engines import EngineDataError
from state.records import GpuLoad
from state.store import StateStore
from workers.errors import MetricsError
from workers.probes.http import http_get
from workers.targets import GpuTarget


def parse_load(text: str, engine: str, *, now: float | None = None) -> GpuLoad:
    """The load a metrics page reports, read with ``engine``'s metric names
    (``engines.metrics``); ``MetricsError`` when it is not such a page."""
    try:
        load = engines.parse_load(text, engine)
    except EngineDataError as exc:
        raise MetricsError(str(exc)) from exc
    return GpuLoad(
        engine=load.engine,
        waiting=load.waiting,
        running=load.running or 0.0,
        cache_usage=load.cache_usage,
        timestamp=time.time() if now is None else now,
    )


def scrape_gpu_metrics(store: StateStore, target: GpuTarget) -> GpuLoad | None:
    """Scrape one GPU server and store its load; None when it has no metrics path."""
    if target.metrics_path is None:
        return None
    now = time.time()
    result = http_get(target.url + target.metrics_path, timeout=target.timeout)
    if result.status != 200:
        raise MetricsError(
            f"{target.url}{target.metrics_path}: {result.error or f'status {result.status}'}"
        )
    load = parse_load(result.body.decode("utf-8", errors="replace"), target.engine, now=now)
    store.write_gpu_load(target.region, target.name, load)
    return load
