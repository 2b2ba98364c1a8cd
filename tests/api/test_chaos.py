"""Chaos: GPU faults forwarded to a real simulated server and reverted at ttl; process
drills passed to the supervisor's control socket (a small stand-in speaking the contract)."""

from __future__ import annotations

import contextlib
import fnmatch
from collections.abc import AsyncIterator
from pathlib import Path

from aiohttp import web
from api_helpers import eventually, example_document, running_api, with_gpu_url

from regions.simulator import Fleet, ServerSpec

POLICY_URL = "http://127.0.2.12:8000"  # euw1-a100-a in the example policy


async def health(api, url: str) -> int:
    async with api.http.get(f"{url}/health") as resp:
        return resp.status


async def test_gpu_fault_is_forwarded_and_reverted_after_ttl(tmp_path, valkey, prefix):
    spec = ServerSpec("euw1-a100-a", "127.0.0.1", 0, ("llama-3.1-8b-instruct",))
    async with Fleet([spec], time_scale=50) as fleet:
        gpu_url = fleet["euw1-a100-a"].url
        document = with_gpu_url(example_document(), POLICY_URL, gpu_url)
        async with running_api(tmp_path, valkey.url, prefix, document=document,
                               enable_chaos=True) as api:
            assert await health(api, gpu_url) == 200
            status, body = await api.post("/api/v1/chaos/gpus/eu-west/euw1-a100-a/fault",
                                          json_body={"mode": "fail", "ttl": 0.6})
            assert status == 200, body
            assert body["url"] == gpu_url and body["fault"]["mode"] == "fail"
            assert body["revert_at"] is not None
            assert await health(api, gpu_url) == 503
            # the server has the ttl too: it reverts by itself should this API die first
            assert fleet["euw1-a100-a"].context.fault.ttl == 0.6

            async def reverted() -> bool:
                return await health(api, gpu_url) == 200

            await eventually(reverted, timeout=5)
            line = api.audit_lines()[-1]
            assert (line["action"], line["target"], line["outcome"]) == (
                "chaos.gpu_fault", "gpu eu-west/euw1-a100-a", "ok")
            assert line["detail"] == {"mode": "fail", "ttl": 0.6}

            # The simulator's own validation comes back as it is.
            status, body = await api.post("/api/v1/chaos/gpus/eu-west/euw1-a100-a/fault",
                                          json_body={"mode": "melt"})
            assert status == 400 and "fault.mode: unknown mode 'melt'" in body["error"]
            status, body = await api.post("/api/v1/chaos/gpus/eu-west/euw1-a100-a/fault",
                                          json_body={"mode": "slow", "ttl": 601})
            assert status == 422 and "at most 600" in body["error"]

            # A fault still set when the API stops is reverted (dead-man).
            status, _ = await api.post("/api/v1/chaos/gpus/eu-west/euw1-a100-a/fault",
                                       json_body={"mode": "fail", "ttl": 300})
            assert status == 200 and await health(api, gpu_url) == 503
        assert fleet["euw1-a100-a"].context.fault.mode.value == "none"


async def test_gpu_fault_to_an_unreachable_server_is_502(tmp_path, valkey, prefix):
    spec = ServerSpec("euw1-a100-a", "127.0.0.1", 0, ("llama-3.1-8b-instruct",))
    async with Fleet([spec], time_scale=50) as fleet:
        gpu_url = fleet["euw1-a100-a"].url
        await fleet["euw1-a100-a"].stop()
        document = with_gpu_url(example_document(), POLICY_URL, gpu_url)
        async with running_api(tmp_path, valkey.url, prefix, document=document,
                               enable_chaos=True) as api:
            status, body = await api.post("/api/v1/chaos/gpus/eu-west/euw1-a100-a/fault",
                                          json_body={"mode": "fail"})
            assert status == 502 and f"GPU server {gpu_url} unreachable" in body["error"]
            status, body = await api.post("/api/v1/chaos/gpus/eu-west/nope/fault",
                                          json_body={"mode": "fail"})
            assert status == 404
            assert api.audit_lines()[-2]["outcome"].startswith("error: GPU server")


async def test_process_routes_are_503_without_control(tmp_path, valkey, prefix):
    async with running_api(tmp_path, valkey.url, prefix, enable_chaos=True) as api:
        status, body = await api.get("/api/v1/processes")
        assert status == 503 and "--control" in body["error"]
        status, body = await api.post("/api/v1/chaos/processes",
                                      json_body={"action": "kill", "names": ["dns"]})
        assert status == 503
        status, body = await api.get("/api/v1/processes", token="read")
        assert status == 403


async def test_chaos_routes_are_not_mounted_without_enable_chaos(tmp_path, valkey, prefix):
    """Without --enable-chaos nothing can break the system on purpose: the chaos routes do
    not exist (404, even with an admin token), and nothing is audited; reads stay."""
    sock = tmp_path / "control.sock"
    async with supervisor(sock) as received, \
            running_api(tmp_path, valkey.url, prefix, control_socket=sock) as api:
        status, body = await api.post("/api/v1/chaos/processes", json_body={
            "action": "kill", "names": ["balancer/*"], "ttl": 30})
        assert status == 404, body
        assert "--enable-chaos" in body["error"]
        status, body = await api.post("/api/v1/chaos/gpus/eu-west/euw1-a100-a/fault",
                                      json_body={"mode": "fail"})
        assert status == 404, body
        assert received == [] and api.audit_lines() == []
        status, body = await api.get("/api/v1/processes")
        assert status == 200 and body["processes"]


@contextlib.asynccontextmanager
async def supervisor(path: Path) -> AsyncIterator[list[dict]]:
    """A stand-in for ``director up``'s control socket: /processes and /actions as the
    contract says; yields the list of actions it received."""
    processes = [
        {"name": "dns", "role": "dns", "region": None, "gpu": None, "pid": 101,
         "state": "running", "restarts": 0, "address": "127.0.0.1:5353", "held_until": None},
        {"name": "balancer/eu-west", "role": "balancer", "region": "eu-west", "gpu": None,
         "pid": 102, "state": "running", "restarts": 0, "address": "127.0.2.1:8080",
         "held_until": None},
    ]
    received: list[dict] = []

    async def list_processes(_request: web.Request) -> web.Response:
        return web.json_response({"processes": processes})

    async def actions(request: web.Request) -> web.Response:
        body = await request.json()
        received.append(body)
        if body.get("action") not in ("kill", "freeze", "restore"):
            return web.json_response({"error": f"unknown action {body.get('action')!r}"},
                                     status=400)
        names = [p["name"] for p in processes
                 if any(fnmatch.fnmatch(p["name"], pat) for pat in body.get("names", []))]
        if not names:
            return web.json_response({"error": "names match no process"}, status=400)
        return web.json_response({"affected": names})

    app = web.Application()
    app.router.add_get("/processes", list_processes)
    app.router.add_post("/actions", actions)
    runner = web.AppRunner(app)
    await runner.setup()
    await web.UnixSite(runner, str(path)).start()
    try:
        yield received
    finally:
        await runner.cleanup()


async def test_process_drills_go_through_the_control_socket(tmp_path, valkey, prefix):
    sock = tmp_path / "control.sock"
    async with supervisor(sock) as received, \
            running_api(tmp_path, valkey.url, prefix, control_socket=sock,
                        enable_chaos=True) as api:
        status, body = await api.get("/api/v1/processes")
        assert status == 200
        assert [p["name"] for p in body["processes"]] == ["dns", "balancer/eu-west"]

        drill = {"action": "kill", "names": ["balancer/*"], "ttl": 30}
        status, body = await api.post("/api/v1/chaos/processes", json_body=drill)
        assert (status, body) == (200, {"affected": ["balancer/eu-west"]})
        assert received == [drill]
        line = api.audit_lines()[-1]
        assert (line["action"], line["target"], line["detail"], line["outcome"]) == (
            "chaos.kill", "balancer/*", drill, "ok")

        status, body = await api.post("/api/v1/chaos/processes",
                                      json_body={"action": "explode", "names": ["dns"]})
        assert status == 400 and body["error"] == "unknown action 'explode'"
        status, body = await api.post("/api/v1/chaos/processes",
                                      json_body={"action": "freeze", "names": ["gpu/*"]})
        assert status == 400 and body["error"] == "names match no process"
        assert api.audit_lines()[-1]["outcome"] == "rejected: names match no process"
    # The socket is gone now: the API says so.
    async with running_api(tmp_path / "again", valkey.url, prefix, control_socket=sock) as api:
        status, body = await api.get("/api/v1/processes")
        assert status == 502 and "control socket" in body["error"]


async def test_a_silent_revision_swap_is_made_and_undone(tmp_path, valkey, prefix):
    spec = ServerSpec("euw1-a100-a", "127.0.0.1", 0, ("llama-3.1-8b-instruct",),
                      roots=(("llama-3.1-8b-instruct", "/weights/r1"),))
    path = "/api/v1/chaos/gpus/eu-west/euw1-a100-a/root"
    async with Fleet([spec], time_scale=50) as fleet:
        server = fleet["euw1-a100-a"]
        document = with_gpu_url(example_document(), POLICY_URL, server.url)
        async with running_api(tmp_path, valkey.url, prefix, document=document,
                               enable_chaos=True) as api:
            swap = {"model": "llama-3.1-8b-instruct", "root": "/weights/other", "ttl": 0.5}
            status, body = await api.post(path, json_body=swap)
            assert status == 200, body
            assert body["was"] == "/weights/r1" and body["revert_at"] is not None
            assert server.context.roots["llama-3.1-8b-instruct"] == "/weights/other"

            async def reverted() -> bool:
                return server.context.roots["llama-3.1-8b-instruct"] == "/weights/r1"

            await eventually(reverted, timeout=5)  # by the ttl
            status, body = await api.post(path, json_body={**swap, "ttl": 60})
            assert status == 200 and body["was"] == "/weights/r1"
            status, body = await api.post(path, json_body={"model": "llama-3.1-8b-instruct",
                                                           "restore": True})
            assert status == 200 and body["restored"] is True
            assert server.context.roots["llama-3.1-8b-instruct"] == "/weights/r1"
            for bad in ({"root": "/x"}, {"model": "llama-3.1-8b-instruct"},
                        {"model": "nope", "root": "/x"}):
                status, body = await api.post(path, json_body=bad)
                assert status in (400, 422), body
            assert api.audit_lines()[-1]["action"] == "chaos.gpu_root"
