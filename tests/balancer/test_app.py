# SPDX-License-Identifier: Apache-2.0
"""Building and serving a balancer from the policy model's GPU servers."""

from __future__ import annotations

import asyncio
import random

import aiohttp
from hypothesis import given, settings
from hypothesis import strategies as st

from policies.model import GpuServer
from regions.balancer import (
    BackendSpec,
    BalancerConfig,
    backends_from_region,
    build_balancer,
    serve,
)
from regions.balancer.scheduling.admission import AdmissionConfig, Dispatcher
from regions.balancer.scheduling.backends import BackendPool
from regions.balancer.scheduling.registry import Registry, build_profile, register_builtin_plugins
from regions.simulator import Fleet, ServerSpec
from tests.balancer.helpers import MODEL, completion, req, stream_completion


class _Region:
    def __init__(self, gpus: tuple[GpuServer, ...]) -> None:
        self.gpus = gpus


async def test_serve_accepts_policy_gpu_servers() -> None:
    async with Fleet([ServerSpec("h100", models=(MODEL,))]) as fleet:
        gpu = GpuServer("h100", fleet["h100"].url + "/", (MODEL,), "H100", None, "vllm")
        assert backends_from_region(_Region((gpu,))) == [
            BackendSpec("h100", fleet["h100"].url, (MODEL,), None, "vllm")
        ]
        started: asyncio.Future[str] = asyncio.get_running_loop().create_future()
        task = asyncio.create_task(
            serve("eu-west", [gpu], BalancerConfig(listen=("127.0.0.1", 0), jurisdiction="EU"),
                  ready=lambda b: started.set_result(b.url))
        )
        url = await started
        async with aiohttp.ClientSession(base_url=url) as client:
            status, backend, _ = await stream_completion(client, completion(2))
        assert (status, backend) == (200, "h100")
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


def test_build_balancer_exposes_the_app_before_start() -> None:
    balancer = build_balancer("r", [BackendSpec("a", "http://127.0.0.1:1", (MODEL,))])
    routes = {r.resource.canonical for r in balancer.app.router.routes() if r.resource}
    assert {"/v1/completions", "/v1/chat/completions", "/v1/embeddings", "/v1/models"} <= routes
    assert balancer.runner is None


OPS = st.lists(
    st.tuples(st.sampled_from(["acquire", "release", "cancel"]), st.integers(0, 1000)),
    max_size=60,
)


@settings(max_examples=60)
@given(ops=OPS, caps=st.lists(st.integers(1, 3), min_size=1, max_size=3))
def test_accounting_returns_to_zero_under_any_interleaving(ops, caps) -> None:
    """Acquire, release and cancel (queued or just bound) in any order: nothing leaks."""

    async def run() -> None:
        specs = [
            BackendSpec(f"b{i}", "http://127.0.0.1:1", (MODEL,), c) for i, c in enumerate(caps)
        ]
        profile = build_profile(register_builtin_plugins(Registry()), rng=random.Random(0))
        d = Dispatcher(BackendPool(specs), profile, AdmissionConfig(max_queue=4))
        tasks: list[asyncio.Task] = []
        for op, n in ops:
            if op == "acquire":
                tasks.append(asyncio.create_task(d.acquire(req(cost_tokens=float(n)), 5.0)))
            elif tasks:
                task = tasks.pop(n % len(tasks))
                if op == "cancel":
                    task.cancel()
                await asyncio.sleep(0)
                if task.done() and not task.cancelled() and task.exception() is None:
                    task.result().release()
                elif not task.done():
                    tasks.append(task)
            await asyncio.sleep(0)
        for task in tasks:
            task.cancel()
        results = await asyncio.gather(*tasks, return_exceptions=True)
        for r in results:
            if not isinstance(r, BaseException):
                r.release()
        assert d.pool.in_flight() == 0 and d.queued == 0
        assert all(b.work_tokens == 0.0 for b in d.pool)

    asyncio.run(run())
