"""Drain and undrain through the API: the state store has the flag, /status shows it, a
ttl undoes it, and every change is in the audit log."""

from __future__ import annotations

import asyncio
import time

from api_helpers import eventually, running_api

from state import StateStore
from state.instances import this_process


def region(status: dict, name: str) -> dict:
    return next(r for r in status["regions"] if r["name"] == name)


async def test_drain_and_undrain_a_region(tmp_path, valkey, prefix):
    store = StateStore.from_url(valkey.url, prefix=prefix)
    async with running_api(tmp_path, valkey.url, prefix) as api:
        status, body = await api.post("/api/v1/regions/eu-central/drain")
        assert status == 200, body
        assert body == {"region": "eu-central", "gpu": None, "draining": True, "until": None,
                        # one server, no replica to wait for: as durable as it can be
                        "durability": {"durable": True, "replicas_acknowledged": 0,
                                       "replicas_wanted": 0, "present": True}}
        assert store.drains().regions == {"eu-central"}

        async def shows(draining: bool) -> bool:
            _, now = await api.get("/api/v1/status", token="read")
            return region(now, "eu-central")["draining"] is draining

        await eventually(lambda: shows(True), timeout=5)
        # Paris is answered by eu-west while eu-central drains (residency keeps it in the EU).
        _, now = await api.get("/api/v1/status", token="read")
        paris = next(s for s in now["samples"] if s["label"] == "Paris, FR"
                     and s["service"] == "chat")
        assert paris["regions"] == ["eu-west"]

        status, body = await api.post("/api/v1/regions/eu-central/undrain")
        assert status == 200 and body["draining"] is False
        assert store.drains().regions == frozenset()
        await eventually(lambda: shows(False), timeout=5)

        _, metrics = await api.get("/metrics", token=None)
        assert ('director_api_requests_total{method="POST",route="/api/v1/regions/{region}/drain",'
                'status="200"} 1.0') in metrics
        assert 'director_api_changes_total{action="drain",outcome="ok"} 1.0' in metrics

        lines = [(a["who"], a["action"], a["target"], a["outcome"]) for a in api.audit_lines()]
        assert lines[-2:] == [("admin", "drain", "region eu-central", "ok"),
                              ("admin", "undrain", "region eu-central", "ok")]
    store.close()


async def test_drain_with_ttl_is_undone_by_itself(tmp_path, valkey, prefix):
    store = StateStore.from_url(valkey.url, prefix=prefix)
    async with running_api(tmp_path, valkey.url, prefix) as api:
        status, body = await api.post("/api/v1/regions/eu-west/drain", json_body={"ttl": 0.5})
        assert status == 200 and body["until"] is not None
        assert store.drains().regions == {"eu-west"}

        async def removed() -> bool:  # the flag itself, not only its end being past
            return not store.client.hgetall(store.keys.drain)

        await eventually(removed, timeout=5)
        assert store.drains().regions == frozenset()

        async def audited() -> bool:  # the audit line follows the store's answer
            return api.audit_lines()[-1]["who"] == "deadman"

        await eventually(audited, timeout=2)
        last = api.audit_lines()[-1]
        assert (last["who"], last["action"], last["target"], last["detail"]) == (
            "deadman", "undrain", "region eu-west", {"reason": "ttl"})

        for bad in ({"ttl": -1}, {"ttl": "soon"}, [1]):
            status, body = await api.post("/api/v1/regions/eu-west/drain", json_body=bad)
            assert status == 422, body
        assert store.drains().regions == frozenset()
    store.close()


async def test_drain_and_undrain_a_gpu_server(tmp_path, valkey, prefix):
    store = StateStore.from_url(valkey.url, prefix=prefix)
    async with running_api(tmp_path, valkey.url, prefix) as api:
        status, body = await api.post("/api/v1/regions/eu-west/gpus/euw1-a100-a/drain")
        assert status == 200, body
        assert store.drains().gpus == {("eu-west", "euw1-a100-a")}
        _, now = await api.get("/api/v1/status")
        gpus = {g["name"]: g["draining"] for g in region(now, "eu-west")["gpus"]}
        assert gpus == {"euw1-h100-a": False, "euw1-a100-a": True}
        assert region(now, "eu-west")["draining"] is False

        status, _ = await api.post("/api/v1/regions/eu-west/gpus/euw1-a100-a/undrain")
        assert status == 200 and store.drains().gpus == frozenset()
    store.close()


async def test_unknown_targets_are_404_and_audited_as_rejected(tmp_path, valkey, prefix):
    async with running_api(tmp_path, valkey.url, prefix) as api:
        status, body = await api.post("/api/v1/regions/eu-wst/drain")
        assert status == 404
        assert body["error"] == ("no region 'eu-wst' in the policy (regions: us-east, eu-west, "
                                 "eu-central, ap-south)")
        status, body = await api.post("/api/v1/regions/eu-west/gpus/nope/drain")
        assert status == 404 and "GPU servers: euw1-h100-a, euw1-a100-a" in body["error"]
        assert api.audit_lines()[-1]["outcome"].startswith("rejected: no GPU server 'nope'")


async def test_a_ttl_drain_ends_when_the_api_that_set_it_is_gone(tmp_path, valkey, prefix):
    """The API stops before the ttl: every reader still sees the drain end on time, and the
    next API to start removes the flag (and says so in the audit log)."""
    store = StateStore.from_url(valkey.url, prefix=prefix)
    # a ttl that outlasts stopping the API on a busy machine (at 1 s the drain was sometimes
    # over before the API had stopped)
    async with running_api(tmp_path, valkey.url, prefix) as api:
        status, body = await api.post("/api/v1/regions/eu-west/drain", json_body={"ttl": 3.0})
        assert status == 200, body
    assert body["until"] > time.time()
    assert store.drains().regions == {"eu-west"}  # the API is gone; the drain is not over
    await asyncio.sleep(max(0.0, body["until"] - time.time()) + 0.05)
    assert store.drains().regions == frozenset()  # over, though the flag is still stored
    assert store.client.hgetall(store.keys.drain)

    async with running_api(tmp_path, valkey.url, prefix) as api:

        async def removed_and_audited() -> bool:
            # the flag goes first, the audit line right after: wait for both
            lines = api.audit_lines()
            return not store.client.hgetall(store.keys.drain) and bool(lines) and \
                lines[-1]["who"] == "deadman"

        await eventually(removed_and_audited, timeout=5)
        last = api.audit_lines()[-1]
        assert (last["who"], last["action"], last["target"]) == (
            "deadman", "undrain", "region eu-west")
    store.close()


async def test_a_starting_api_takes_over_the_ttl_of_a_drain_still_running(
        tmp_path, valkey, prefix):
    store = StateStore.from_url(valkey.url, prefix=prefix)
    # set by an earlier API, with a ttl that outlasts this API's start (about a second on a
    # busy machine: at 1 s the drain was sometimes over before the API was up)
    store.set_drain("eu-west", "gpu-0", until=time.time() + 3.0)
    store.set_drain("eu-central")  # no ttl: stays
    async with running_api(tmp_path, valkey.url, prefix) as api:
        assert store.drains().gpus == {("eu-west", "gpu-0")}

        async def removed() -> bool:
            return store.drains().gpus == frozenset() and not store.client.hget(
                store.keys.drain, "eu-west/gpu-0")

        await eventually(removed, timeout=7)

        async def audited() -> bool:  # the audit line follows the store's answer
            lines = api.audit_lines()
            return bool(lines) and lines[-1]["who"] == "deadman"

        await eventually(audited, timeout=2)
        last = api.audit_lines()[-1]
        assert (last["who"], last["action"], last["target"]) == (
            "deadman", "undrain", "gpu eu-west/gpu-0")
    assert store.drains().regions == {"eu-central"}
    store.close()


async def test_the_status_lists_every_instance_by_its_heartbeat(tmp_path, valkey, prefix):
    """The API's own heartbeat (its refresher's) and a balancer's show in /status."""
    store = StateStore.from_url(valkey.url, prefix=prefix)
    store.heartbeat(this_process("balancer", "127.0.2.1:8080", "eu-west"))
    async with running_api(tmp_path, valkey.url, prefix) as api:
        async def both() -> bool:
            _, now = await api.get("/api/v1/status", token="read")
            return {i["role"] for i in now["instances"] if i["state"] == "up"} == \
                {"api", "balancer"}

        await eventually(both, timeout=10)
        _, now = await api.get("/api/v1/status", token="read")
        balancer = next(i for i in now["instances"] if i["role"] == "balancer")
        assert balancer["region"] == "eu-west" and balancer["address"] == "127.0.2.1:8080"
    store.close()
