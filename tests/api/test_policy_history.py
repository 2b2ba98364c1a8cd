"""Policy versions through the admin API: ``If-Match`` on ``PUT`` (412 on a stale version),
``/healthz`` naming the policy served, a restart from the newest version on disk, history
never overwritten, and a store that lost its data given the newest version back."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from api_helpers import eventually, example_document, running_api

from director.api.policy_disk import HistoryConflict, PolicyDisk
from state import EmbeddedValkey, StateStore
from state.policy_identity import policy_digest

TTL = "    ttl 60s\n"


def edited(text: str, n: int) -> str:
    """Another valid policy: a service's answer ttl changed to ``n`` seconds."""
    changed = text.replace(TTL, f"    ttl {n}s\n", 1)
    assert changed != text
    return changed


def disk_files(directory: Path) -> dict[str, str]:
    return {p.name: p.read_text() for p in sorted(directory.iterdir())}


async def test_put_with_if_match_of_a_stale_version_is_refused_412_and_changes_nothing(
        tmp_path, valkey, prefix):
    async with running_api(tmp_path, valkey.url, prefix) as api:
        async with api.http.get(f"{api.url}/api/v1/policy",
                                headers={"Authorization": f"Bearer {api.reader}"}) as resp:
            first = await resp.json()
            assert resp.headers["ETag"] == first["etag"]
        assert first["version"] == 1 and first["etag"] == f'"1-{first["digest"][:16]}"'
        two = edited(first["text"], 11)
        status, body = await api.put("/api/v1/policy", data=two.encode(),
                                     headers={"If-Match": first["etag"]})
        assert status == 200 and body["version"] == 2, body

        # another writer edited version 1 too: it lost the race
        status, body = await api.put("/api/v1/policy", data=edited(first["text"], 12).encode(),
                                     headers={"If-Match": first["etag"]})
        assert status == 412, body
        digest = policy_digest(first["name"], two, first["files"])
        assert body["version"] == 2 and body["etag"] == f'"2-{digest[:16]}"'
        assert "GET /api/v1/policy" in body["error"]
        _, now = await api.get("/api/v1/policy", token="read")
        assert (now["version"], now["text"]) == (2, two)
        store = StateStore.from_url(valkey.url, prefix=prefix)
        record = store.policy()
        store.close()
        assert record is not None and (record.version, record.text) == (2, two)
        assert not (tmp_path / "policy" / "3.json").exists()
        assert not [p for p in (tmp_path / "policy").iterdir() if p.name.startswith(".")]
        assert api.audit_lines()[-1]["outcome"].startswith("rejected: policy: If-Match")

        # the bare version number works too; so do "*" and no header at all (optional)
        status, body = await api.put("/api/v1/policy", data=edited(first["text"], 13).encode(),
                                     headers={"If-Match": "1"})
        assert status == 412
        status, body = await api.put("/api/v1/policy", data=edited(first["text"], 13).encode(),
                                     headers={"If-Match": "2"})
        assert status == 200 and body["version"] == 3
        status, body = await api.put("/api/v1/policy", data=edited(first["text"], 14).encode(),
                                     headers={"If-Match": "*"})
        assert status == 200 and body["version"] == 4
        status, body = await api.put("/api/v1/policy", data=edited(first["text"], 15).encode())
        assert status == 200 and body["version"] == 5
        status, body = await api.put("/api/v1/policy", data=edited(first["text"], 16).encode(),
                                     headers={"If-Match": "latest"})
        assert status == 400 and "If-Match" in body["error"]


async def test_healthz_names_the_policy_served(tmp_path, valkey, prefix):
    async with running_api(tmp_path, valkey.url, prefix) as api:
        _, policy = await api.get("/api/v1/policy", token="read")
        status, health = await api.get("/healthz", token=None)
        assert status == 200 and health["ok"] is True
        assert health["policy"] == {"version": policy["version"], "digest": policy["digest"],
                                    "epoch": policy["epoch"]}
        assert policy["digest"] == policy_digest(policy["name"], policy["text"],
                                                 policy["files"])
        _, metrics = await api.get("/metrics", token=None)
        assert (f'director_policy_info{{component="api",digest="{policy["digest"][:16]}",'
                f'epoch="{policy["epoch"]}",version="{policy["version"]}"}} 1.0') in metrics


async def test_a_restarted_api_starts_from_its_newest_version_and_gives_a_flushed_store_it_back(
        tmp_path, own_valkey: EmbeddedValkey):
    """Versions 1-3 accepted; the state server loses its data while the API is down; the
    API restarts with its original --policy file: it serves version 3 and stores it again
    as version 3 (new epoch), not the file as version 1. Then a writer that knows no history
    stores "version 1" of the old file; the API stores version 3 back above it. The files
    on disk never change."""
    url, prefix = own_valkey.url, "p"
    async with running_api(tmp_path, url, prefix) as api:
        _, first = await api.get("/api/v1/policy", token="read")
        for n in (11, 12):
            status, body = await api.put("/api/v1/policy",
                                         data=edited(first["text"], n).encode())
            assert status == 200
        _, newest = await api.get("/api/v1/policy", token="read")
    assert newest["version"] == 3
    history = disk_files(tmp_path / "policy")
    assert sorted(history) == ["1.dp", "1.json", "2.dp", "2.json", "3.dp", "3.json"]
    store = StateStore.from_url(url, prefix=prefix)
    try:
        store.client.flushall()
        async with running_api(tmp_path, url, prefix,
                               tokens=(api.admin, api.reader)) as api:
            _, now = await api.get("/api/v1/policy", token="read")
            assert (now["version"], now["text"], now["digest"]) == (
                3, newest["text"], newest["digest"])
            assert now["epoch"] and now["epoch"] != newest["epoch"]
            record = store.policy()
            assert record is not None and (record.version, record.digest) == (
                3, newest["digest"])
            _, health = await api.get("/healthz", token=None)
            assert health["policy"]["version"] == 3

            store.client.flushall()
            store.write_policy(first["text"], name=first["name"], files=first["files"])

            async def restored() -> bool:
                held = store.policy()
                return held is not None and held.digest == newest["digest"]

            await eventually(restored, timeout=5)
            held = store.policy()
            assert held is not None and held.version == 3
            _, now = await api.get("/api/v1/policy", token="read")
            assert (now["version"], now["digest"]) == (3, newest["digest"])
            assert disk_files(tmp_path / "policy") == history

            status, body = await api.put("/api/v1/policy",
                                         data=edited(first["text"], 13).encode())
            assert status == 200 and body["version"] == 4
    finally:
        store.close()
    after = disk_files(tmp_path / "policy")
    assert {k: v for k, v in after.items() if k in history} == history
    assert json.loads(after["4.json"])["version"] == 4


def test_a_version_on_disk_is_never_overwritten(tmp_path):
    disk = PolicyDisk(tmp_path)
    disk.commit(disk.prepare("p.dp", "zone a {}", {}), 2)
    kept = disk_files(tmp_path)
    disk.commit(disk.prepare("p.dp", "zone a {}", {}), 2)  # the same sources: nothing to do
    assert disk_files(tmp_path) == kept
    with pytest.raises(HistoryConflict, match="version 2 on disk holds other sources"):
        disk.commit(disk.prepare("p.dp", "zone b {}", {}), 2)
    assert disk_files(tmp_path) == kept  # and no temporary file left behind
    assert disk.highest() == 2 and next(disk.newest()).text == "zone a {}"


def test_the_api_starts_from_the_newest_version_that_still_loads(tmp_path):
    from director.api.policy_start import starting_policy

    document = example_document()
    disk = PolicyDisk(tmp_path)
    disk.commit(disk.prepare(document.name, edited(document.text, 11), document.files), 4)
    disk.commit(disk.prepare(document.name, "zone {", document.files), 5)  # no longer loads
    start = starting_policy(document, disk)
    assert (start.version, start.document.text) == (4, edited(document.text, 11))
    assert starting_policy(document, None).version == 0
    assert starting_policy(document, PolicyDisk(tmp_path / "none")).document == document
