# SPDX-License-Identifier: Apache-2.0
"""Run simulated GPU servers: one ``SimServer`` per spec, many of them in one process.

::

    specs = [
        ServerSpec("h100-a", "127.0.1.11", 8000, ("llama-3-8b",), speed=1.0),
        ServerSpec("a100-a", "127.0.1.12", 8000, ("llama-3-8b",), speed=0.6),
    ]
    async with Fleet(specs, time_scale=10) as fleet:
        fleet["h100-a"].url            # "http://127.0.1.11:8000"
        fleet["a100-a"].set_fault(Fault(FaultMode.SLOW, factor=4))
        await fleet["a100-a"].stop()   # now refuses connections; start() brings it back

Port 0 picks a free port; ``SimServer.url`` reports the bound one.
"""

from __future__ import annotations

import asyncio
import dataclasses
import random
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from types import TracebackType

from aiohttp import web
from opentelemetry.trace import Tracer

from regions.simulator.clock import Clock, ScaledClock
from regions.simulator.config import EngineConfig
from regions.simulator.engine import Engine
from regions.simulator.errors import SimConfigError
from regions.simulator.faults import Fault
from regions.simulator.kv_publish import KvPublish
from regions.simulator.metrics import metric_names
from regions.simulator.server import SimContext, build_app
from regions.simulator.sleep_mode import SleepMode
from state.ports import parse_hostport

SHUTDOWN_TIMEOUT_S = 1.0


@dataclass(frozen=True)
class ServerSpec:
    """One simulated server: where it listens, what it serves, how fast it is.

    ``engine`` holds the remaining batching parameters; its ``speed`` is replaced by this
    spec's ``speed``. ``engine_name`` is the serving engine whose metric names ``/metrics``
    uses (vllm, sglang, tgi or triton), and whose info endpoints it serves.
    """

    name: str
    host: str = "127.0.0.1"
    port: int = 0
    models: tuple[str, ...] = ("sim-model",)
    speed: float = 1.0
    engine: EngineConfig = field(default_factory=EngineConfig)
    engine_name: str = "vllm"
    max_concurrent_requests: int | None = None  # TGI's router limit (None: TGI's 128)
    kv_events: str | None = None  # ZeroMQ address to publish KV events on (vLLM's endpoint)
    kv_events_replay: str | None = None  # and to serve their replay on
    # what /v1/models says a model was loaded from ("root"), by model; default its name
    roots: tuple[tuple[str, str], ...] = ()
    # LoRA adapters loaded at start, (name, path), as vLLM's --lora-modules (needs
    # engine.max_loras > 0); more come and go through /v1/load_lora_adapter
    lora_modules: tuple[tuple[str, str], ...] = ()
    # vLLM's sleep mode (``sleep_mode``): model seconds a wake from a level 1 sleep takes,
    # a cold start takes (from the start, or from a level 2 sleep), and whether it starts
    # asleep (a standby server)
    wake_s: float = 5.0
    cold_start_s: float = 0.0
    asleep: bool = False

    def __post_init__(self) -> None:
        try:
            metric_names(self.engine_name)
        except SimConfigError as exc:
            raise SimConfigError(f"server {self.name}: {exc}") from None
        if not self.models:
            raise SimConfigError(f"server {self.name}: models: at least one model is required")
        if self.wake_s < 0 or self.cold_start_s < 0:
            raise SimConfigError(f"server {self.name}: wake_s and cold_start_s must be >= 0")
        if not 0 <= self.port <= 65535:
            raise SimConfigError(f"server {self.name}: port: {self.port} is out of range")
        if self.lora_modules and not self.engine.max_loras:
            raise SimConfigError(f"server {self.name}: lora_modules need engine.max_loras > 0")

    @property
    def engine_config(self) -> EngineConfig:
        try:
            return dataclasses.replace(self.engine, speed=self.speed)
        except SimConfigError as exc:
            raise SimConfigError(f"server {self.name}: {exc}") from None


def parse_listen(text: str) -> tuple[str, int]:
    """``"127.0.1.11:8000"`` -> ``("127.0.1.11", 8000)``; raise ``SimConfigError``."""
    try:
        return parse_hostport(text)
    except ValueError as exc:
        raise SimConfigError(f"listen: {exc}") from None


class SimServer:
    """One simulated GPU server on its own aiohttp site."""

    def __init__(
        self,
        spec: ServerSpec,
        *,
        time_scale: float = 1.0,
        seed: int = 0,
        clock: Clock | None = None,
        tracer: Tracer | None = None,
    ) -> None:
        self.spec = spec
        self.kv_publish = (KvPublish(spec.kv_events, spec.kv_events_replay)
                           if spec.kv_events else None)
        self.engine = Engine(spec.engine_config, clock or ScaledClock(time_scale),
                             kv_event_sink=self.kv_publish)
        self.context = SimContext(spec.name, spec.models, self.engine, random.Random(seed),
                                  engine_name=spec.engine_name,
                                  max_concurrent_requests=spec.max_concurrent_requests,
                                  roots=dict(spec.roots), adapters=dict(spec.lora_modules),
                                  tracer=tracer,
                                  sleep=SleepMode(self.engine.clock, spec.wake_s,
                                                  spec.cold_start_s, asleep=spec.asleep))
        self.app = build_app(self.context)
        self._runner: web.AppRunner | None = None
        self._port = spec.port

    @property
    def host(self) -> str:
        return self.spec.host

    @property
    def port(self) -> int:
        """The bound port once started (the spec's port, or the one picked for port 0)."""
        return self._port

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"

    @property
    def running(self) -> bool:
        return self._runner is not None

    async def start(self) -> None:
        """Start the engine and listen; after ``stop()`` this reuses the same port."""
        if self._runner is not None:
            return
        if self.kv_publish is not None:
            self.kv_publish.open()
        await self.engine.start()
        if self.context.sleep is not None:
            self.context.sleep.start()
        runner = web.AppRunner(
            self.app,
            handler_cancellation=True,
            shutdown_timeout=SHUTDOWN_TIMEOUT_S,
            access_log=None,
        )
        await runner.setup()
        site = web.TCPSite(runner, self.host, self._port, reuse_address=True)
        await site.start()
        self._port = runner.addresses[0][1]
        self._runner = runner

    async def stop(self) -> None:
        """Close the listener and cut in-flight requests; connections are refused after."""
        if self._runner is None:
            return
        runner, self._runner = self._runner, None
        self.engine.abort_all()
        await runner.cleanup()
        await self.engine.stop()
        if self.kv_publish is not None:
            self.kv_publish.close()

    def set_fault(self, fault: Fault) -> None:
        """Same as ``POST /_sim/fault``."""
        self.context.set_fault(fault)


class Fleet:
    """Many simulated servers in one process, started and stopped together."""

    def __init__(self, specs: Iterable[ServerSpec], *, time_scale: float = 1.0, seed: int = 0,
                 tracer: Tracer | None = None):
        self.servers: dict[str, SimServer] = {}
        for i, spec in enumerate(specs):
            if spec.name in self.servers:
                raise SimConfigError(f"fleet: duplicate server name {spec.name!r}")
            self.servers[spec.name] = SimServer(spec, time_scale=time_scale, seed=seed + i,
                                                tracer=tracer)

    def __getitem__(self, name: str) -> SimServer:
        return self.servers[name]

    def __iter__(self) -> Iterator[SimServer]:
        return iter(self.servers.values())

    def __len__(self) -> int:
        return len(self.servers)

    @property
    def urls(self) -> dict[str, str]:
        return {name: s.url for name, s in self.servers.items()}

    async def start(self) -> None:
        """Start every server; if one fails to bind, stop the ones already started."""
        try:
            for server in self:
                await server.start()
        except BaseException:
            await self.stop()
            raise

    async def stop(self) -> None:
        await asyncio.gather(*(s.stop() for s in self))

    async def __aenter__(self) -> Fleet:
        await self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.stop()
