# SPDX-License-Identifier: Apache-2.0
"""Warm standby and scale from zero: GPU servers asleep (vLLM's sleep mode) until their
region's demand needs them.

A server declared ``standby`` (policy ``gpu { standby [wake <duration>] }``) is drained
under the ``standby`` reason while asleep: nothing is routed to it, and the demand signal
(``scheduling.demand``) does not count it as serving. It is woken (``POST /wake_up``, then
``GET /is_sleeping`` until false, and ``/health``):

- **for a request** of its model that no serving server takes (none serves, or every one
  is drained, down or ejected): the request is held (the ``standby`` stage) while the
  server wakes, up to its queue deadline; when the wake predicted for it (the server's
  declared ``wake``, else the mean of the region's measured wakes, else ``prior_wake_s``)
  is longer than the deadline, it is shed at once (429 with a ``Retry-After`` of the
  wake) so that overflow (``signals.overflow``) sends it to a sibling region the client
  may use, instead of letting it wait for nothing;
- **ahead of demand**: every ``tick_s``, when a model's desired replicas exceed the
  servers serving it plus those waking, one more of its standby servers is woken.

An awake standby server with nothing in flight for ``idle_s`` while the model's desired
replicas are below its servers is put back to sleep: drained first (its streams end
whole), then ``POST /sleep?level=1&mode=wait``. A wake that fails leaves the server
asleep and the requests held for it are shed.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

import aiohttp
from aiohttp import web

from regions.balancer.http.exchange import Exchange, Next
from regions.balancer.http.refusals import error_response
from regions.balancer.scheduling.admission import Dispatcher
from regions.balancer.scheduling.backend import Backend
from regions.balancer.scheduling.backends import BackendPool
from regions.balancer.scheduling.region_demand import region_demand

STANDBY = "standby"  # the drain reason of a sleeping standby server
SERVING_POLL_S = 0.05
log = logging.getLogger(__name__)


@dataclass(frozen=True)
class StandbySettings:
    prior_wake_s: float = 10.0  # a wake's prediction before any was measured or declared
    idle_s: float = 300.0  # an awake standby server idle this long may sleep again
    tick_s: float = 1.0
    wake_timeout_s: float = 600.0  # a wake that takes longer has failed
    poll_s: float = 0.2  # /is_sleeping while a wake is under way


@dataclass
class _Wake:
    backend: str
    started: float
    predicted_s: float
    done: asyncio.Event = field(default_factory=asyncio.Event)
    ok: bool = False


class Standby:
    """The region's standby servers: asleep, waking, or serving."""

    def __init__(self, pool: BackendPool, dispatcher: Dispatcher,
                 sessions: Mapping[str, aiohttp.ClientSession],
                 settings: StandbySettings | None = None,
                 on_wake: Callable[[str, float, bool], None] | None = None) -> None:
        self.pool = pool
        self.dispatcher = dispatcher
        self.sessions = sessions
        self.settings = settings or StandbySettings()
        self.on_wake = on_wake  # (backend, seconds, ok), for the metrics
        self.wakes: dict[str, _Wake] = {}  # under way, by backend
        self.measured: list[float] = []  # seconds of the region's finished wakes
        self._idle_since: dict[str, float] = {}
        self._servers = [b for b in pool.backends if b.spec.standby]
        self._membership = pool.membership  # the pool's, when the servers were read
        self._task: asyncio.Task[None] | None = None
        self._wake_tasks: set[asyncio.Task[None]] = set()

    @property
    def servers(self) -> list[Backend]:
        """The pool's standby servers (a policy change may add or remove some)."""
        if self.pool.membership != self._membership:
            self._servers = [b for b in self.pool.backends if b.spec.standby]
            self._membership = self.pool.membership
        return self._servers

    def asleep(self, backend: Backend) -> bool:
        return STANDBY in backend.drains

    def declare(self) -> None:
        """Every standby server starts asleep (put to sleep at ``start`` if it is not)."""
        for backend in self.servers:
            self.pool.set_draining(backend.name, True, STANDBY)

    async def start(self) -> None:
        self.declare()
        for backend in self.servers:  # asleep until needed, whatever it was doing
            await self._sleep(backend)
        if self.servers:
            self._task = asyncio.create_task(self._run())

    async def stop(self) -> None:
        tasks = [t for t in (self._task, *self._wake_tasks) if t is not None]
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._task = None

    # -- waking ----------------------------------------------------------------------------

    def serving(self, model: str) -> bool:
        """Whether a server of ``model`` serves now (not drained, down or ejected)."""
        return any(v.usable and model in v.models for v in self.pool.snapshot().backends)

    def predicted_s(self, backend: Backend) -> float:
        if backend.spec.wake_s is not None:
            return backend.spec.wake_s
        if self.measured:
            recent = self.measured[-20:]
            return sum(recent) / len(recent)
        return self.settings.prior_wake_s

    def wake_for(self, model: str) -> _Wake | None:
        """A wake under way or begun now of a standby server of ``model`` (None: it has
        none asleep)."""
        for wake in self.wakes.values():
            if model in self.pool[wake.backend].models:
                return wake
        return self.wake_for_more(model)

    def _begin(self, backend: Backend) -> _Wake:
        wake = _Wake(backend.name, self.pool.clock(), self.predicted_s(backend))
        self.wakes[backend.name] = wake
        backend.waking = True
        task = asyncio.create_task(self._wake(backend, wake))
        self._wake_tasks.add(task)
        task.add_done_callback(self._wake_tasks.discard)
        return wake

    async def _wake(self, backend: Backend, wake: _Wake) -> None:
        s = self.settings
        url, session = backend.spec.url, self.sessions.get(backend.name)
        try:
            if session is None:
                raise RuntimeError("no connection pool for it")
            async with asyncio.timeout(s.wake_timeout_s):
                async with session.post(f"{url}/wake_up") as resp:
                    if resp.status != 200:
                        raise RuntimeError(f"/wake_up answered {resp.status}")
                while await self._is_sleeping(session, url):
                    await asyncio.sleep(s.poll_s)
                while not await self._healthy(session, url):
                    await asyncio.sleep(s.poll_s)
            wake.ok = True
        except (TimeoutError, aiohttp.ClientError, RuntimeError, ValueError) as exc:
            log.warning("standby server %s did not wake: %s", backend.name, exc)
        finally:
            took = self.pool.clock() - wake.started
            backend.waking = False
            del self.wakes[backend.name]
            if wake.ok:
                self.measured.append(took)
                self._idle_since.pop(backend.name, None)
                self.pool.set_draining(backend.name, False, STANDBY)
            if self.on_wake is not None:
                self.on_wake(backend.name, took, wake.ok)
            wake.done.set()

    async def _is_sleeping(self, session: aiohttp.ClientSession, url: str) -> bool:
        async with session.get(f"{url}/is_sleeping") as resp:
            if resp.status == 404:  # an engine without the endpoint: /wake_up was enough
                return False
            body = await resp.json(content_type=None)
        return bool(body.get("is_sleeping")) if isinstance(body, dict) else False

    async def _healthy(self, session: aiohttp.ClientSession, url: str) -> bool:
        async with session.get(f"{url}/health") as resp:
            return resp.status == 200

    async def _sleep(self, backend: Backend) -> None:
        session = self.sessions.get(backend.name)
        if session is None:
            return
        try:
            async with asyncio.timeout(30), session.post(
                    f"{backend.spec.url}/sleep", params={"level": "1", "mode": "wait"}) as resp:
                if resp.status != 200:
                    log.warning("standby server %s refused to sleep (%s)", backend.name,
                                resp.status)
        except (TimeoutError, aiohttp.ClientError) as exc:
            log.warning("standby server %s could not be put to sleep: %s", backend.name, exc)

    # -- the tick: ahead of demand, and back to sleep ----------------------------------------

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(self.settings.tick_s)
            try:
                await self.tick()
            except Exception:  # a tick's failure must not end the loop
                log.exception("standby tick failed")

    async def tick(self) -> None:
        now = self.pool.clock()
        for reading in region_demand(self.dispatcher):
            model = reading.model
            if reading.desired > reading.servers + reading.loading:
                self.wake_for_more(model)
            elif reading.desired < reading.servers:
                await self._sleep_one_idle(model, now)

    def wake_for_more(self, model: str) -> _Wake | None:
        """A wake begun now of the standby server of ``model`` predicted to wake soonest
        that is asleep and not already waking (None: it has none)."""
        asleep = [b for b in self.servers if model in b.models and self.asleep(b)
                  and b.name not in self.wakes]
        return self._begin(min(asleep, key=self.predicted_s)) if asleep else None

    async def _sleep_one_idle(self, model: str, now: float) -> None:
        for backend in self.servers:
            if model not in backend.models or self.asleep(backend) or backend.waking:
                continue
            if backend.in_flight:
                self._idle_since.pop(backend.name, None)
                continue
            since = self._idle_since.setdefault(backend.name, now)
            if now - since >= self.settings.idle_s:
                self.pool.set_draining(backend.name, True, STANDBY)
                await self._sleep(backend)
                self._idle_since.pop(backend.name, None)
                return


class HoldForStandby:
    """Stage ``standby``: a request whose model no server serves now waits while a standby
    server of it wakes, or is shed at once for a sibling when the wake would outlast its
    deadline (see the module's docstring)."""

    def __init__(self, standby: Standby, shed: Callable[[str], None]) -> None:
        self.standby = standby
        self.shed = shed  # counts a shed by reason

    async def __call__(self, exchange: Exchange, call_next: Next) -> web.StreamResponse:
        info = exchange.info
        if info is None or not self.standby.servers or self.standby.serving(info.model):
            return await call_next(exchange)
        wake = self.standby.wake_for(info.model)
        if wake is None:
            return await call_next(exchange)
        started = self.standby.pool.clock()
        left = wake.predicted_s - (started - wake.started)
        deadline = exchange.queue_timeout_s
        if left > deadline:
            return self._shed(exchange, left)
        try:
            async with asyncio.timeout(deadline):
                await wake.done.wait()
        except TimeoutError:
            return self._shed(exchange, left)
        if not wake.ok:
            return self._shed(exchange, self.standby.settings.prior_wake_s)
        # awake: until the region counts it serving (its health may lag a probe behind)
        while not self.standby.serving(info.model) and \
                self.standby.pool.clock() - started < deadline:
            await asyncio.sleep(SERVING_POLL_S)
        return await call_next(exchange)

    def _shed(self, exchange: Exchange, wake_s: float) -> web.Response:
        exchange.shed = True
        self.shed("waking")
        after = max(1, round(wake_s))
        return error_response(
            429, f"no server of this model is awake here; one wakes in about {after} s",
            "rate_limit_exceeded", headers={"Retry-After": str(after)})
