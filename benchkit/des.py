# SPDX-License-Identifier: Apache-2.0
"""Routing in virtual time: a trace slice through our balancer's objects, or through a
model of HAProxy's ``leastconn``, to the real simulator ``Engine`` of each GPU, on one
asyncio loop whose clock jumps to the next timer whenever nothing is ready.

Ours is the real ``Balancer`` (pool, pipeline, region queue, learned speeds, answer lengths
and capacities), fed as ``regions.balancer.http.proxy`` feeds it and scraped once a model second
as ``engine_scrape`` scrapes (the engines' running and waiting counts; vLLM publishes no
slot count, so capacities are learned from those). The peer is ``leastconn`` as the live
bench configures HAProxy: no queue in the proxy, the fewest active requests, ties in turn.

Left out, so the figures compare policies with each other (``bench/routing_live.py`` measures
real proxies over HTTP): network and proxy time, CPU jitter.
"""

from __future__ import annotations

import asyncio
import itertools
import selectors
from collections.abc import Callable
from dataclasses import dataclass

from benchkit.matrix import Server
from benchkit.routing_client import body
from benchkit.routing_trace import Arrival
from regions.balancer import BackendSpec, BalancerConfig
from regions.balancer.app import Balancer
from regions.balancer.errors import ShedError
from regions.balancer.http.request_info import parse_request
from regions.balancer.scheduling.backend import ScrapedLoad
from regions.balancer.scheduling.speed import decode_step
from regions.balancer.types import Endpoint
from regions.simulator.engine import Engine
from regions.simulator.errors import SequenceAborted

MODEL = "sim-model"
SCRAPE_EVERY_S = 1.0
BINDING_EVERY_S = 0.1  # engine_scrape.EngineScraper's binding_every_s


class _JumpingSelector(selectors.DefaultSelector):
    """Never blocks: a wait of ``timeout`` seconds moves the loop's clock instead."""

    def __init__(self) -> None:
        super().__init__()
        self.now = 0.0

    def select(self, timeout: float | None = None) -> list:
        if timeout is not None and timeout > 0:
            self.now += timeout
        return super().select(0)


class VirtualTimeLoop(asyncio.SelectorEventLoop):
    """An event loop on virtual time: sleeping costs nothing, order is kept."""

    def __init__(self) -> None:
        self._jumping = _JumpingSelector()
        super().__init__(self._jumping)

    def time(self) -> float:
        return self._jumping.now


class LoopClock:
    """The engine's ``Clock`` over the running loop's (virtual) time."""

    time_scale = 1.0

    def now(self) -> float:
        return asyncio.get_running_loop().time()

    async def sleep_until(self, deadline: float) -> None:
        await asyncio.sleep(max(0.0, deadline - self.now()))


@dataclass(frozen=True)
class Result:
    at: float  # arrival, model seconds
    status: int  # 200, or 429 when shed
    ttft: float | None
    e2e: float | None
    output_tokens: int
    backend: str


# (TTFT from the send, decode rate, tokens, the gaps' decode step (``decode_step``) or None)
Done = Callable[[float, float, int, float | None], None]


class LeastConn:
    """HAProxy ``leastconn`` without a per-server cap: fewest active, ties in turn (the turn
    starting at ``first_turn``: ``leastconn-shifted`` starts at 1, the same policy with
    other tie-breaks, whose ratios to ``leastconn`` show the benchmark's noise)."""

    def __init__(self, servers: list[Server], first_turn: int = 0) -> None:
        self.active = {s.name: 0 for s in servers}
        self.turn = itertools.count(first_turn)

    async def start(self) -> None:
        pass

    async def stop(self) -> None:
        pass

    async def send(self, a: Arrival, max_tokens: int | None) -> tuple[str, Callable[[], None],
                                                                       Callable[[], None], Done]:
        fewest = min(self.active.values())
        tied = [n for n, c in self.active.items() if c == fewest]
        name = tied[next(self.turn) % len(tied)]
        self.active[name] += 1

        def release() -> None:
            self.active[name] -= 1

        return name, release, _nothing, _learn_nothing


def _nothing() -> None:
    pass


def _learn_nothing(ttft: float, rate: float, tokens: int, step: float | None) -> None:
    pass


class Ours:
    """Our balancer's objects, fed as the proxy feeds them, scraped as ``engine_scrape``
    scrapes (``scrape``: False to leave capacities unknown; ``told``: the servers' true
    speeds given to the pool's ``FleetSpeed`` rather than learned)."""

    def __init__(self, servers: list[Server], engines: dict[str, Engine],
                 config: BalancerConfig, scrape: bool = True, told: bool = False) -> None:
        loop = asyncio.get_running_loop()
        specs = [BackendSpec(s.name, f"http://127.0.0.1:1/{s.name}", (MODEL,),
                             config.max_concurrency) for s in servers]
        self.balancer = Balancer("des", specs, config, clock=loop.time)
        self.pool = self.balancer.pool
        if told:  # the told-speeds arm: the true speeds, only the fleet's shape learned
            self.pool.speeds.tell({s.name: s.speed for s in servers})
        self.engines = engines
        self.scrape = scrape
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        if self.scrape:
            self._task = asyncio.create_task(self._scraping())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)

    async def _scraping(self) -> None:
        """Every backend each ``SCRAPE_EVERY_S``; in between, as ``EngineScraper`` does, each
        ``BINDING_EVERY_S`` the backends exploring a provisional limit."""
        loop = asyncio.get_running_loop()
        round_at = -1e18
        while True:
            now = loop.time()
            full = now - round_at >= SCRAPE_EVERY_S
            if full:
                round_at = now
            for b in self.pool:
                if full or b.capacity.explores(b.in_flight):
                    state = self.engines[b.name].state()
                    self.pool.set_scraped(b.name, ScrapedLoad(
                        float(state.waiting), float(state.running), state.kv_usage))
            await asyncio.sleep(max(0.0, min(BINDING_EVERY_S,
                                             round_at + SCRAPE_EVERY_S - loop.time())))

    async def send(self, a: Arrival, max_tokens: int | None) -> tuple[str, Callable[[], None],
                                                                       Callable[[], None], Done]:
        proxy = self.balancer.proxy
        info = parse_request(Endpoint.COMPLETIONS, body(a, max_tokens), {},
                             prefill_ratio=self.balancer.config.prefill_ratio,
                             lengths=proxy.output_lengths, with_prefix=False)
        lease = await self.balancer.dispatcher.acquire(info)
        backend = lease.backend

        def learn(ttft: float, rate: float, tokens: int, step: float | None) -> None:
            self.pool.record_ttft(backend, ttft, lease.occupancy)
            self.pool.record_success(backend)
            if rate > 0:
                self.pool.record_stream(lease, rate, step)
            proxy.output_lengths.observe(info.model, info.prompt_tokens, info.max_tokens, tokens)

        return backend.name, lease.release, lease.started, learn


async def _one(router: Ours | LeastConn, engines: dict[str, Engine], a: Arrival,
               max_tokens: int | None, out: list[Result]) -> None:
    loop = asyncio.get_running_loop()
    await asyncio.sleep(max(0.0, a.at - loop.time()))
    start = loop.time()
    try:
        name, release, started, learn = await router.send(a, max_tokens)
    except ShedError:
        out.append(Result(a.at, 429, None, None, 0, ""))
        return
    sent = loop.time()
    engine = engines[name]
    seq = engine.submit(a.prompt_tokens, max(1, a.output_tokens))
    try:
        await engine.first_token(seq)
        started()
        await engine.wait(seq)
    except (SequenceAborted, asyncio.CancelledError):
        out.append(Result(a.at, 0, None, None, seq.generated, name))
        engine.abort(seq)
        return
    finally:
        release()
    first, last = seq.first_token_at, seq.finished_at
    assert first is not None and last is not None
    rate = (seq.generated - 1) / (last - first) if seq.generated > 3 and last > first else 0.0
    # what the proxy's StreamMeter measures from the chunks' times
    learn(first - sent, rate, seq.generated, decode_step(seq.gaps))
    out.append(Result(a.at, 200, first - start, last - start, seq.generated, name))


async def replay(setup: str, servers: list[Server], arrivals: list[Arrival],
                 max_tokens: int | None, counted_until: float,
                 config: BalancerConfig | None = None, cut_after: float = 600.0,
                 scrape: bool = True, told: bool = False,
                 inspect: Callable[[Ours], None] | None = None) -> list[Result]:
    """Every arrival through ``setup`` (``ours``, ``leastconn`` or ``leastconn-shifted``);
    returns once the counted ones (arriving before ``counted_until``) have ended, or
    ``cut_after`` model seconds after the last of them arrived (those still running are
    errors, status 0). ``inspect`` is called with ours (what it learned) before it stops."""
    engines = {s.name: Engine(s.engine, LoopClock()) for s in servers}
    for engine in engines.values():
        await engine.start()
    router: Ours | LeastConn
    if setup == "leastconn":
        router = LeastConn(servers)
    elif setup == "leastconn-shifted":
        router = LeastConn(servers, first_turn=1)
    else:
        router = Ours(servers, engines, config or BalancerConfig(), scrape, told)
    await router.start()
    out: list[Result] = []
    tasks = [asyncio.create_task(_one(router, engines, a, max_tokens, out)) for a in arrivals]
    counted = [t for t, a in zip(tasks, arrivals, strict=True) if a.at < counted_until]
    last = max((a.at for a in arrivals if a.at < counted_until), default=0.0)
    loop = asyncio.get_running_loop()
    await asyncio.wait(counted, timeout=max(0.0, last + cut_after - loop.time()))
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    if inspect is not None and isinstance(router, Ours):
        inspect(router)
    await router.stop()
    for engine in engines.values():
        await engine.stop()
    return out


def run(setup: str, servers: list[Server], arrivals: list[Arrival], max_tokens: int | None,
        counted_until: float, config: BalancerConfig | None = None,
        scrape: bool = True, told: bool = False) -> list[Result]:
    """``replay`` on a fresh virtual-time loop."""
    loop = VirtualTimeLoop()
    try:
        return loop.run_until_complete(
            replay(setup, servers, arrivals, max_tokens, counted_until, config, scrape=scrape,
                   told=told))
    finally:
        loop.close()
