# SPDX-License-Identifier: Apache-2.0
"""What tracing costs the balancer: CPU per request with tracing off, at 1% sampling (the
default ratio) and at 100%, beside each other in the same run.

1. **Process CPU per request.** Two simulated GPU servers and our balancer (its own
   process, uvloop, the default profile, as ``region serve`` runs it) get ``--requests``
   small streamed completions (16 prompt tokens, ``--tokens`` out), ``--concurrency`` at
   a time. The balancer is started afresh for every run, with the ``OTEL_*`` variables of
   its mode (``off``: none; ``1%``: ``OTEL_EXPORTER_OTLP_ENDPOINT`` only, so the default
   ``parentbased_traceidratio`` 0.01; ``100%``: also ``OTEL_TRACES_SAMPLER=always_on``),
   exporting over OTLP/HTTP to ``director traces receive`` in another process. Its user +
   system CPU (every thread: the batch exporter's too) over the run, over the requests,
   is its CPU per request. ``--rounds`` rounds run the modes in a rotated order; the cost
   of a mode is its CPU per request minus ``off``'s in the same round: median over the
   rounds with a 95% bootstrap interval.
2. **Per-request cost of the trace stage** (in-process, ``--stage-requests`` calls): the
   ``trace`` stage around a request that answers at once, with a ratio 0.01 sampler and
   the OTLP exporter: the distribution of its wall time per request (a single thread: CPU
   bound), p50 (an unsampled request: what 99% pay) and p99, and the mean of the sampled
   ones. Beside the stage, a sampled request pays its queue and upstream spans and the
   decision's explain (in part 1's ``100%`` column).

::

    .venv/bin/python bench/tracing_overhead.py                 # 5 rounds of 2,000 requests
    .venv/bin/python bench/tracing_overhead.py --rounds 3 --requests 1000 --stage-only
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

import uvloop

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.proxy_overhead import measure
from benchkit.routing_procs import PYTHON, ROOT, Proc, start_ours, start_simulator
from state.ports import free_port

MODES = {
    "off": {},
    "1%": {"OTEL_EXPORTER_OTLP_ENDPOINT": "{endpoint}"},
    "100%": {"OTEL_EXPORTER_OTLP_ENDPOINT": "{endpoint}", "OTEL_TRACES_SAMPLER": "always_on"},
}
OTEL_VARIABLES = ("OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_TRACES_SAMPLER",
                  "OTEL_TRACES_SAMPLER_ARG", "OTEL_TRACES_EXPORTER", "OTEL_SDK_DISABLED")


def bootstrap(values: list[float], rounds: int = 2000, seed: int = 1) -> tuple[float, float]:
    """95% interval of the median of ``values`` (resampled with replacement)."""
    rng = random.Random(seed)
    medians = sorted(statistics.median(rng.choices(values, k=len(values)))
                     for _ in range(rounds))
    return medians[int(0.025 * rounds)], medians[int(0.975 * rounds) - 1]


def cpu_per_request(workdir: Path, mode: str, endpoint: str, sims: list[Proc],
                    args: argparse.Namespace) -> float:
    for name in OTEL_VARIABLES:
        os.environ.pop(name, None)
    os.environ.update({k: v.format(endpoint=endpoint) for k, v in MODES[mode].items()})
    upstreams = [(s.name, "127.0.0.1", int(s.url.rsplit(":", 1)[1])) for s in sims]
    ours = start_ours(workdir, "default", upstreams)
    try:
        before = ours.cpu_seconds()
        asyncio.run(measure([ours.url], args.requests, args.tokens, args.concurrency))
        time.sleep(0.2)  # the batch exporter's last send (every 5 s by default) is counted
        return (ours.cpu_seconds() - before) / (args.requests + 20) * 1e6
    finally:
        ours.stop()
        for name in OTEL_VARIABLES:
            os.environ.pop(name, None)


def stage_costs(requests: int) -> dict[str, float]:
    """The trace stage's own wall time per request, in-process (see the docstring)."""
    from aiohttp import web
    from aiohttp.test_utils import make_mocked_request
    from opentelemetry.sdk.trace import ReadableSpan
    from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult
    from opentelemetry.sdk.trace.sampling import ParentBased, TraceIdRatioBased

    from regions.balancer.http.exchange import Exchange
    from regions.balancer.http.trace_stage import TraceRequests
    from regions.balancer.types import Endpoint
    from telemetry.otel import build_tracing

    class Dropped(SpanExporter):  # the export's own cost is part 1's
        def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
            return SpanExportResult.SUCCESS

    tracing = build_tracing("bench", "director.balancer", Dropped(),
                            ParentBased(TraceIdRatioBased(0.01)))
    stage = TraceRequests(tracing.tracer, "bench")
    answer = web.Response(status=200)

    async def call_next(exchange: Exchange) -> web.StreamResponse:
        return answer

    async def run() -> tuple[list[float], list[float]]:
        unsampled, sampled = [], []
        request = make_mocked_request("POST", "/v1/chat/completions",
                                      headers={"Host": "chat.example.com"})
        for _ in range(requests):
            exchange = Exchange(request, Endpoint.CHAT)
            start = time.perf_counter()
            await stage(exchange, call_next)
            took = (time.perf_counter() - start) * 1e6
            (sampled if exchange.trace is not None else unsampled).append(took)
        return unsampled, sampled

    unsampled, sampled = uvloop.run(run())
    every = sorted(unsampled + sampled)
    tracing.provider.shutdown()
    return {"p50_us": every[len(every) // 2], "p99_us": every[int(len(every) * 0.99)],
            "unsampled_mean_us": statistics.fmean(unsampled),
            "sampled_mean_us": statistics.fmean(sampled) if sampled else float("nan"),
            "sampled": len(sampled), "requests": len(every)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--requests", type=int, default=2000)
    parser.add_argument("--tokens", type=int, default=16)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--scale", type=float, default=20.0, help="the simulators' time scale")
    parser.add_argument("--stage-requests", type=int, default=100_000)
    parser.add_argument("--stage-only", action="store_true")
    args = parser.parse_args()

    stage = stage_costs(args.stage_requests)
    print(f"trace stage per request: p50 {stage['p50_us']:.1f} us, p99 {stage['p99_us']:.1f} "
          f"us; unsampled mean {stage['unsampled_mean_us']:.1f} us, sampled mean "
          f"{stage['sampled_mean_us']:.1f} us ({stage['sampled']} of {stage['requests']})",
          flush=True)
    if args.stage_only:
        return 0

    with tempfile.TemporaryDirectory() as tmp:
        workdir = Path(tmp)
        port = free_port()
        receiver = subprocess.Popen(
            [PYTHON, "-m", "director", "traces", "receive", str(workdir / "spans.jsonl"),
             "--listen", f"127.0.0.1:{port}"], cwd=ROOT, stderr=subprocess.DEVNULL)
        sims = [start_simulator(workdir, f"gpu{i}", 1.0, args.scale) for i in range(2)]
        costs: dict[str, list[float]] = {mode: [] for mode in MODES}
        try:
            names = list(MODES)
            for r in range(args.rounds):
                order = names[r % len(names):] + names[:r % len(names)]
                for mode in order:
                    costs[mode].append(cpu_per_request(
                        workdir, mode, f"http://127.0.0.1:{port}", sims, args))
                print(f"round {r + 1}: " + ", ".join(f"{m} {costs[m][-1]:.0f} us"
                                                     for m in names), flush=True)
        finally:
            for sim in sims:
                sim.stop()
            receiver.terminate()
            receiver.wait(10)
        spans = sum(1 for _ in (workdir / "spans.jsonl").open()) \
            if (workdir / "spans.jsonl").exists() else 0
    print(f"\nbalancer CPU per request, {args.rounds} rounds of {args.requests} requests "
          f"({args.tokens} tokens, {args.concurrency} at a time); spans received: {spans}")
    for mode in MODES:
        print(f"  {mode:>5}: median {statistics.median(costs[mode]):.0f} us "
              f"(runs {', '.join(f'{c:.0f}' for c in costs[mode])})")
    for mode in ("1%", "100%"):
        extra = [a - b for a, b in zip(costs[mode], costs["off"], strict=True)]
        low, high = bootstrap(extra)
        print(f"  {mode} - off: median {statistics.median(extra):+.1f} us per request, "
              f"95% interval [{low:+.1f}, {high:+.1f}]")
    return 0


if __name__ == "__main__":
    sys.exit(main())
