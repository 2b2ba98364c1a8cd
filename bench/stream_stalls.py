# SPDX-License-Identifier: Apache-2.0
"""Streams that stall mid-answer: does the balancer resume them so that the client gets the
whole, unbroken answer, soon after the silence bound?

One region: ``--servers`` simulated vLLM servers (speed ``--speed``, ``--time-scale`` model
seconds per wall second) and the balancer in front (``BalancerConfig()``, but for
``silence``, below) in this process; the client in a child process (its own core: its
reading does not delay the balancer's loop). Requests replay a slice of the Azure
conversation trace (its gaps, prompt and output token counts; another slice per seed) at
``--loads`` of the fleet's capacity, all streamed with ``stream_options.include_usage``,
on one endpoint per cell (``--apis``: chat or completions). Each asks for exactly ``N``
tokens (``x_output_tokens``, the trace's count); ``max_tokens`` is ``N`` for every
fourth request (finish ``length``) and the service cap, 1000, otherwise (finish
``stop``).

After a warm-up (at least ``--warmup`` model seconds and ``--warmup-requests`` requests,
then until every backend's silence bound is learned from its own streams, at most
``--max-warmup``), every server gets the simulator's ``stall`` fault at ``--rate``: that
share of streams goes silent after a random number of its tokens. The requests sent from
then on, for ``--window`` model seconds, are measured; the run ends when they have all
ended, or ``--drain`` model seconds after the window. The first run of a seed finds the
fault's instant and the seed's other runs use the same one, so every run of a seed
measures the same requests:

- ``nofault``: no fault: the reference for TTFT and E2E;
- ``resume``: the stall fault, the balancer resuming (``max_resumes`` 2, the default);
- ``off``: the stall fault, ``max_resumes=0``: the baseline. A stalled stream then stays
  silent until the balancer's read timeout (300 s, the default): once only such streams
  are left, the run ends and counts them as not completed.

Time: the balancer's silence bound is wall time: learned from the streams' wall gaps
(which shrink with the time scale on their own), with a floor (2 s) and a prior (4 x the
floor) that do not. So the matrix runs ``SilenceSettings(floor_s=2 / time_scale)`` (prior
4 x that): the default floor in model seconds. ``--default-cell API:LOAD`` runs that cell
again with ``SilenceSettings()`` as it is: a 2 s wall floor, worth ``2 x time_scale``
model seconds (its reference is the matrix's ``nofault`` run of the same seed).

Checked for every measured request, at the client (aiohttp, its own SSE parser): status
200, no error event, ``[DONE]``; the text equals the unbroken answer
(``token_text(0..N-1)``: no token repeated or missing); the finish reason (``length``
when ``N`` is ``max_tokens``, else ``stop``); one ``id`` in every chunk; usage with
``completion_tokens == N`` and the request's ``prompt_tokens``. Reported per cell:

- stalls: streams the servers silenced (their ``stalled_streams``), the measured requests
  with at least one, and the share of those that completed correctly, with a Wilson 95%
  interval (the cell's seeds pooled);
- detection, per stall: the client-visible gap from the last token before it to the next
  one, against the balancer's bound for that backend (read as the stream started on it):
  p95 and max of ``gap - bound`` and of ``gap / bound``; and ``detect - bound``, from the
  last token to the continuation's arrival at the next server, less the bound (the gap
  without the continuation's time to its first token);
- resumes by outcome (the balancer's ``stream_resumes`` counter), and continuations no
  injected stall explains (a healthy stream silent longer than its bound);
- TTFT and E2E p50 and p99 (model seconds) of the measured requests, and their ratio to
  the ``nofault`` run of the same seeds (bootstrap 95% interval of the p99 ratio); E2E
  over completed requests only; and each stalled request's E2E less its own in the
  ``nofault`` run.

Which stream stalled, after which token, is noted by a ``Fault`` subclass set on each
server, which records the request (its ``user`` field, which a continuation keeps) when the
simulator draws a stall (instrumentation: the draw and the stall are the simulator's).
The servers and the balancer share one event loop: its lag (a 10 ms ticker's overshoot,
over the window and the drain) is reported with each run, since it adds to every gap.

::

    .venv/bin/python bench/stream_stalls.py [--seeds 3] [--loads 0.3,0.7]
        [--apis chat,completions] [--modes nofault,resume,off] [--default-cell chat:0.7]
        [--json FILE] [--markdown FILE]
    .venv/bin/python bench/stream_stalls.py --from-json FILE   # the tables again
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import math
import multiprocessing
import random
import statistics
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchkit.routing_trace import arrivals_at_load, load_named
from regions.balancer import BackendSpec, BalancerConfig, build_balancer
from regions.balancer.http.silence_bound import SilenceSettings
from regions.simulator import Fleet, ServerSpec
from regions.simulator.faults import Fault, FaultMode
from regions.simulator.openai_format import token_text

MODEL = "bench-model"
CAPACITY_PER_SERVER = 5.27  # Azure conversation requests per model second at speed 1.0
SERVICE_CAP = 1000  # max_tokens of three requests in four (the trace's longest answer)
MODES = ("nofault", "resume", "off")
PATHS = {"chat": "/v1/chat/completions", "completions": "/v1/completions"}


# -- what the servers saw ----------------------------------------------------------------


@dataclass
class StallNote:
    key: str  # the request (its ``user``)
    server: str
    first_token: int  # a continuation's offset in the answer (0: the first attempt)
    after: int  # tokens of this stream before it went silent
    bound_s: float  # the balancer's bound for this backend when the stream started (wall)
    at: float  # monotonic time the stream started

    @property
    def last_index(self) -> int:
        """The answer's last token before the silence."""
        return self.first_token + self.after - 1


@dataclass
class Notes:
    """Every stall drawn and every continuation started, by the servers."""

    bound_of: Any = None  # backend name -> the balancer's bound now (set once it runs)
    stuck: Any = None  # told each stalled request's message (a run without resumes)
    stalls: list[StallNote] = field(default_factory=list)
    continuations: list[tuple[str, str, int, float]] = field(default_factory=list)

    def stream(self, server: str, req: Any, after: int | None) -> None:
        key = getattr(req, "user", None)
        first = getattr(req, "first_token", 0)
        if key is None:
            raise RuntimeError("the simulator's _stream no longer has `req`: update the bench")
        now = time.monotonic()
        if first:
            self.continuations.append((key, server, first, now))
        if after is not None:
            bound = self.bound_of(server) if self.bound_of is not None else math.nan
            self.stalls.append(StallNote(key, server, first, after, bound, now))
            if self.stuck is not None:
                self.stuck({"stuck": key})


@dataclass(frozen=True)
class NotedFault(Fault):
    """The simulator's fault, noting each stream it draws a stall for (and each
    continuation) with its request: the simulator calls ``stall_after`` from the stream's
    handler, whose ``req`` is the parsed request."""

    server: str = ""
    notes: Notes | None = field(default=None, compare=False)

    def stall_after(self, rng: random.Random, output_tokens: int) -> int | None:
        after = super().stall_after(rng, output_tokens)
        if self.notes is not None:
            self.notes.stream(self.server, sys._getframe(1).f_locals.get("req"), after)
        return after


# -- what the client saw -----------------------------------------------------------------


@dataclass
class Answer:
    key: str
    tokens: int  # N, the unbroken answer's length
    max_tokens: int
    prompt_tokens: int
    sent: float
    times: list[float] = field(default_factory=list)  # each text event's arrival
    text: str = ""
    finish: str | None = None
    ids: set[str] = field(default_factory=set)
    usage: dict[str, Any] | None = None
    done: bool = False
    status: int | None = None
    error: str | None = None
    ended: float | None = None

    @property
    def expected_finish(self) -> str:
        return "length" if self.tokens == self.max_tokens else "stop"

    def problems(self) -> list[str]:
        """What is wrong with the answer as the client got it (empty: nothing)."""
        out = []
        if self.error is not None:
            out.append(f"error: {self.error}")
        if self.status != 200:
            out.append(f"status {self.status}")
        if not self.done:
            out.append("no [DONE]")
        expected = unbroken(self.tokens)
        if self.text != expected:
            out.append(text_diff(self.text, expected))
        if self.finish != self.expected_finish:
            out.append(f"finish {self.finish!r}, expected {self.expected_finish!r}")
        if len(self.ids) != 1:
            out.append(f"{len(self.ids)} ids")
        usage = self.usage or {}
        if usage.get("completion_tokens") != self.tokens \
                or usage.get("prompt_tokens") != self.prompt_tokens:
            out.append(f"usage {usage}, expected completion {self.tokens} prompt "
                       f"{self.prompt_tokens}")
        return out

    def read(self, event: bytes, now: float) -> None:
        if not event.startswith(b"data:"):
            return
        data = event[5:].strip()
        if data == b"[DONE]":
            self.done = True
            return
        chunk = json.loads(data)
        if "error" in chunk:
            self.error = str(chunk["error"].get("message", chunk["error"]))[:200]
            return
        self.ids.add(chunk.get("id"))
        if chunk.get("usage"):
            self.usage = chunk["usage"]
        for choice in chunk.get("choices") or ():
            delta = choice.get("delta")
            piece = choice.get("text") if delta is None else delta.get("content")
            if piece:
                self.text += piece
                self.times.append(now)
            if choice.get("finish_reason"):
                self.finish = choice["finish_reason"]


_UNBROKEN: dict[int, str] = {}


def unbroken(tokens: int) -> str:
    if tokens not in _UNBROKEN:
        _UNBROKEN[tokens] = "".join(token_text(i) for i in range(tokens))
    return _UNBROKEN[tokens]


def text_diff(got: str, expected: str) -> str:
    at = next((i for i, (a, b) in enumerate(zip(got, expected, strict=False)) if a != b),
              min(len(got), len(expected)))
    return (f"text differs at char {at} (got {len(got)} chars, expected {len(expected)}): "
            f"...{got[max(0, at - 20):at + 30]!r} vs ...{expected[max(0, at - 20):at + 30]!r}")


async def ask(client: aiohttp.ClientSession, api: str, answer: Answer) -> None:
    body: dict[str, Any] = {
        "model": MODEL, "stream": True, "stream_options": {"include_usage": True},
        "max_tokens": answer.max_tokens, "x_output_tokens": answer.tokens,
        "x_prompt_tokens": answer.prompt_tokens, "user": answer.key}
    if api == "chat":
        body["messages"] = [{"role": "user", "content": f"Request {answer.key}: tell me why."}]
    else:
        body["prompt"] = f"Request {answer.key}: once upon a time."
    try:
        async with client.post(PATHS[api], json=body) as resp:
            answer.status = resp.status
            carry = b""
            async for piece in resp.content.iter_any():
                now = time.monotonic()
                carry += piece
                *events, carry = carry.split(b"\n\n")
                for event in events:
                    answer.read(event, now)
    except (aiohttp.ClientError, ValueError) as exc:
        answer.error = answer.error or f"{type(exc).__name__}: {exc}"[:200]
    finally:
        answer.ended = time.monotonic()


# -- one run -----------------------------------------------------------------------------


@dataclass
class Run:
    api: str
    load: float
    seed: int
    mode: str
    silence: str  # "scaled" or "default"
    time_scale: float
    requests: int = 0
    answers: list[Answer] = field(default_factory=list, repr=False)
    stalls: list[StallNote] = field(default_factory=list, repr=False)
    continuations: list[tuple[str, str, int, float]] = field(default_factory=list, repr=False)
    stalled_streams: int = 0  # the servers' counters, over the run
    resumes: dict[str, int] = field(default_factory=dict)
    bounds_at_fault_s: dict[str, float] = field(default_factory=dict)
    loop_lag_p99_ms: float = 0.0
    loop_lag_max_ms: float = 0.0
    cpu_share: float = 0.0
    wall_s: float = 0.0
    unfinished: int = 0  # still open when the run ended
    learned_at_fault: int = 0  # backends whose bound was learned when the fault was set
    client_lag_p99_ms: float = 0.0
    fault_at: float = 0.0  # model seconds after the first arrival

    # -- derived -------------------------------------------------------------------------

    def stalled_keys(self) -> set[str]:
        return {s.key for s in self.stalls}

    def completed(self) -> list[Answer]:
        return [a for a in self.answers if not a.problems()]

    def ttft(self) -> list[float]:
        return [(a.times[0] - a.sent) * self.time_scale for a in self.answers if a.times]

    def e2e(self) -> list[float]:
        return [(a.ended - a.sent) * self.time_scale for a in self.completed()
                if a.ended is not None]

    def detections(self) -> list[dict[str, float]]:
        """Per stall of a measured request: the client-visible gap over it and the bound."""
        answers = {a.key: a for a in self.answers}
        arrivals: dict[tuple[str, int], float] = {}
        for key, _server, first, at in self.continuations:
            arrivals.setdefault((key, first), at)
        out = []
        for s in self.stalls:
            a = answers.get(s.key)
            if a is None or len(a.times) <= s.last_index + 1:
                continue
            last, after = a.times[s.last_index], a.times[s.last_index + 1]
            gap = after - last
            cont = arrivals.get((s.key, s.last_index + 1))
            out.append({"gap_s": gap, "bound_s": s.bound_s, "over_s": gap - s.bound_s,
                        "ratio": gap / s.bound_s,
                        "detect_over_s": (cont - last - s.bound_s) if cont else math.nan})
        return out

    def unexplained_resumes(self) -> int:
        """Continuations that started where no injected stall was (a false stall)."""
        stalled = {(s.key, s.last_index + 1) for s in self.stalls}
        return sum(1 for key, _, first, _ in self.continuations if (key, first) not in stalled)

    def to_json(self) -> dict[str, object]:
        """The run's figures, and the samples the report is made from."""
        stalled = self.stalled_keys()
        measured = [a for a in self.answers if a.key in stalled]
        return {
            "api": self.api, "load": self.load, "seed": self.seed, "mode": self.mode,
            "silence": self.silence, "time_scale": self.time_scale,
            "requests": self.requests, "completed": len(self.completed()),
            "stalled_streams": self.stalled_streams, "stalls_noted": len(self.stalls),
            "stalled_requests": len(measured),
            "stalled_completed": sum(1 for a in measured if not a.problems()),
            "unstalled_failed": sum(1 for a in self.answers
                                    if a.key not in stalled and a.problems()),
            "resumes": self.resumes, "unexplained_resumes": self.unexplained_resumes(),
            "bounds_at_fault_s": {k: round(v, 3) for k, v in self.bounds_at_fault_s.items()},
            "loop_lag_p99_ms": round(self.loop_lag_p99_ms, 1),
            "loop_lag_max_ms": round(self.loop_lag_max_ms, 1),
            "client_lag_p99_ms": round(self.client_lag_p99_ms, 1),
            "cpu_share": round(self.cpu_share, 3), "wall_s": round(self.wall_s, 1),
            "unfinished": self.unfinished, "learned_at_fault": self.learned_at_fault,
            "fault_at": round(self.fault_at, 1),
            "failures": self.failures(limit=20),
            "ttft_s": [round(x, 4) for x in self.ttft()],
            "e2e_s": [round(x, 4) for x in self.e2e()],
            # by request, to compare the same request across runs: every one of a run
            # without fault, the stalled ones otherwise
            "e2e_by_key": {a.key: round((a.ended - a.sent) * self.time_scale, 4)
                           for a in self.completed() if a.ended is not None
                           and (self.mode == "nofault" or a.key in stalled)},
            "detections": [{k: round(v, 4) for k, v in d.items()} for d in self.detections()],
        }

    def failures(self, limit: int = 5) -> list[str]:
        stalled = self.stalled_keys()
        notes: dict[str, list[StallNote]] = {}
        for s in self.stalls:
            notes.setdefault(s.key, []).append(s)
        out = []
        for a in self.answers:
            problems = a.problems()
            if problems and (self.mode == "resume" or a.key not in stalled):
                where = [f"{s.server} after token {s.last_index}" for s in notes.get(a.key, [])]
                out.append(f"{a.key} N={a.tokens} max_tokens={a.max_tokens} "
                           f"stalls={where}: {'; '.join(problems)}")
        return out[:limit]


def quantile(values: list[float], q: float) -> float:
    if not values:
        return math.nan
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def loop_lag(samples: list[float], every: float = 0.01) -> None:
    while True:
        before = time.monotonic()
        await asyncio.sleep(every)
        samples.append(time.monotonic() - before - every)


def learned(balancer: Any, fleet: Fleet) -> int:
    """Backends whose silence bound is learned from their own streams (not the prior)."""
    silences = balancer.proxy.silences
    return sum(1 for s in fleet
               if len(silences.of(s.spec.name).gaps) >= silences.settings.min_streams)


def resume_counts(balancer: Any) -> dict[str, int]:
    out: dict[str, int] = {}
    for metric in balancer.metrics.resumes.collect():
        for sample in metric.samples:
            if sample.name.endswith("_total"):
                label = sample.labels["outcome"] + (f"/{sample.labels['reason']}"
                                                    if sample.labels["reason"] else "")
                out[label] = int(sample.value)
    return out


FAULT_AT: dict[tuple[str, float, int], float] = {}  # (api, load, seed): the first run's


async def one_run(api: str, load: float, seed: int, mode: str, silence: str,
                  args: argparse.Namespace) -> Run:
    """One run: the fleet and the balancer here, the client in a child process (its own
    core: its reading does not delay the balancer's, nor the balancer's its clock)."""
    scale = args.time_scale
    settings = (SilenceSettings() if silence == "default"
                else SilenceSettings(floor_s=2.0 / scale))
    config = BalancerConfig(silence=settings, max_resumes=0 if mode == "off" else 2)
    rng = random.Random(seed)
    capacity = args.servers * CAPACITY_PER_SERVER * args.speed
    span = args.max_warmup + args.window
    arrivals = arrivals_at_load(trace(), offset=rng.randrange(len(trace())), load=load,
                                capacity=capacity, until=span, span=span).arrivals
    schedule = []
    for i, a in enumerate(arrivals):
        tokens = max(1, a.output_tokens)
        schedule.append((f"s{seed}-{i}", a.at, tokens,
                         tokens if i % 4 == 0 else max(tokens, SERVICE_CAP),
                         max(1, a.prompt_tokens)))
    # the fault starts after --warmup model seconds and --warmup-requests requests, once
    # every backend's bound is learned; the first run of a seed finds that instant and the
    # others (other modes, the default-settings cell) start theirs at the same one
    cached = FAULT_AT.get((api, load, seed))
    earliest = max(args.warmup, arrivals[min(args.warmup_requests, len(arrivals) - 1)].at)
    specs = [ServerSpec(f"gpu{i}", models=(MODEL,), speed=args.speed)
             for i in range(args.servers)]
    run = Run(api, load, seed, mode, silence, scale)
    spawn = multiprocessing.get_context("spawn")
    to_client, client_in = spawn.Pipe(duplex=False)
    client_out, from_client = spawn.Pipe(duplex=False)
    child = spawn.Process(target=client_process, args=(to_client, from_client), daemon=True)
    child.start()
    notes = Notes(stuck=client_in.send if mode == "off" else None)
    lags: list[float] = []
    ticker = asyncio.create_task(loop_lag(lags))
    cpu0, wall0 = time.process_time(), time.monotonic()
    async with Fleet(specs, time_scale=scale, seed=1000 * seed) as fleet:
        for server in fleet:
            server.set_fault(NotedFault(server=server.spec.name, notes=notes))
        backends = [BackendSpec(s.spec.name, s.url, (MODEL,)) for s in fleet]
        balancer = build_balancer("bench", backends, config)
        notes.bound_of = lambda name: balancer.proxy.silences.of(name).seconds()
        async with balancer:
            started = time.monotonic() + 1.0  # the child is ready by then
            client_in.send({"url": balancer.url, "api": api, "started": started,
                            "scale": scale, "drain_s": args.drain / scale,
                            "schedule": schedule})
            stalled_before, resumes_before = 0, {}
            for a in arrivals:
                if a.at < (cached if cached is not None else earliest):
                    continue
                delay = started + a.at / scale - 0.005 - time.monotonic()
                if delay > 0:
                    await asyncio.sleep(delay)
                run.learned_at_fault = learned(balancer, fleet)
                if cached is None and run.learned_at_fault < len(fleet) \
                        and a.at < args.max_warmup:
                    continue
                run.fault_at = FAULT_AT.setdefault((api, load, seed), a.at)
                run.bounds_at_fault_s = {s.spec.name: notes.bound_of(s.spec.name)
                                         for s in fleet}
                lags.clear()
                if mode != "nofault":
                    for server in fleet:
                        server.set_fault(NotedFault(FaultMode.STALL, rate=args.rate,
                                                    server=server.spec.name, notes=notes))
                notes.stalls.clear()
                notes.continuations.clear()
                stalled_before = sum(s.context.stalled for s in fleet)
                resumes_before = resume_counts(balancer)
                client_in.send({"window": (a.at, a.at + args.window)})
                break
            loop = asyncio.get_running_loop()
            result = await loop.run_in_executor(None, client_out.recv)
            ticker.cancel()  # the window and the drain: not the teardown
            run.answers = [Answer(**fields) for fields in result["answers"]]
            run.client_lag_p99_ms = result["lag_p99_ms"]
            run.requests = len(run.answers)
            run.unfinished = result["unfinished"]
            keys = {a.key for a in run.answers}
            run.stalls = [s for s in notes.stalls if s.key in keys]
            run.continuations = [c for c in notes.continuations if c[0] in keys]
            run.stalled_streams = sum(s.context.stalled for s in fleet) - stalled_before
            after = resume_counts(balancer)
            run.resumes = {k: v - resumes_before.get(k, 0) for k, v in after.items()
                           if v - resumes_before.get(k, 0)}
    child.join(5)
    run.wall_s = time.monotonic() - wall0
    run.cpu_share = (time.process_time() - cpu0) / run.wall_s
    run.loop_lag_p99_ms = quantile(lags, 0.99) * 1000
    run.loop_lag_max_ms = max(lags, default=0.0) * 1000
    return run


def client_process(inbox: Any, outbox: Any) -> None:
    """The child: send the schedule's requests, read their answers, send them back."""
    outbox.send(asyncio.run(client_run(inbox)))


async def client_run(inbox: Any) -> dict[str, Any]:
    setup = inbox.recv()
    loop = asyncio.get_running_loop()
    messages: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
    loop.add_reader(inbox.fileno(), lambda: messages.put_nowait(inbox.recv()))
    window: tuple[float, float] | None = None
    stuck: set[str] = set()

    def read_messages() -> None:
        nonlocal window
        while not messages.empty():
            message = messages.get_nowait()
            window = message.get("window", window)
            if "stuck" in message:
                stuck.add(message["stuck"])

    lags: list[float] = []
    ticker = asyncio.create_task(loop_lag(lags))
    started, scale, api = setup["started"], setup["scale"], setup["api"]
    sent: list[tuple[Answer, float, asyncio.Task[None]]] = []
    connector = aiohttp.TCPConnector(limit=0)
    timeout = aiohttp.ClientTimeout(total=None, sock_read=None)
    async with aiohttp.ClientSession(base_url=setup["url"], connector=connector,
                                     timeout=timeout) as client:
        for key, at, tokens, max_tokens, prompt_tokens in setup["schedule"]:
            read_messages()
            if window is not None and at >= window[1]:
                break
            delay = started + at / scale - time.monotonic()
            if delay > 0:
                await asyncio.sleep(delay)
            answer = Answer(key, tokens, max_tokens, prompt_tokens, time.monotonic())
            sent.append((answer, at, asyncio.create_task(ask(client, api, answer))))
        while window is None:  # the schedule ran out before the window was set
            await asyncio.sleep(0.05)
            read_messages()
        lags.clear()
        measured = [(answer, task) for answer, at, task in sent if window[0] <= at < window[1]]
        # wait for the measured requests, but not for those only the balancer's read
        # timeout (300 s) would end: the stalled ones of a run that does not resume
        deadline = time.monotonic() + setup["drain_s"]
        while time.monotonic() < deadline:
            read_messages()
            if all(t.done() or answer.key in stuck for answer, t in measured):
                break
            await asyncio.sleep(0.1)
        unfinished = 0
        for answer, task in measured:
            if not task.done():
                unfinished += 1
                answer.error = answer.error or "still open when the run ended"
        for _, _, task in sent:
            task.cancel()
        await asyncio.gather(*(task for _, _, task in sent), return_exceptions=True)
    ticker.cancel()
    loop.remove_reader(inbox.fileno())
    return {"answers": [vars(answer) for answer, _ in measured], "unfinished": unfinished,
            "lag_p99_ms": quantile(lags, 0.99) * 1000}


_TRACE: list[Any] = []


def trace() -> list[Any]:
    """The Azure conversation trace (loaded once)."""
    if not _TRACE:
        _TRACE.extend(load_named("azure-conv"))
    return _TRACE


# -- the report --------------------------------------------------------------------------


def wilson(k: int, n: int, z: float = 1.96) -> tuple[float, float]:
    if n == 0:
        return math.nan, math.nan
    p = k / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return max(0.0, centre - half), min(1.0, centre + half)


def ratio_interval(a: list[float], b: list[float], q: float, rng: random.Random,
                   rounds: int = 400) -> tuple[float, float]:
    """Bootstrap 95% interval of quantile(a) / quantile(b), resampling each side."""
    ratios = sorted(quantile(rng.choices(a, k=len(a)), q) / quantile(rng.choices(b, k=len(b)), q)
                    for _ in range(rounds))
    return ratios[int(0.025 * rounds)], ratios[int(0.975 * rounds) - 1]


def cell_name(r: dict[str, Any]) -> str:
    extra = ", default silence settings" if r["silence"] == "default" else ""
    return f"{r['api']}, load {r['load']:g}{extra}"


def pool(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Several runs' figures as one (samples concatenated)."""
    out: dict[str, Any] = {k: sum(r[k] for r in runs) for k in (
        "requests", "completed", "stalled_streams", "stalled_requests", "stalled_completed",
        "unstalled_failed", "unexplained_resumes", "unfinished")}
    resumes: dict[str, int] = {}
    for r in runs:
        for k, v in r["resumes"].items():
            resumes[k] = resumes.get(k, 0) + v
    out["resumes"] = resumes
    for k in ("ttft_s", "e2e_s", "detections"):
        out[k] = [x for r in runs for x in r[k]]
    out["loop_lag_p99_ms"] = max(r["loop_lag_p99_ms"] for r in runs)
    out["bounds"] = [b for r in runs for b in r["bounds_at_fault_s"].values()]
    return out


def fmt_pair(values: list[float], scale: float = 1.0, digits: int = 2) -> str:
    if not values:
        return "-"
    return f"{quantile(values, 0.95) * scale:.{digits}f} / {max(values) * scale:.{digits}f}"


def detection_cols(r: dict[str, Any], scale: float) -> list[str]:
    det = r["detections"]
    detect = [d["detect_over_s"] for d in det if not math.isnan(d["detect_over_s"])]
    return [fmt_pair([d["over_s"] for d in det], scale), fmt_pair([d["ratio"] for d in det]),
            fmt_pair(detect, scale)]


def latency_cols(r: dict[str, Any], ref: dict[str, Any] | None, rng: random.Random) -> list[str]:
    """TTFT and E2E p50 / p99, each followed by its ratios to the reference's."""
    out = []
    for key in ("ttft_s", "e2e_s"):
        mine = r[key]
        out.append(f"{quantile(mine, 0.5):.2f} / {quantile(mine, 0.99):.2f}")
        if ref is None or ref is r or not mine or not ref[key]:
            out.append("-")
            continue
        lo, hi = ratio_interval(mine, ref[key], 0.99, rng)
        p50 = quantile(mine, 0.5) / quantile(ref[key], 0.5)
        out.append(f"{p50:.2f} / {quantile(mine, 0.99) / quantile(ref[key], 0.99):.2f} "
                   f"[{lo:.2f}-{hi:.2f}]")
    return out


def added_e2e(runs: list[dict[str, Any]], refs: dict[int, dict[str, Any]]) -> list[float]:
    """For each stalled request that completed, its E2E minus the same request's in the
    run without fault (model seconds)."""
    out = []
    for r in runs:
        ref = refs.get(r["seed"], {}).get("e2e_by_key", {})
        for key, e2e in r.get("e2e_by_key", {}).items():
            if key in ref and r["mode"] != "nofault":
                out.append(e2e - ref[key])
    return out


def added_col(values: list[float]) -> str:
    if not values:
        return "-"
    return f"{statistics.median(values):.2f} / {max(values):.2f}"


def stalled_col(r: dict[str, Any]) -> str:
    k, n = r["stalled_completed"], r["stalled_requests"]
    if not n:
        return "-"
    lo, hi = wilson(k, n)
    return f"{k}/{n} = {k / n:.1%} [{lo:.1%}-{hi:.1%}]"


def resumes_col(r: dict[str, Any]) -> str:
    return ", ".join(f"{k} {v}" for k, v in sorted(r["resumes"].items())) or "0"


def cell_table(runs: list[dict[str, Any]], references: dict[int, dict[str, Any]],
               rng: random.Random) -> list[str]:
    """One cell: a row per run, and a pooled row per mode."""
    scale = runs[0]["time_scale"]
    lines = [
        "| mode | seed | requests (completed) | stalled streams | stalled requests completed "
        "[Wilson 95%] | resumes | unexplained resumes | gap - bound p95 / max (s) | "
        "gap / bound p95 / max | detect - bound p95 / max (s) | bound median (s) | "
        "TTFT p50 / p99 (s) | x nofault p50 / p99 [p99 95%] | E2E p50 / p99 (s) | "
        "x nofault p50 / p99 [p99 95%] | stalled requests' E2E - nofault's, median / max "
        "(s) | loop lag p99 (ms) |",
        "|" + "---|" * 17]
    by_mode: dict[str, list[dict[str, Any]]] = {}
    for r in runs:
        by_mode.setdefault(r["mode"], []).append(r)
    ref_pool = pool(list(references.values())) if references else None
    for mode in MODES:
        mine = by_mode.get(mode, [])
        rows = [(str(r["seed"]), r, references.get(r["seed"])) for r in mine]
        if len(mine) > 1:
            rows.append(("all", pool(mine), ref_pool))
        for seed, r, ref in rows:
            bounds = r["bounds"] if "bounds" in r else list(r["bounds_at_fault_s"].values())
            lines.append(" | ".join([
                f"| {mode}", seed, f"{r['requests']} ({r['completed']})",
                str(r["stalled_streams"]), stalled_col(r), resumes_col(r),
                str(r["unexplained_resumes"]), *detection_cols(r, scale),
                f"{statistics.median(bounds) * scale:.2f}" if bounds else "-",
                *latency_cols(r, ref if mode != "nofault" else None, rng),
                added_col(added_e2e([r] if seed != "all" else mine, references)),
                f"{r['loop_lag_p99_ms']:.0f} |"]))
    return lines


def report(runs: list[dict[str, Any]]) -> str:
    """The markdown tables: the headline (a row per cell), then each cell's."""
    rng = random.Random(0)
    cells: dict[str, list[dict[str, Any]]] = {}
    for r in runs:
        cells.setdefault(cell_name(r), []).append(r)
    scaled_refs: dict[tuple[str, float], dict[int, dict[str, Any]]] = {}
    for r in runs:
        if r["mode"] == "nofault" and r["silence"] == "scaled":
            scaled_refs.setdefault((r["api"], r["load"]), {})[r["seed"]] = r
    head = ["| cell | stalled requests completed, resume on [Wilson 95%] | resume off | "
            "stalled streams | resumes | unexplained resumes | gap - bound p95 / max (s) | "
            "gap / bound p95 / max | detect - bound p95 / max (s) | TTFT x nofault p50 / p99 "
            "[p99 95%] | E2E x nofault p50 / p99 [p99 95%] | stalled requests' E2E - "
            "nofault's, median / max (s) | unstalled requests failed |",
            "|" + "---|" * 13]
    ranked: list[tuple[float, float, str]] = []
    rows: dict[str, str] = {}
    body: list[str] = []
    for name, mine in cells.items():
        refs = {r["seed"]: r for r in mine if r["mode"] == "nofault"} or \
            scaled_refs.get((mine[0]["api"], mine[0]["load"]), {})
        body += [f"### {name}", ""]
        if not any(r["mode"] == "nofault" for r in mine) and refs:
            body += ["(nofault: the scaled-settings cell's runs of the same seeds.)", ""]
        body += [*cell_table(mine, refs, rng), ""]
        resumed = [r for r in mine if r["mode"] == "resume"]
        if not resumed:
            continue
        on, off = pool(resumed), [r for r in mine if r["mode"] == "off"]
        ref = pool(list(refs.values())) if refs else None
        scale = mine[0]["time_scale"]
        share = on["stalled_completed"] / on["stalled_requests"] if on["stalled_requests"] \
            else math.nan
        if mine[0]["silence"] == "scaled":
            ratio = max((d["ratio"] for d in on["detections"]), default=0.0)
            ranked.append((share, -ratio, name))
        off_col = stalled_col(pool(off)) if off else "-"
        rows[name] = " | ".join([
            f"| {name}", stalled_col(on), off_col, str(on["stalled_streams"]), resumes_col(on),
            str(on["unexplained_resumes"]), *detection_cols(on, scale),
            *latency_cols(on, ref, rng)[1::2], added_col(added_e2e(resumed, refs)),
            f"{on['unstalled_failed']} |"])
    head += rows.values()
    if len(ranked) > 1:
        ranked.sort()
        worst, best = ranked[0][2], ranked[-1][2]
        head += ["", "Worst and best cell of the matrix (scaled settings), by the share of "
                 "stalled requests completed, then the largest gap / bound:", "",
                 head[0].replace("| cell |", "| | cell |"), "|---" + head[1],
                 f"| worst {rows[worst]}", f"| best {rows[best]}"]
    return "\n".join(["## Headline", "", *head, "", "## Per cell", "", *body])


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--first-seed", type=int, default=0)
    parser.add_argument("--servers", type=int, default=8)
    parser.add_argument("--speed", type=float, default=0.5)
    parser.add_argument("--time-scale", type=float, default=3.0)
    parser.add_argument("--loads", default="0.3,0.7")
    parser.add_argument("--apis", default="chat,completions")
    parser.add_argument("--modes", default=",".join(MODES))
    parser.add_argument("--rate", type=float, default=0.05)
    parser.add_argument("--warmup", type=float, default=20.0,
                        help="model seconds at least before the fault")
    parser.add_argument("--warmup-requests", type=int, default=200,
                        help="requests at least before the fault")
    parser.add_argument("--max-warmup", type=float, default=90.0,
                        help="model seconds at most before the fault, even if some "
                             "backend's bound is not learned yet")
    parser.add_argument("--window", type=float, default=45.0, help="model seconds")
    parser.add_argument("--drain", type=float, default=60.0,
                        help="model seconds after the last arrival before open streams "
                             "are counted as not completed")
    parser.add_argument("--default-cell", default=None, metavar="API:LOAD",
                        help="also run this cell with SilenceSettings() (resume only; its "
                             "reference is the scaled cell's nofault run, else its own)")
    parser.add_argument("--json", type=Path, default=None, help="write every run here")
    parser.add_argument("--markdown", type=Path, default=None, help="write the tables here")
    parser.add_argument("--from-json", type=Path, default=None,
                        help="print the tables of runs written by --json, and run nothing")
    args = parser.parse_args()
    if args.from_json is not None:
        print(report(json.loads(args.from_json.read_text())))
        return
    loads = [float(x) for x in args.loads.split(",")]
    apis = args.apis.split(",")
    modes = args.modes.split(",")
    plan = [(api, load, seed, mode, "scaled") for load in loads for api in apis
            for seed in range(args.first_seed, args.first_seed + args.seeds) for mode in modes]
    if args.default_cell:
        api, _, load_text = args.default_cell.partition(":")
        load = float(load_text)
        own = ("resume",) if api in apis and load in loads and "nofault" in modes \
            else ("nofault", "resume")
        plan += [(api, load, seed, mode, "default")
                 for seed in range(args.first_seed, args.first_seed + args.seeds)
                 for mode in own]
    runs: list[dict[str, Any]] = []
    for api, load, seed, mode, silence in plan:
        run = (await one_run(api, load, seed, mode, silence, args)).to_json()
        runs.append(run)
        print(json.dumps({k: v for k, v in run.items()
                          if k not in ("ttft_s", "e2e_s", "detections", "failures",
                                       "e2e_by_key")}), flush=True)
        for line in run["failures"]:
            print("  FAILED", line, flush=True)
        if args.json is not None:
            args.json.write_text(json.dumps(runs))
    text = report(runs)
    print(text)
    if args.markdown is not None:
        args.markdown.write_text(text + "\n")


if __name__ == "__main__":
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(main())
