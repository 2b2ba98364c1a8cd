# SPDX-License-Identifier: Apache-2.0
"""End to end over real HTTP: client -> balancer -> simulated GPU servers (127.0.0.1:0)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import re
import time

import aiohttp
import pytest
from aiohttp import web

from regions.balancer import (
    AdmissionConfig,
    BackendSpec,
    BalancerConfig,
    OutlierConfig,
    build_balancer,
)
from regions.simulator import Fault, FaultMode, Fleet, ServerSpec
from tests.balancer.helpers import MODEL, admin_client, completion, stack, stream_completion
from tests.run_clock import RunClock, eventually


def sim_running(fleet) -> int:
    return sum(s.engine.state().running + s.engine.state().waiting for s in fleet)


async def test_streams_chunk_by_chunk_with_region_and_backend_headers() -> None:
    async with stack(time_scale=5.0) as (_, balancer, client):
        async with client.post("/v1/completions", json=completion(20)) as resp:
            assert resp.status == 200
            assert resp.headers["x-director-region"] == "test-region"
            assert resp.headers["x-director-backend"] in {"gpu0", "gpu1"}
            assert resp.headers["Content-Type"].startswith("text/event-stream")
            arrivals = []
            async for chunk in resp.content.iter_any():
                arrivals.append((time.monotonic(), chunk))
        body = b"".join(c for _, c in arrivals)
        assert body.endswith(b"data: [DONE]\n\n")
        assert body.count(b"data: {") == 20
        # unbuffered: chunks arrive spread over the ~50 ms of decoding, not all at once
        assert len(arrivals) >= 10
        assert arrivals[-1][0] - arrivals[0][0] > 0.02
        assert balancer.pool.in_flight() == 0


async def test_a_streams_prompt_counts_as_waiting_to_prefill_until_its_first_byte() -> None:
    async with stack(speeds=(1.0,), time_scale=5.0) as (fleet, balancer, client):
        gpu = balancer.pool["gpu0"]
        fleet["gpu0"].set_fault(Fault(FaultMode.HANG))
        hung = asyncio.create_task(client.post("/v1/completions", json=completion(50)))
        await eventually(lambda: gpu.in_flight == 1)
        assert gpu.prefill_tokens > 0  # sent, no first byte yet
        async with admin_client(balancer) as adm, adm.get("/_admin/state") as resp:
            (state,) = (await resp.json())["backends"]
            assert state["prefill_tokens"] == pytest.approx(gpu.prefill_tokens, abs=1e-3)
        async with admin_client(balancer) as adm, adm.get("/metrics") as resp:
            line = f'director_balancer_prefill_tokens{{backend="gpu0"}} {gpu.prefill_tokens}'
            assert line in await resp.text()
        hung.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            (await hung).close()
        await eventually(lambda: gpu.in_flight == 0)
        assert gpu.prefill_tokens == 0.0
        fleet["gpu0"].set_fault(Fault())
        async with client.post("/v1/completions", json=completion(200)) as resp:
            await resp.content.readany()  # the first token is through
            assert gpu.in_flight == 1 and gpu.prefill_tokens == 0.0
        await eventually(lambda: gpu.in_flight == 0)


async def test_non_streaming_chat_embeddings_and_models() -> None:
    async with stack() as (_, balancer, client):
        async with client.post("/v1/completions", json=completion(5, stream=False)) as resp:
            assert resp.status == 200
            assert (await resp.json())["usage"]["completion_tokens"] == 5
        chat = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 3}
        async with client.post("/v1/chat/completions", json=chat) as resp:
            assert (await resp.json())["object"] == "chat.completion"
        async with client.post("/v1/embeddings", json={"model": MODEL, "input": "abc"}) as resp:
            assert (await resp.json())["data"][0]["object"] == "embedding"
        async with client.get("/v1/models") as resp:
            assert [m["id"] for m in (await resp.json())["data"]] == [MODEL]
        async with client.get("/healthz") as resp:
            assert resp.status == 200 and (await resp.json())["usable_backends"] == 2
        async with admin_client(balancer) as adm, adm.get("/metrics") as resp:
            assert "director_balancer_decisions_total" in await resp.text()


async def test_bad_requests_are_answered_by_the_balancer() -> None:
    config = BalancerConfig(max_body_bytes=1024)
    async with stack(config=config) as (_, balancer, client):
        big = completion(prompt="x" * 4096)
        async with client.post("/v1/completions", json=big) as resp:
            assert resp.status == 413
        async with client.post("/v1/completions", data=b"{nope") as resp:
            assert resp.status == 400
        async with client.post("/v1/completions", json=completion(model="absent")) as resp:
            assert resp.status == 404
        assert sum(b.requests for b in balancer.pool) == 0


async def test_no_leaked_in_flight_after_200_aborted_streams() -> None:
    config = BalancerConfig(admission=AdmissionConfig(queue_timeout_s=10.0))
    async with stack(cap=4, config=config) as (fleet, balancer, client):

        async def abort_after_first_chunk() -> None:
            resp = await client.post("/v1/completions", json=completion(500))
            await resp.content.readany()
            resp.close()

        async def abort_early() -> None:  # often while still queued in the balancer
            task = asyncio.create_task(client.post("/v1/completions", json=completion(500)))
            await asyncio.sleep(0.002)
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                (await task).close()

        for batch in range(10):
            await asyncio.gather(
                *(
                    abort_after_first_chunk() if (batch + i) % 2 else abort_early()
                    for i in range(20)
                )
            )
        await eventually(lambda: balancer.pool.in_flight() == 0 and balancer.dispatcher.queued == 0)
        assert all(b.work_tokens == 0.0 for b in balancer.pool)
        assert all(b.prefill_tokens == 0.0 for b in balancer.pool)
        await eventually(lambda: sim_running(fleet) == 0)  # upstream requests were cut
        status, _, body = await stream_completion(client, completion(3))
        assert status == 200 and body.endswith(b"[DONE]\n\n")


async def test_retries_on_another_backend_before_the_first_byte() -> None:
    async with stack() as (fleet, balancer, client):
        fleet["gpu0"].set_fault(Fault(FaultMode.ERROR5XX, status=503))
        results = [await stream_completion(client, completion(2)) for _ in range(6)]
        assert all(status == 200 and backend == "gpu1" for status, backend, _ in results)
        await fleet["gpu1"].stop()  # connection refused: retried on gpu0, which answers 503
        fleet["gpu0"].set_fault(Fault())
        results = [await stream_completion(client, completion(2)) for _ in range(4)]
        assert all(status == 200 and backend == "gpu0" for status, backend, _ in results)
        assert balancer.pool.in_flight() == 0


@pytest.mark.parametrize("status", [500, 502, 503])
async def test_a_5xx_before_the_first_byte_is_retried_and_a_4xx_is_not(status: int) -> None:
    async with stack() as (fleet, balancer, client):
        fleet["gpu0"].set_fault(Fault(FaultMode.ERROR5XX, status=status))
        results = [await stream_completion(client, completion(2)) for _ in range(6)]
        assert all(s == 200 and backend == "gpu1" for s, backend, _ in results)
        assert balancer.pool["gpu0"].errors >= 1  # counted against it all the same
    async with stack() as (fleet, _balancer, client):
        status_4xx, _, _ = await stream_completion(client, {**completion(2), "n": 3})
        assert status_4xx == 400  # the request's own fault: the same everywhere


async def test_last_backend_error_is_passed_through_when_all_fail() -> None:
    async with stack(speeds=(1.0,)) as (fleet, _balancer, client):
        fleet["gpu0"].set_fault(Fault(FaultMode.ERROR5XX, status=503))
        status, backend, body = await stream_completion(client, completion(2))
        assert (status, backend) == (503, "gpu0")
        assert json.loads(body)["error"]["code"] == 503


async def test_ejection_then_return_with_slow_start() -> None:
    outliers = OutlierConfig(consecutive_errors=3, base_ejection_s=0.3, slow_start_s=0.4)
    config = BalancerConfig(outliers=outliers)
    async with stack(config=config) as (fleet, balancer, client):
        fleet["gpu0"].set_fault(Fault(FaultMode.ERROR5XX, status=500))
        for _ in range(12):
            await stream_completion(client, completion(1))
        state = {b["name"]: b for b in balancer.state()["backends"]}
        assert state["gpu0"]["ejected"]
        assert balancer.pool["gpu0"].errors == 3  # no request was sent to it after ejection
        fleet["gpu0"].set_fault(Fault())
        await asyncio.sleep(0.32)
        view = balancer.pool.snapshot().backends[0]
        assert not view.ejected and view.cap < 16  # ramping up
        await eventually(lambda: balancer.pool.snapshot().backends[0].cap == 16)
        backends = {(await stream_completion(client, completion(1)))[1] for _ in range(20)}
        assert "gpu0" in backends


async def test_drain_lets_streams_finish_and_sends_new_work_elsewhere() -> None:
    async with stack(time_scale=5.0) as (_, balancer, client):
        resp = await client.post("/v1/completions", json=completion(60))
        drained = resp.headers["x-director-backend"]
        await resp.content.readany()
        async with admin_client(balancer) as adm, \
                adm.post("/_admin/drain", json={"backend": drained}) as answer:
            assert answer.status == 200 and (await answer.json())["in_flight"] == 1
        results = [await stream_completion(client, completion(2)) for _ in range(5)]
        assert {backend for _, backend, _ in results} == {"gpu0", "gpu1"} - {drained}
        rest = await resp.read()  # the in-flight stream on the drained backend finishes
        assert rest.endswith(b"data: [DONE]\n\n")
        await balancer.wait_drained(drained, timeout=2)
        async with admin_client(balancer) as adm:
            async with adm.post("/_admin/undrain", json={"backend": drained}) as answer:
                assert answer.status == 200
            async with adm.post("/_admin/drain", json={"backend": "nope"}) as answer:
                assert answer.status == 404


async def test_full_queue_is_shed_with_retry_after() -> None:
    config = BalancerConfig(admission=AdmissionConfig(max_queue=2, queue_timeout_s=5.0))
    async with stack(cap=1, config=config) as (fleet, balancer, client):
        for server in fleet:
            server.set_fault(Fault(FaultMode.HANG))
        held = [await client.post("/v1/completions", json=completion(10)) for _ in range(2)]
        queued = [
            asyncio.create_task(client.post("/v1/completions", json=completion(10)))
            for _ in range(2)
        ]
        await eventually(lambda: balancer.dispatcher.queued == 2)
        async with client.post("/v1/completions", json=completion(10)) as resp:
            assert resp.status == 429
            assert int(resp.headers["Retry-After"]) >= 1
        headers = {"x-director-deadline-ms": "50", "x-director-priority": "5"}
        async with client.post("/v1/completions", json=completion(10), headers=headers) as resp:
            assert resp.status == 429  # evicted a queued one, then its own deadline passed
        for server in fleet:
            server.set_fault(Fault())
        for resp in held:
            assert (await resp.read()).endswith(b"[DONE]\n\n")
        statuses = []
        for task in queued:
            resp = await task
            statuses.append(resp.status)
            await resp.read()
        assert sorted(statuses) == [200, 429]
        await eventually(lambda: balancer.pool.in_flight() == 0)


async def test_the_queue_header_says_how_long_a_request_waited_for_a_slot() -> None:
    async with stack(cap=1, time_scale=5.0) as (fleet, balancer, client):
        for server in fleet:
            server.set_fault(Fault(FaultMode.HANG))
        held = [await client.post("/v1/completions", json=completion(5)) for _ in range(2)]
        for resp in held:
            assert 0 <= int(resp.headers["x-director-queue-ms"]) < 200
        waiting = asyncio.create_task(client.post("/v1/completions", json=completion(5)))
        await eventually(lambda: balancer.dispatcher.queued == 1)
        await asyncio.sleep(0.3)
        for server in fleet:
            server.set_fault(Fault())
        for resp in held:
            await resp.read()
        resp = await waiting
        await resp.read()
        assert resp.status == 200
        assert int(resp.headers["x-director-queue-ms"]) >= 300


async def test_late_binding_never_exceeds_a_pinned_capacity() -> None:
    async with stack(speeds=(1.0, 0.4), cap=2, time_scale=5.0) as (fleet, _, client):
        peak = 0

        async def watch() -> None:
            nonlocal peak
            while True:
                peak = max(
                    peak, *(s.engine.state().running + s.engine.state().waiting for s in fleet)
                )
                await asyncio.sleep(0.001)

        watcher = asyncio.create_task(watch())
        results = await asyncio.gather(
            *(stream_completion(client, completion(20)) for _ in range(24))
        )
        watcher.cancel()
        assert all(status == 200 for status, _, _ in results)
        assert peak <= 2  # a pinned capacity gets no headroom
        counts = {name: sum(1 for _, b, _ in results if b == name) for name in ("gpu0", "gpu1")}
        assert counts["gpu0"] > 1.3 * counts["gpu1"]  # the fast GPU frees slots sooner


async def test_speeds_are_learned_from_streamed_tokens() -> None:
    """The servers and the balancer keep time on a ``RunClock``: a stretch in which this
    process was off the CPU is no server's slowness (on the wall clock it stretched
    whichever streams it fell in, the fast server's as much as the slow one's)."""
    # a profile that reads speeds (the default, least-requests, ties idle backends)
    config = BalancerConfig(scorers=(("outstanding-work", 2.0), ("least-requests", 1.0)))
    async with RunClock() as clock, stack(speeds=(0.4, 1.0), time_scale=2.0, config=config,
                                          clock=clock) as (_, balancer, client):
        for _ in range(3):
            await asyncio.gather(*(stream_completion(client, completion(30)) for _ in range(8)))
        slow, fast = balancer.pool["gpu0"], balancer.pool["gpu1"]
        assert slow.rate.samples > 0 and fast.rate.samples > 0
        assert fast.rate.value > 1.5 * slow.rate.value  # speed ratio 2.5, less batching effects
        explained = balancer.explain("/v1/completions", completion(30))
        assert explained["chosen"] == "gpu1"
        async with admin_client(balancer) as adm, adm.post(
            "/_admin/explain", json={"path": "/v1/completions", "body": completion(30)}
        ) as resp:
            assert (await resp.json())["steps"][-1]["plugin"] == "max-score"



async def test_clients_that_close_after_done_are_counted_never_logged_as_errors(caplog) -> None:
    """An SSE client closes as soon as it reads ``[DONE]``, before a server that ends its
    body a little later has done so: counted in ``client_gone_total``, never logged as an
    error. (The race where the balancer's own end-of-body write finds the client gone is
    pinned down in ``test_relay.py``.)"""
    async def lingering(request: web.Request) -> web.StreamResponse:
        await request.read()
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        await resp.write(b'data: {"choices": [{"text": "hi"}]}\n\n')
        await resp.write(b"data: [DONE]\n\n")
        await asyncio.sleep(0.3)  # the body ends after the client has gone
        with contextlib.suppress(ConnectionResetError):  # the balancer may close first
            await resp.write_eof()
        return resp

    app = web.Application()
    app.router.add_post("/v1/completions", lingering)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    host, port = runner.addresses[0][:2]
    caplog.set_level(logging.INFO)
    balancer = build_balancer("test-region", [BackendSpec("gpu0", f"http://{host}:{port}",
                                                          (MODEL,), 16)])
    try:
        async with balancer:
            front_host, front_port = balancer.url.removeprefix("http://").split(":")
            body = json.dumps(completion(8)).encode()
            for _ in range(3):
                reader, writer = await asyncio.open_connection(front_host, int(front_port))
                writer.write(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\n"
                             b"Content-Type: application/json\r\n"
                             b"Content-Length: %d\r\n\r\n%s" % (len(body), body))
                await writer.drain()
                await reader.readuntil(b"data: [DONE]\n\n")
                writer.close()
            await eventually(lambda: balancer.pool.in_flight() == 0)
            async with admin_client(balancer) as adm, adm.get("/metrics") as resp:
                text = await resp.text()
    finally:
        await runner.cleanup()
    gone = {when: float(value) for when, value in re.findall(
        r'director_balancer_client_gone_total\{when="(\w+)"\} (\S+)', text)}
    assert sum(gone.values()) == 3.0, gone
    assert [r for r in caplog.records if r.levelno >= logging.WARNING] == []


@pytest.mark.parametrize("reply", [b"garbage that is not HTTP\r\n\r\n",
                                   b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
                                   b"HTTP/1.1 200 OK\r\nContent-Le"])  # then it hangs up
async def test_a_backend_answering_garbage_is_retried_elsewhere_and_serving_goes_on(
        reply: bytes) -> None:
    """A GPU server whose answer is not HTTP (or breaks off) costs that request a retry on
    another backend before the first byte, or a clean 502 when it was already relayed; the
    balancer keeps serving."""

    answered = []

    async def broken(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        answered.append(reply)
        with contextlib.suppress(ConnectionError, asyncio.IncompleteReadError):
            await reader.readuntil(b"\r\n\r\n")
            writer.write(reply)
            await writer.drain()
        writer.close()

    server = await asyncio.start_server(broken, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    specs = [ServerSpec("gpu0", models=(MODEL,))]
    try:
        async with Fleet(specs, time_scale=20.0) as fleet:
            backends = [BackendSpec("bad", f"http://127.0.0.1:{port}", (MODEL,), 16),
                        BackendSpec("gpu0", fleet["gpu0"].url, (MODEL,), 16)]
            balancer = build_balancer("test-region", backends)
            async with balancer, aiohttp.ClientSession(base_url=balancer.url) as client:
                outcomes = []
                for _ in range(8):
                    try:
                        status, backend, _body = await stream_completion(client, completion(2))
                    except aiohttp.ClientPayloadError:
                        status, backend = 0, "cut"  # relayed, then the server broke off
                    outcomes.append((status, backend))
                assert all(o in {(200, "gpu0"), (502, "bad"), (0, "cut")} for o in outcomes), \
                    outcomes
                assert (200, "gpu0") in outcomes
                assert answered, "the broken server was never tried"
                assert balancer.pool.in_flight() == 0
                status, _, _ = await stream_completion(client, completion(2))
                assert status == 200
    finally:
        server.close()
