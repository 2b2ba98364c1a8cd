"""Rollouts through the admin API: start, read, pause, resume, abort, clear, each audited;
refusals as 404, 409 and 422; the metrics; and a rollout that outlives the API that
started it: the next API instance judges it and rolls it back."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys

from director.api.config import PolicyDocument
from state import StateStore
from state.outcomes import Outcomes, outcome_field
from tests.api.api_helpers import running_api
from tests.api.test_status_page import chromium, chromium_browser

TEXT = """
zone infer.example.com { ns ns1.infer.example.com 127.0.0.1 }
region eu { location 50 8; jurisdiction EU; endpoints 127.0.0.1; capacity 10rps
    gpu a { url http://127.0.0.1:8000; models m; revision m r1 }
    gpu b { url http://127.0.0.1:8001; models m; revision m r2 }
}
service chat.infer.example.com { all-down answer-nothing }
"""
DOCUMENT = PolicyDocument("rollout.dp", TEXT, {})
SPEC = {"model": "m", "baseline": "r1", "candidate": "r2", "steps": [10, 100],
        "interval_s": 60, "gates": [{"name": "error-rate", "threshold": 0.05,
                                     "min_samples": 20}]}


async def test_rollouts_through_the_api(tmp_path, valkey, prefix) -> None:
    async with running_api(tmp_path, valkey.url, prefix, document=DOCUMENT) as api:
        status, started = await api.post("/api/v1/rollouts", json_body=SPEC)
        assert status == 201, started
        rid = started["id"]
        assert (started["status"], started["percent"], started["spec"]["regions"]) == (
            "running", 10.0, ["eu"])
        assert (await api.get("/api/v1/rollouts", token="read"))[1]["rollouts"][0]["id"] == rid
        assert (await api.post(f"/api/v1/rollouts/{rid}/pause", token="read"))[0] == 403
        assert (await api.post(f"/api/v1/rollouts/{rid}/pause"))[1]["status"] == "paused"
        assert (await api.post(f"/api/v1/rollouts/{rid}/pause"))[0] == 409
        assert (await api.post(f"/api/v1/rollouts/{rid}/resume"))[1]["status"] == "running"
        assert (await api.post("/api/v1/rollouts", json_body=SPEC))[0] == 409  # one a model
        for bad in ({**SPEC, "candidate": "r9"}, {"model": "m"}, [1],
                    {**SPEC, "steps": [50, 10]}):
            status, body = await api.post("/api/v1/rollouts", json_body=bad)
            assert status == 422, body
        assert (await api.get("/api/v1/rollouts/nope", token="read"))[0] == 404
        metrics = await (await api.http.get(api.url + "/metrics")).text()
        assert (f'director_rollout_candidate_percent{{baseline="r1",candidate="r2",model="m",'
                f'rollout="{rid}"}} 10.0') in metrics
        assert (await api.call("DELETE", f"/api/v1/rollouts/{rid}"))[0] == 409
        assert (await api.post(f"/api/v1/rollouts/{rid}/abort"))[1]["status"] == "aborted"
        assert (await api.call("DELETE", f"/api/v1/rollouts/{rid}"))[0] == 200
        actions = [(line["action"], line["outcome"].split(":")[0])
                   for line in api.audit_lines() if line["action"].startswith("rollout")]
        assert actions[:3] == [("rollout.start", "ok"), ("rollout.pause", "ok"),
                               ("rollout.pause", "rejected")]
        assert ("rollout.abort", "ok") in actions and actions[-1] == ("rollout.clear", "ok")


async def test_a_rollout_of_a_chosen_id_is_aborted_and_cleared_in_one_call(
        tmp_path, valkey, prefix) -> None:
    """What a drill does: start a rollout under an id it knows, undo it by that id."""
    async with running_api(tmp_path, valkey.url, prefix, document=DOCUMENT) as api:
        status, started = await api.post("/api/v1/rollouts", json_body={**SPEC, "id": "drill-x"})
        assert status == 201 and started["id"] == "drill-x", started
        status, _ = await api.post("/api/v1/rollouts", json_body={**SPEC, "id": "drill-x"})
        assert status == 409
        for bad in ("no spaces", "", 7):
            status, body = await api.post("/api/v1/rollouts", json_body={**SPEC, "id": bad})
            assert status == 422, body
        assert (await api.call("DELETE", "/api/v1/rollouts/drill-x"))[0] == 409  # running
        status, body = await api.call("DELETE", "/api/v1/rollouts/drill-x?abort=true")
        assert status == 200 and body == {"cleared": "drill-x"}
        assert (await api.get("/api/v1/rollouts/drill-x", token="read"))[0] == 404
        assert (await api.call("DELETE", "/api/v1/rollouts/drill-x?abort=true"))[0] == 404
        actions = [line["action"] for line in api.audit_lines()
                   if line["action"].startswith("rollout")]
        assert actions[-2:] == ["rollout.abort", "rollout.clear"]


async def test_a_rollout_outlives_its_api_and_the_next_one_rolls_it_back(
        tmp_path, valkey, prefix) -> None:
    async with running_api(tmp_path / "first", valkey.url, prefix, document=DOCUMENT) as api:
        status, started = await api.post("/api/v1/rollouts", json_body=SPEC)
        assert status == 201
    # the first API is gone; the balancer goes on counting: the candidate fails
    store = StateStore.from_url(valkey.url, prefix=prefix)
    counts = {"r1": Outcomes(), "r2": Outcomes()}
    for i in range(40):
        counts["r1"].record(ok=True)
        counts["r2"].record(ok=i % 2 != 0)  # half of them errors: beyond doubt
    store.client.hset(store.keys.outcomes("eu"), mapping={
        outcome_field("m", r, "run-1"): o.to_json() for r, o in counts.items()})
    async with running_api(tmp_path / "second", valkey.url, prefix, document=DOCUMENT) as api:
        async def rolled_back() -> bool:
            _, body = await api.get(f"/api/v1/rollouts/{started['id']}", token="read")
            return body["status"] == "rolled-back"

        for _ in range(50):
            if await rolled_back():
                break
            await asyncio.sleep(0.2)
        assert await rolled_back()
        _, body = await api.get(f"/api/v1/rollouts/{started['id']}", token="read")
        assert "error rate 50.00%" in body["reason"]
        split = json.loads(store.client.hget(store.keys.split("eu"), "m"))
        assert split == [["r1", 100.0], ["r2", 0.0]]
        assert any(line["who"] == "controller" and line["action"] == "rollout.rollback"
                   for line in api.audit_lines())
    store.close()


async def test_the_rollout_command(tmp_path, valkey, prefix) -> None:
    async with running_api(tmp_path, valkey.url, prefix, document=DOCUMENT) as api:
        env = {**os.environ, "DIRECTOR_API": api.url, "DIRECTOR_API_TOKEN": api.admin}

        def director(*args: str) -> subprocess.CompletedProcess[str]:
            return subprocess.run([sys.executable, "-m", "director", "rollout", *args],
                                  capture_output=True, text=True, env=env, timeout=60)

        started = await asyncio.to_thread(director, "start", "m", "r1", "r2", "--steps",
                                          "10,100", "--gate", "error-rate=0.05:20")
        assert started.returncode == 0, started.stderr
        rid = started.stdout.split()[0]
        assert "m: r1 -> r2  running at 10 %" in started.stdout
        again = await asyncio.to_thread(director, "start", "m", "r1", "r2")
        assert again.returncode == 1 and "409" in again.stderr
        aborted = await asyncio.to_thread(director, "abort", rid)
        assert aborted.returncode == 0 and "aborted at 0 %" in aborted.stdout
        env["DIRECTOR_API"] = "http://127.0.0.1:9"  # nothing listens there
        gone = await asyncio.to_thread(director, "status")
        assert gone.returncode == 2 and "error:" in gone.stderr


async def test_the_status_page_shows_the_rollouts(tmp_path, valkey, prefix) -> None:
    browser_path = chromium()
    from playwright.async_api import async_playwright

    async with running_api(tmp_path, valkey.url, prefix, document=DOCUMENT) as api, \
            async_playwright() as playwright:
        status, started = await api.post("/api/v1/rollouts", json_body=SPEC)
        assert status == 201
        _, document = await api.get("/api/v1/status", token="read")
        assert [(r["id"], r["status"], r["percent"]) for r in document["rollouts"]] == [
            (started["id"], "running", 10.0)]
        async with chromium_browser(playwright, browser_path) as browser:
            page = await browser.new_page()
            problems: list[str] = []
            page.on("pageerror", lambda exc: problems.append(f"page error: {exc}"))
            await page.goto(f"{api.url}/#token={api.reader}")
            row = page.locator(f'#rollouts tr[data-rollout="{started["id"]}"]')
            await row.wait_for(timeout=10_000)
            cells = (await row.inner_text()).split("\t")
            assert [c.strip() for c in cells[:5]] == [started["id"], "m", "r1 → r2", "running",
                                                      "10 %"]
            assert problems == []
