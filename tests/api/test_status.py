"""GET /api/v1/status, /services and /explain against the example policy and live state."""

from __future__ import annotations

import time

from api_helpers import eventually, running_api

from state import RegionLoad, StateStore

EU = {"eu-west", "eu-central"}
EU_CITIES = ("Frankfurt, DE", "Paris, FR", "Dublin, IE")


async def test_status_regions_samples_and_shares(tmp_path, valkey, prefix):
    store = StateStore.from_url(valkey.url, prefix=prefix)
    async with running_api(tmp_path, valkey.url, prefix) as api:
        store.write_region_load("us-east", RegionLoad(3, 5, 2.5, 24, 0.42, time.time()))
        store.record_probe("us-east", None, ok=True, rise=1, fall=1)
        store.record_probe("eu-west", "euw1-h100-a", ok=False, rise=1, fall=1)

        async def live() -> bool:
            _, now = await api.get("/api/v1/status", token="read")
            us = next(r for r in now["regions"] if r["name"] == "us-east")
            return us["utilization"] == 0.42 and us["healthy"] is True

        await eventually(live, timeout=5)
        status, now = await api.get("/api/v1/status", token="read")
        assert status == 200
        assert now["policy"]["zone"] == "infer.example.com" and now["policy"]["version"] == 1
        assert now["dns"] == {"listen": ["127.0.0.1:5353"]}
        assert now["state"]["reachable"] is True and now["state"]["snapshot_version"] >= 1
        regions = {r["name"]: r for r in now["regions"]}
        assert list(regions) == ["us-east", "eu-west", "eu-central", "ap-south"]
        assert regions["eu-west"]["balancer"] == "http://127.0.2.1:8080"
        assert regions["eu-west"]["endpoints"] == ["127.0.2.1"]
        assert regions["eu-west"]["degraded"] is True  # one of its two GPU servers is down
        gpus = {g["name"]: g["healthy"] for g in regions["eu-west"]["gpus"]}
        assert gpus == {"euw1-h100-a": False, "euw1-a100-a": None}
        assert abs(sum(r["share"] for r in regions.values()) - 1.0) < 1e-3
        assert now["tenants"]["identity"] is False and now["tenants"]["tenants"] == []

        samples = now["samples"]
        assert len(samples) == 8 * 3  # eight cities, three services
        for sample in samples:
            if sample["label"] in EU_CITIES:
                assert set(sample["regions"]) <= EU, sample
                assert sample["country"] in {"DE", "FR", "IE"}
        chat = {s["label"]: s["regions"] for s in samples if s["service"] == "chat"}
        assert chat["Frankfurt, DE"] == ["eu-central"]
        assert chat["Dublin, IE"] == ["eu-west"]
        assert chat["Mumbai, IN"] == ["ap-south"]
        assert chat["New York, US"] == ["us-east"]
        sovereign = {s["label"]: s["regions"] for s in samples if s["service"] == "sovereign"}
        assert sovereign["Mumbai, IN"] == ["ap-south"]
    store.close()


async def test_explain_returns_the_steps(tmp_path, valkey, prefix):
    async with running_api(tmp_path, valkey.url, prefix) as api:
        status, body = await api.get("/api/v1/explain?ecs=2.2.70.0/24&name=chat", token="read")
        assert status == 200, body
        assert body["name"] == "chat.infer.example.com"
        assert body["regions"] == ["eu-central"] and body["addresses"] == ["127.0.3.1"]
        assert body["rules"] == ["eu-gdpr"] and body["allowed"] == ["eu-west", "eu-central"]
        assert body["client"]["country"] == "FR" and body["client"]["source"] == "ecs"
        stages = [(s["stage"], s["plugin"]) for s in body["steps"]]
        assert stages[:3] == [("locate", "geoip"), ("filter", "residency"), ("filter", "health")]
        assert stages[-1] == ("pick", "top-n")
        residency = body["steps"][1]
        assert residency["dropped"]["us-east"] == "not allowed by residency eu-gdpr"
        assert body["lines"][0].startswith("service chat.infer.example.com: answer eu-central")

        status, body = await api.get(
            "/api/v1/explain?client=81.2.69.142&name=sovereign.infer.example.com.")
        assert status == 200 and body["client"]["source"] == "given"

        status, body = await api.get("/api/v1/explain?name=chat")
        assert status == 422 and "give client=ADDRESS" in body["error"]
        status, body = await api.get("/api/v1/explain?client=nope&name=chat")
        assert status == 422 and "client=nope is not an IP address" in body["error"]
        status, body = await api.get("/api/v1/explain?client=1.2.3.4&name=video")
        assert status == 404 and "services: chat.infer.example.com" in body["error"]
        status, body = await api.get("/api/v1/explain?client=1.2.3.4")
        assert status == 422 and "name" in body["error"]


async def test_services(tmp_path, valkey, prefix):
    async with running_api(tmp_path, valkey.url, prefix) as api:
        status, body = await api.get("/api/v1/services", token="read")
        assert status == 200 and body["zone"] == "infer.example.com"
        by_name = {s["service"]: s for s in body["services"]}
        assert list(by_name) == ["chat", "embed", "sovereign"]
        assert by_name["chat"]["name"] == "chat.infer.example.com"
        assert by_name["chat"]["steering"] == ["latency", "geo"]
        rule = by_name["chat"]["rules"][0]
        assert (rule["name"], rule["allowed"]) == ("eu-gdpr", ["eu-west", "eu-central"])
        assert [r["name"] for r in by_name["sovereign"]["rules"]] == ["eu-gdpr", "india"]


async def test_explain_sends_a_prefix_given_as_client_to_ecs(tmp_path, valkey, prefix):
    async with running_api(tmp_path, valkey.url, prefix) as api:
        status, body = await api.get("/api/v1/explain?client=2.2.2.0/24&name=chat")
        assert status == 422
        assert body["error"] == ("client=2.2.2.0/24 is a prefix, and client= takes one "
                                 "address: pass a prefix as ecs=2.2.2.0/24")
        status, body = await api.get("/api/v1/explain?ecs=2.2.2.300/24&name=chat")
        assert status == 422 and "ecs=2.2.2.300/24 is not a prefix" in body["error"]
        status, body = await api.get("/api/v1/explain?ecs=2.2.2.0/24&name=chat")
        assert status == 200 and body["client"]["source"] == "ecs"
