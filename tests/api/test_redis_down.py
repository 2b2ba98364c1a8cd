"""With Redis down the API keeps answering: status from the last known state with
``reachable: false``, 503 with a JSON error for changes, and it recovers when Redis is back."""

from __future__ import annotations

import time

from api_helpers import eventually, running_api

from state import EmbeddedValkey, StateStore


async def test_api_keeps_serving_while_redis_is_down(tmp_path, prefix):
    with EmbeddedValkey() as valkey:
        async with running_api(tmp_path, valkey.url, prefix) as api:
            status, before = await api.get("/api/v1/status")
            assert status == 200 and before["state"]["reachable"] is True
            await api.post("/api/v1/regions/ap-south/drain")
            _, policy = await api.get("/api/v1/policy")

            valkey.stop()
            started = time.monotonic()
            status, now = await api.get("/api/v1/status")
            assert status == 200
            assert now["state"]["reachable"] is False and now["state"]["stale"] is True
            assert time.monotonic() - started < 3.0
            assert [r["name"] for r in now["regions"]] == [r["name"] for r in before["regions"]]
            assert len(now["samples"]) == len(before["samples"])

            status, body = await api.post("/api/v1/regions/eu-west/drain")
            assert status == 503
            assert body["error"].startswith("the shared state is unavailable: ")
            assert body["state"] == {"reachable": False}
            assert api.audit_lines()[-1]["outcome"].startswith("error: ")

            text = policy["text"].replace("    affinity subnet\n", "    affinity none\n", 1)
            status, body = await api.put("/api/v1/policy", data=text.encode())
            assert status == 503
            assert await api.get("/api/v1/policy") == (200, policy)
            assert not (tmp_path / "policy" / "2.dp").exists()

            status, health = await api.get("/healthz", token=None)
            assert status == 200 and health["ok"] is True
            assert health["policy"]["version"] == policy["version"]  # the one it serves
            status, body = await api.get("/api/v1/explain?ecs=2.163.20.0/24&name=chat")
            assert status == 200 and body["regions"] == ["eu-central"]
            status, metrics = await api.get("/metrics", token=None)
            assert status == 200 and "director_state_reachable 0.0" in metrics

            valkey.start()  # same port; the server comes back empty

            async def recovered() -> bool:
                _, now = await api.get("/api/v1/status")
                return now["state"]["reachable"] is True

            await eventually(recovered, timeout=10)
            # An empty Redis gets this instance's policy again, so followers see one.
            async def republished() -> bool:
                store = StateStore.from_url(valkey.url, prefix=prefix)
                try:
                    record = store.policy()
                finally:
                    store.close()
                return record is not None and record.text == policy["text"]

            await eventually(republished, timeout=5)
