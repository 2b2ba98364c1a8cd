# SPDX-License-Identifier: Apache-2.0
"""Overload at several times capacity: does a degradation ladder keep answering within the
TTFT target, and is every 429's Retry-After served when a client honours it?

One region in process, on uvloop: ``--big`` simulated servers of ``big-model`` and
``--small`` of ``small-model`` (``--small-speed`` over ``--big-speed``: the lighter model is
the same server, that much faster), vLLM v1 scheduling (chunked prefill, 8,192 tokens an
iteration), ``--slots`` sequences each, pinned in the balancer as a policy's ``max-seqs``
pins them (without a pin or late binding the balancer holds nothing, its queue stays empty
and no ladder trigger ever holds). The balancer has no policy: each cell gives it a default
ladder (``BalancerConfig.degrade``):

- ``a``: no ladder (the balancer queues, ``AdmissionConfig`` defaults, and sheds with 429
  when its queue is full or a wait is too long);
- ``b``: ``shed when queue-wait 1s``;
- ``c``: ``model small-model when saturation 100%``, then ``shed when queue-wait 1s``;
- ``d``: ``c``'s ladder at ``--low-load`` (2x), against ``a2``, no ladder at 2x.

Load: streamed chat requests for ``big-model`` replaying a slice of the Azure LLM 2023
conversation trace (its gaps and token counts; another slice per seed, the same slice in
every cell of a seed) for ``--duration`` seconds, at ``--load`` (3x) the big pool's
capacity in work (``benchkit.routing_trace.arrivals_at_load``). Capacity: what one big
server sustains on the trace, measured on the engine alone on a virtual clock with a
closed loop of twice as many clients as slots (``benchkit.routing_matrix.server_capacity``,
as the routing matrix measures it), times ``--big``; each run also reports what the big
pool answered per second over HTTP once saturated. Then a cool-down without arrivals while
retries are sent, until every request has its outcome (at most ``--drain`` seconds).

A client given a 429 honours its Retry-After once: it sleeps that long and sends the same
body again. A request counts once, by its final outcome (the retry's, if any). Time runs
at scale 1 (model seconds are wall seconds): the balancer's clock is the wall clock, so
Retry-After, queue-wait triggers, promises and queue timeouts are in model seconds only
at scale 1.

Per cell, over ``--seeds`` seeds: goodput (requests answered with TTFT at most the target,
per second of load; the target ``--target`` 2 s, also 1 s and 5 s; the retry's TTFT counts
from its resend, and a stricter figure from the first send), its ratio to the reference
cell with a 95% paired block bootstrap (the same 5 s blocks of arrivals resampled in both
cells, per seed), the share of first answers that were 429, the share of honoured retries
answered (status 200, a first token), TTFT p50/p99 of the answered, and what answered,
from ``x-director-degraded`` (none: ``big-model``; ``model=small-model``; ``shed``),
checked against the model the stream names.

The seeds may run as parallel processes (a run is one process on one event loop; check
the runs' CPU, loop lag and lost model time), then be summarised together::

    flock /tmp/bench.lock bash -c 'for s in 0 1 2; do .venv/bin/python \\
        bench/overload_ladder.py --seeds 1 --first-seed $s --json /tmp/ol/seed$s.jsonl \\
        --requests /tmp/ol/requests$s.jsonl & done; wait'
    cat /tmp/ol/seed?.jsonl > bench/results/overload-ladder.jsonl
    .venv/bin/python bench/overload_ladder.py --summarise bench/results/overload-ladder.jsonl
    # all in one process, one seed after another
    .venv/bin/python bench/overload_ladder.py --seeds 3 --json runs.jsonl
    # a smoke test
    .venv/bin/python bench/overload_ladder.py --seeds 1 --cells a,c --big 2 --small 1 \\
        --duration 10 --drain 40
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import math
import random
import resource
import statistics
import sys
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import aiohttp
import uvloop

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchkit.matrix import CHUNK_TOKENS, KV_TOKENS_PER_SLOT
from benchkit.routing_matrix import server_capacity
from benchkit.routing_trace import MAX_MODEL_LEN, arrivals_at_load, load_named
from policies.model import DegradeAction, DegradeStep, DegradeTrigger
from regions.balancer import BackendSpec, BalancerConfig, build_balancer
from regions.balancer.degrade.ladder import DEGRADED_HEADER
from regions.simulator import Fleet, ServerSpec
from regions.simulator.config import EngineConfig

BIG, SMALL = "big-model", "small-model"
TRACE = "azure-conv"
THRESHOLDS = (1.0, 2.0, 5.0)
BLOCK_S = 5.0  # bootstrap blocks of arrivals
SHED_WAIT = DegradeStep(DegradeAction.SHED, trigger=DegradeTrigger.QUEUE_WAIT, threshold=1.0)
SMALL_SAT = DegradeStep(DegradeAction.MODEL, SMALL, DegradeTrigger.SATURATION, 1.0)


@dataclass(frozen=True)
class CellSpec:
    name: str
    ladder: tuple[DegradeStep, ...]
    high_load: bool  # --load, or --low-load
    reference: str  # the cell without a ladder at the same load

    def describe(self) -> str:
        return "; ".join(s.describe() for s in self.ladder) or "no ladder"


CELLS = {
    "a": CellSpec("a", (), True, "a"),
    "b": CellSpec("b", (SHED_WAIT,), True, "a"),
    "c": CellSpec("c", (SMALL_SAT, SHED_WAIT), True, "a"),
    "a2": CellSpec("a2", (), False, "a2"),
    "d": CellSpec("d", (SMALL_SAT, SHED_WAIT), False, "a2"),
}


@dataclass
class Attempt:
    sent: float  # seconds since the run's start
    status: int = 0  # 0: no answer (connection error, or cut at the end of the run)
    ttft: float | None = None  # to the first data event, from ``sent``
    degraded: str | None = None
    retry_after: str | None = None
    model: str | None = None  # as the first data event names it
    done: bool = False  # the stream ended with [DONE]
    error: bool = False  # an error event in the stream

    @property
    def answered(self) -> bool:
        return self.status == 200 and self.ttft is not None

    def kind(self) -> str:
        """What answered: big, small, shed (429 from the ladder), 429 (the queue's own),
        or the failure."""
        if self.answered:
            return "small" if self.degraded == f"model={SMALL}" else \
                "big" if self.degraded is None else f"other:{self.degraded}"
        if self.status == 429:
            return "shed" if self.degraded == "shed" else "429"
        return "no-answer" if self.status == 0 else f"status-{self.status}"


@dataclass
class Request:
    i: int
    at: float
    first: Attempt | None = None
    retry: Attempt | None = None
    retry_due: bool = False  # a 429 with a Retry-After: a retry is (or was) due

    @property
    def final(self) -> Attempt | None:
        return self.retry or self.first

    def ttft_from_first_send(self) -> float | None:
        final = self.final
        if final is None or not final.answered or self.first is None:
            return None
        assert final.ttft is not None
        return final.sent - self.first.sent + final.ttft


# -- the client -------------------------------------------------------------------------


async def attempt(session: aiohttp.ClientSession, url: str, data: bytes, out: Attempt,
                  first_token: asyncio.Future[None]) -> None:
    """One POST, filling ``out`` as it goes (a run cut short keeps what it had);
    ``first_token`` is set at its first data event."""
    sent = time.monotonic()
    try:
        async with session.post(url, data=data,
                                headers={"Content-Type": "application/json"}) as resp:
            out.status = resp.status
            out.degraded = resp.headers.get(DEGRADED_HEADER)
            out.retry_after = resp.headers.get("Retry-After")
            if resp.status != 200:
                await resp.read()
                return
            head, tail = b"", b""
            async for chunk in resp.content.iter_any():
                if out.model is None:
                    if out.ttft is None and b"data: {" in head + chunk:
                        out.ttft = time.monotonic() - sent
                        _settle(first_token)
                    head += chunk
                    out.model = _first_model(head)
                if b'"error"' in chunk:
                    out.error = True
                tail = (tail + chunk)[-64:]
            out.done = b"[DONE]" in tail
    except aiohttp.ClientError:
        pass


def _first_model(head: bytes) -> str | None:
    start = head.find(b"data: {")
    end = head.find(b"\n", start)
    if start < 0 or end < 0:
        return None
    try:
        return str(json.loads(head[start + 6:end]).get("model"))
    except ValueError:
        return "?"


async def client(session: aiohttp.ClientSession, url: str, req: Request, data: bytes,
                 origin: float, outcome: asyncio.Future[None]) -> None:
    """Send; on a 429 honour its Retry-After once (the same body again). ``outcome`` is
    set as soon as the final outcome is known (a first token, or a final failure); the
    stream is read on to its end."""
    req.first = Attempt(time.monotonic() - origin)
    await _send(session, url, data, req.first, outcome, last=False)
    if req.first.status != 429 or req.first.retry_after is None:
        _settle(outcome)
        return
    try:
        after = float(req.first.retry_after)
    except ValueError:
        _settle(outcome)
        return
    req.retry_due = True
    await asyncio.sleep(max(0.0, after))
    req.retry = Attempt(time.monotonic() - origin)
    await _send(session, url, data, req.retry, outcome, last=True)


async def _send(session: aiohttp.ClientSession, url: str, data: bytes, out: Attempt,
                outcome: asyncio.Future[None], last: bool) -> None:
    """``out``'s attempt, to its end (a 200's stream read through, or the run cut)."""
    first_token: asyncio.Future[None] = asyncio.get_running_loop().create_future()
    task = asyncio.ensure_future(attempt(session, url, data, out, first_token))
    try:
        await asyncio.wait({task, first_token}, return_when=asyncio.FIRST_COMPLETED)
        if first_token.done() or last or out.status != 429:
            _settle(outcome)
        await task
    finally:
        task.cancel()


def _settle(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)


# -- one run ----------------------------------------------------------------------------


def engine(speed: float, slots: int) -> EngineConfig:
    return EngineConfig(speed=speed, max_num_seqs=slots, max_model_len=MAX_MODEL_LEN,
                        kv_cache_tokens=max(slots * KV_TOKENS_PER_SLOT, MAX_MODEL_LEN),
                        max_prefill_tokens=16_384).chunked(CHUNK_TOKENS)


def body(seed: int, i: int, prompt: int, output: int) -> bytes:
    return json.dumps({"model": BIG, "stream": True,
                       "messages": [{"role": "user", "content": f"request {seed}-{i}"}],
                       "max_tokens": output, "x_output_tokens": output,
                       "x_prompt_tokens": prompt}, separators=(",", ":")).encode()


class WarningCount(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.counts: Counter[str] = Counter()

    def emit(self, record: logging.LogRecord) -> None:
        self.counts[str(record.msg)[:60]] += 1


async def one_run(cell: CellSpec, seed: int, args: argparse.Namespace,
                  capacity: dict[str, float]) -> dict[str, object]:
    load = args.load if cell.high_load else args.low_load
    big_engine, small_engine = engine(args.big_speed, args.slots), \
        engine(args.small_speed, args.slots)
    trace = load_named(TRACE)
    offset = random.Random(seed).randrange(len(trace))
    pool_capacity = args.big * capacity["big"]
    sliced = arrivals_at_load(trace, offset, load=load, capacity=pool_capacity,
                              until=args.duration, span=args.duration, config=big_engine)
    arrivals = [a for a in sliced.arrivals if a.at < args.duration]
    specs = [ServerSpec(f"big{i}", models=(BIG,), speed=args.big_speed, engine=big_engine)
             for i in range(args.big)]
    specs += [ServerSpec(f"small{i}", models=(SMALL,), speed=args.small_speed,
                         engine=small_engine) for i in range(args.small)]
    requests = [Request(i, a.at) for i, a in enumerate(arrivals)]
    warnings = WarningCount()
    logging.getLogger().addHandler(warnings)
    timeline: list[dict[str, float]] = []
    lags: list[float] = []
    usage = resource.getrusage(resource.RUSAGE_SELF)
    wall0 = time.monotonic()
    try:
        async with Fleet(specs, time_scale=1.0) as fleet:
            backends = [BackendSpec(s.spec.name, s.url, s.spec.models, args.slots)
                        for s in fleet]
            balancer = build_balancer("overload", backends, BalancerConfig(degrade=cell.ladder))
            connector = aiohttp.TCPConnector(limit=0)
            timeout = aiohttp.ClientTimeout(total=None, sock_connect=10)
            async with balancer, aiohttp.ClientSession(connector=connector,
                                                       timeout=timeout) as session:
                url = f"{balancer.url}/v1/chat/completions"
                origin = time.monotonic()
                stop = asyncio.Event()
                watchers = [asyncio.create_task(_lag(lags, stop)),
                            asyncio.create_task(_sample(balancer, origin, timeline, stop))]
                tasks: list[asyncio.Task[None]] = []
                outcomes: list[asyncio.Future[None]] = []
                loop = asyncio.get_running_loop()
                for req, a in zip(requests, arrivals, strict=True):
                    delay = origin + a.at - time.monotonic()
                    if delay > 0:
                        await asyncio.sleep(delay)
                    outcome = loop.create_future()
                    outcomes.append(outcome)
                    tasks.append(asyncio.create_task(client(
                        session, url, req, body(seed, req.i, a.prompt_tokens, a.output_tokens),
                        origin, outcome)))
                left = origin + args.duration + args.drain - time.monotonic()
                _, pending = await asyncio.wait(outcomes, timeout=max(0.0, left))
                settled_at = time.monotonic() - origin
                stop.set()
                for task in tasks:
                    task.cancel()
                await asyncio.gather(*tasks, *watchers, return_exceptions=True)
            lost = sum(s.engine.state().lost_s for s in fleet)
    finally:
        logging.getLogger().removeHandler(warnings)
    after = resource.getrusage(resource.RUSAGE_SELF)
    wall = time.monotonic() - wall0
    cpu = after.ru_utime + after.ru_stime - usage.ru_utime - usage.ru_stime
    if args.requests is not None:
        with args.requests.open("a") as f:
            f.write(json.dumps({"cell": cell.name, "seed": seed, "requests": [
                [r.at, _brief(r.first), _brief(r.retry)] for r in requests]}) + "\n")
    return summarise_run(cell, seed, load, args, requests, {
        "offset": offset, "rate": sliced.rate, "demand": sliced.demand,
        "pool_capacity": pool_capacity, "unsettled": len(pending),
        "settled_at": round(settled_at, 1), "wall_s": round(wall, 1),
        "cpu_per_wall": round(cpu / wall, 3), "loop_lag_p99_ms": round(
            1000 * quantile(lags, 0.99), 1), "loop_lag_max_ms": round(
            1000 * max(lags, default=0.0), 1), "lost_model_s": round(lost, 3),
        "warnings": dict(warnings.counts), "timeline": timeline})


def _brief(a: Attempt | None) -> list[object] | None:
    """An attempt as [sent s, status, TTFT s, x-director-degraded, Retry-After, model]."""
    return None if a is None else [round(a.sent, 3), a.status, a.ttft and round(a.ttft, 3),
                                   a.degraded, a.retry_after, a.model]


async def _lag(lags: list[float], stop: asyncio.Event) -> None:
    while not stop.is_set():
        before = time.monotonic()
        await asyncio.sleep(0.05)
        lags.append(max(0.0, time.monotonic() - before - 0.05))


async def _sample(balancer, origin: float, timeline: list[dict[str, float]],
                  stop: asyncio.Event) -> None:
    """Once a second: the region queue, what runs where, the ladder's signals."""
    while not stop.is_set():
        snapshot = balancer.pool.snapshot()
        flight = Counter()
        for view in snapshot.backends:
            flight[BIG if BIG in view.models else SMALL] += view.in_flight
        signals = balancer.ladder.explain(None, BIG)["signals"]
        queued = Counter(e.request.model for e in getattr(balancer.dispatcher, "_queue", ()))
        timeline.append({"t": round(time.monotonic() - origin, 1),
                         "queued": balancer.dispatcher.queued, "queued_small": queued[SMALL],
                         "big": flight[BIG], "small": flight[SMALL],
                         "queue_wait": round(balancer.dispatcher.oldest_wait(), 2),
                         "saturation": signals["saturation"]})
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(stop.wait(), 1.0)


# -- figures ----------------------------------------------------------------------------


def quantile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def summarise_run(cell: CellSpec, seed: int, load: float, args: argparse.Namespace,
                  requests: list[Request], extra: dict[str, object]) -> dict[str, object]:
    blocks = math.ceil(args.duration / BLOCK_S)
    good: dict[str, list[int]] = {}
    for target in THRESHOLDS:
        for strict in (False, True):
            counts = [0] * blocks
            for r in requests:
                t = r.ttft_from_first_send() if strict else \
                    (r.final.ttft if r.final is not None and r.final.answered else None)
                if t is not None and t <= target:
                    counts[min(blocks - 1, int(r.at // BLOCK_S))] += 1
            good[f"{target:g}{'-first-send' if strict else ''}"] = counts
    firsts = [r.first for r in requests if r.first is not None]
    retries = [r.retry for r in requests if r.retry is not None]
    finals = [r.final for r in requests if r.final is not None]
    four29 = [a for a in firsts + retries if a.status == 429]
    after = [int(a.retry_after) for a in four29 if a.retry_after and a.retry_after.isdigit()]
    mismatched = sum(1 for a in firsts + retries if a.answered and a.model is not None
                     and a.model != {"small": SMALL, "big": BIG}.get(a.kind()))
    saturated = [r for r in requests if r.final is not None and r.final.answered
                 and r.final.kind() == "big"
                 and 20.0 <= r.final.sent + (r.final.ttft or 0.0) < args.duration]
    window = [x for x in extra["timeline"] if 20.0 <= x["t"] < args.duration]  # type: ignore
    reshed = [r for r in requests if r.retry is not None and r.retry.status == 429]
    return {
        "cell": cell.name, "ladder": cell.describe(), "seed": seed, "load": load,
        "requests": len(requests), **extra,
        "first": dict(Counter(a.kind() for a in firsts)),
        "retry": dict(Counter(a.kind() for a in retries)),
        "final": dict(Counter(a.kind() for a in finals)),
        "no_outcome": len(requests) - len(finals),
        "retries_cut": sum(1 for r in requests if r.retry_due and r.retry is None),
        "retry_after_missing": sum(1 for a in four29 if not a.retry_after),
        "retry_after_s": {"p50": quantile(after, 0.5), "max": max(after, default=None)},
        "retries_answered_in": {f"{t:g}": sum(1 for a in retries if a.answered
                                              and a.ttft is not None and a.ttft <= t)
                                for t in THRESHOLDS},
        "retry_ttft_ms": sorted(round(1000 * a.ttft) for a in retries
                                if a.answered and a.ttft is not None),
        "header_model_mismatch": mismatched,
        # retries shed again, by the Retry-After their first 429 gave (the promises' horizon,
        # 120 s, is given unpromised: such a retry is not served first)
        "reshed_by_first_retry_after": dict(Counter(str(r.first.retry_after) for r in reshed
                                                    if r.first is not None)),
        "retry_after_120": sum(1 for a in four29 if a.retry_after == "120"),
        "big_in_flight_mean": round(statistics.fmean(x["big"] for x in window), 1)
        if window else None,
        "seconds_big_free_while_queued": sum(1 for x in window if x["queued"] > 0
                                             and x["big"] < args.big * args.slots),
        "streams_broken": sum(1 for a in firsts + retries if a.answered and a.error),
        "big_answers_per_s_saturated": round(len(saturated) / max(1e-9, args.duration - 20),
                                             3),
        "good_blocks": good,
        "ttft_ms": sorted(round(1000 * a.ttft) for a in finals
                          if a.answered and a.ttft is not None),
        "ttft_first_send_ms": sorted(round(1000 * t) for r in requests
                                     if (t := r.ttft_from_first_send()) is not None),
    }


def paired_bootstrap(runs: list[dict], refs: dict[int, dict], key: str,
                     rng: random.Random, rounds: int = 2000
                     ) -> tuple[float, float, float, float, float, float]:
    """Goodput per second (point, 95% interval) and its ratio to the reference runs of the
    same seeds (point, 95% interval): each seed's blocks of arrivals resampled with
    replacement, the same blocks in both cells (a seed without a reference run is its own)."""
    pairs = [(r["good_blocks"][key], refs.get(r["seed"], r)["good_blocks"][key])
             for r in runs]
    seconds = sum(len(b) for b, _ in pairs) * BLOCK_S
    mine = sum(sum(b) for b, _ in pairs)
    theirs = sum(sum(b) for _, b in pairs)
    goodputs, ratios = [], []
    for _ in range(rounds):
        g = h = 0
        for b, ref in pairs:
            for k in [rng.randrange(len(b)) for _ in b]:
                g += b[k]
                h += ref[k]
        goodputs.append(g / seconds)
        ratios.append(g / h if h else math.inf)
    goodputs.sort()
    ratios.sort()
    lo, hi = int(0.025 * rounds), int(0.975 * rounds) - 1
    return (mine / seconds, goodputs[lo], goodputs[hi],
            mine / theirs if theirs else math.inf, ratios[lo], ratios[hi])


def fmt_ratio(x: float) -> str:
    return "inf" if math.isinf(x) else f"{x:.2f}"


def summary(runs: list[dict], target: float) -> str:
    rng = random.Random(0)
    by_cell: dict[str, list[dict]] = {}
    for r in runs:
        by_cell.setdefault(r["cell"], []).append(r)
    key = f"{target:g}"
    lines = [f"### Goodput at TTFT <= {target:g} s, ratio to the cell without a ladder at "
             f"the same load (95% paired block bootstrap over {BLOCK_S:g} s "
             "blocks, seeds pooled)", "",
             "| cell | ladder | load | seeds | goodput/s [95% CI] | ratio [95% CI] | >= 2x in "
             "interval | 429 share (first sends) | honoured retries answered | TTFT p50 / "
             "p99 s | final: big / small / shed / 429 / other |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    verdicts = []
    for name, mine in by_cell.items():
        ref_name = CELLS[name].reference
        refs = {r["seed"]: r for r in by_cell.get(ref_name, [])}
        g, glo, ghi, ratio, rlo, rhi = paired_bootstrap(mine, refs, key, rng)
        firsts = Counter()
        finals = Counter()
        retries = Counter()
        for r in mine:
            firsts.update(r["first"])
            finals.update(r["final"])
            retries.update(r["retry"])
        sent = sum(firsts.values())
        share429 = (firsts["shed"] + firsts["429"]) / sent if sent else float("nan")
        honoured = sum(retries.values())
        answered = retries["big"] + retries["small"]
        ttft = [t / 1000 for r in mine for t in r["ttft_ms"]]
        other = sum(v for k, v in finals.items() if k not in ("big", "small", "shed", "429"))
        holds = "-" if name == ref_name or not refs else ("yes" if rlo >= 2 else "no")
        if holds != "-":
            verdicts.append((rlo, name, ratio, rhi))
        ratio_text = "-" if name == ref_name or not refs else \
            f"{fmt_ratio(ratio)} [{fmt_ratio(rlo)}-{fmt_ratio(rhi)}]"
        lines.append(
            f"| {name} | {CELLS[name].describe()} | {mine[0]['load']:g}x | {len(mine)} | "
            f"{g:.2f} [{glo:.2f}-{ghi:.2f}] | {ratio_text} | {holds} | {share429:.1%} | "
            f"{answered}/{honoured}" + (f" ({answered / honoured:.1%})" if honoured else "")
            + f" | {quantile(ttft, 0.5):.2f} / {quantile(ttft, 0.99):.2f} | "
            f"{finals['big']} / {finals['small']} / {finals['shed']} / {finals['429']} / "
            f"{other} |")
    if verdicts:
        worst, best = min(verdicts), max(verdicts)
        every = all(v[0] >= 2 for v in verdicts)
        lines += ["", f"The >= 2x goal {'holds' if every else 'does NOT hold'} in every ladder "
                  f"cell's interval at {target:g} s. Worst: {worst[1]} ({fmt_ratio(worst[2])}, "
                  f"low end {fmt_ratio(worst[0])}); best: {best[1]} ({fmt_ratio(best[2])}, "
                  f"low end {fmt_ratio(best[0])})."]
    return "\n".join(lines)


def strict_table(runs: list[dict]) -> str:
    rng = random.Random(1)
    by_cell: dict[str, list[dict]] = {}
    for r in runs:
        by_cell.setdefault(r["cell"], []).append(r)
    lines = ["| cell | " + " | ".join(f"goodput {t:g} s (ratio) | from first send {t:g} s "
                                     f"(ratio)" for t in THRESHOLDS) + " |",
             "|---|" + "---|---|" * len(THRESHOLDS)]
    for name, mine in by_cell.items():
        refs = {r["seed"]: r for r in by_cell.get(CELLS[name].reference, [])}
        cells = []
        for t in THRESHOLDS:
            for key in (f"{t:g}", f"{t:g}-first-send"):
                g, _, _, ratio, rlo, rhi = paired_bootstrap(mine, refs, key, rng, rounds=1000)
                cells.append(f"{g:.2f} ({fmt_ratio(ratio)} [{fmt_ratio(rlo)}-"
                             f"{fmt_ratio(rhi)}])" if refs and name != CELLS[name].reference
                             else f"{g:.2f}")
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def runs_table(runs: list[dict]) -> str:
    lines = ["| cell | seed | requests | rate/s | first: big / small / shed / 429 / other | "
             "retries: sent, answered, in 2 s | Retry-After p50 / max s | 429 without "
             "Retry-After | no outcome | TTFT p50 / p99 s | big answers/s saturated | "
             "big in flight, mean 20-60 s | seconds a big slot was free while requests "
             "queued | header mismatches | broken streams | settled at s | CPU/wall | loop lag "
             "p99 ms | lost model s |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in runs:
        f, rt = Counter(r["first"]), Counter(r["retry"])
        other = sum(v for k, v in f.items() if k not in ("big", "small", "shed", "429"))
        answered = rt["big"] + rt["small"]
        ttft = [t / 1000 for t in r["ttft_ms"]]
        ra = r["retry_after_s"]
        window = [x for x in r["timeline"] if 20.0 <= x["t"] < 60.0]
        full = max((x["big"] for x in r["timeline"]), default=0)
        mean_big = r.get("big_in_flight_mean") or (
            statistics.fmean(x["big"] for x in window) if window else float("nan"))
        free = r.get("seconds_big_free_while_queued", sum(
            1 for x in window if x["queued"] > 0 and x["big"] < full))
        lines.append(
            f"| {r['cell']} | {r['seed']} | {r['requests']} | {r['rate']:.1f} | {f['big']} / "
            f"{f['small']} / {f['shed']} / {f['429']} / {other} | {sum(rt.values())}, "
            f"{answered}, {r['retries_answered_in']['2']} | {ra['p50']:g} / {ra['max']} | "
            f"{r['retry_after_missing']} | {r['no_outcome']} | {quantile(ttft, 0.5):.2f} / "
            f"{quantile(ttft, 0.99):.2f} | {r['big_answers_per_s_saturated']:.2f} | "
            f"{mean_big:.0f} | {free} | {r['header_model_mismatch']} | "
            f"{r['streams_broken']} | {r['settled_at']} | "
            f"{r['cpu_per_wall']} | {r['loop_lag_p99_ms']} | {r['lost_model_s']} |")
    return "\n".join(lines)


def timeline_table(runs: list[dict], every_s: float = 20.0) -> str:
    """Each cell's first run, every ``every_s`` seconds: the region queue (of it, requests
    for the small model), requests in flight on each pool, the ladder's signals for the big
    model."""
    lines = ["| cell (seed) | " + " | ".join(f"t={t:g}" for t in range(0, 200, int(every_s)))
             + " |", "|---|" + "---|" * 10,
             "", "(each: queued (of them small-model) / in flight big / in flight small / "
             "queue-wait s / saturation)", ""]
    header, rows = lines[:2], []
    seen: set[str] = set()
    for r in runs:
        if r["cell"] in seen:
            continue
        seen.add(r["cell"])
        cells = []
        for t in range(0, 200, int(every_s)):
            near = min(r["timeline"], key=lambda x: abs(x["t"] - t), default=None)
            cells.append("-" if near is None or abs(near["t"] - t) > 1.5 else
                         f"{near['queued']} ({near.get('queued_small', 0)}) / {near['big']} / "
                         f"{near['small']} / {near['queue_wait']:g} / {near['saturation']:g}")
        rows.append(f"| {r['cell']} ({r['seed']}) | " + " | ".join(cells) + " |")
    return "\n".join(header + rows + lines[2:])


def render(runs: list[dict], target: float) -> str:
    return "\n\n".join([summary(runs, target), "### Goodput at 1, 2 and 5 s, and counted "
                        "from the first send (a retried request's wait included)",
                        strict_table(runs), "### Runs", runs_table(runs),
                        "### Timeline", timeline_table(runs)])


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--first-seed", type=int, default=0)
    parser.add_argument("--cells", default="a,b,c,a2,d")
    parser.add_argument("--big", type=int, default=6)
    parser.add_argument("--small", type=int, default=2)
    parser.add_argument("--big-speed", type=float, default=0.25)
    parser.add_argument("--small-speed", type=float, default=1.0)
    parser.add_argument("--slots", type=int, default=64)
    parser.add_argument("--load", type=float, default=3.0)
    parser.add_argument("--low-load", type=float, default=2.0)
    parser.add_argument("--duration", type=float, default=60.0, help="seconds of arrivals")
    parser.add_argument("--drain", type=float, default=150.0,
                        help="seconds after the arrivals to wait for outcomes at most")
    parser.add_argument("--target", type=float, default=2.0, help="TTFT target, seconds")
    parser.add_argument("--json", type=Path, default=None, help="append each run here")
    parser.add_argument("--markdown", type=Path, default=None)
    parser.add_argument("--requests", type=Path, default=None,
                        help="append each run's requests here (each attempt: sent s, status, "
                             "TTFT s, x-director-degraded, Retry-After, model)")
    parser.add_argument("--summarise", type=Path, default=None,
                        help="only print the tables of the runs in this JSONL file")
    args = parser.parse_args()
    if args.summarise is not None:
        runs = [json.loads(line) for line in args.summarise.read_text().splitlines() if line]
        print(render(runs, args.target))
        return
    capacity = {"big": server_capacity(TRACE, engine(args.big_speed, args.slots)),
                "small": server_capacity(TRACE, engine(args.small_speed, args.slots))}
    print(json.dumps({"capacity_per_server": capacity, "big_pool": args.big * capacity["big"],
                      "small_pool": args.small * capacity["small"]}), flush=True)
    runs: list[dict] = []
    names = [c.strip() for c in args.cells.split(",") if c.strip()]
    for seed in range(args.first_seed, args.first_seed + args.seeds):
        for name in names:
            run = await one_run(CELLS[name], seed, args, capacity)
            brief = {k: v for k, v in run.items() if k not in (
                "good_blocks", "ttft_ms", "ttft_first_send_ms", "retry_ttft_ms", "timeline")}
            print(json.dumps(brief), flush=True)
            runs.append(run)
            if args.json is not None:
                with args.json.open("a") as f:
                    f.write(json.dumps(run) + "\n")
    text = render(runs, args.target)
    print(text)
    if args.markdown is not None:
        args.markdown.write_text(text + "\n")


if __name__ == "__main__":
    with contextlib.suppress(KeyboardInterrupt):
        uvloop.run(main())
