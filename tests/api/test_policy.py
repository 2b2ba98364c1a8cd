"""GET/PUT /api/v1/policy: a bad policy (syntax, residency leak) is refused with its position
and the old one keeps serving; a good one is versioned, stored in Redis and on disk, audited,
and followed by every other API instance."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

from api_helpers import eventually, example_document, running_api

from director.api import PolicyDocument
from director.api.policy_store import PolicyHolder
from state import AsyncStateStore, StateStore

AFFINITY = "    affinity subnet\n"
SPILL_MAX = "        max 30%"


def line_col(text: str, marker: str, offset: int = 0) -> tuple[int, int]:
    """1-based line and column of ``marker`` (+ offset characters) in ``text``."""
    index = text.index(marker) + offset
    line = text.count("\n", 0, index) + 1
    return line, index - (text.rfind("\n", 0, index) + 1) + 1


async def test_syntax_error_is_refused_with_its_position_and_the_old_policy_stays(
        tmp_path, valkey, prefix):
    async with running_api(tmp_path, valkey.url, prefix) as api:
        _, before = await api.get("/api/v1/policy", token="read")
        bad = before["text"].replace(AFFINITY, '    affinity subnet "\n')
        status, body = await api.put("/api/v1/policy", data=bad.encode(),
                                     headers={"Content-Type": "text/plain"})
        assert status == 422, body
        line, col = line_col(bad, 'subnet "', len("subnet "))
        where = f"{before['name']}:{line}:{col}"
        assert body["error"].startswith(f"{where}: error: unterminated string"), body["error"]
        assert '^' in body["error"]  # the caret excerpt
        first = body["diagnostics"][0]
        assert (first["file"], first["line"], first["column"]) == (before["name"], line, col)

        status, after = await api.get("/api/v1/policy", token="read")
        assert status == 200 and after == before
        assert api.audit_lines()[-1]["outcome"].startswith("rejected: ")


async def test_residency_leak_is_refused_and_the_old_policy_stays(tmp_path, valkey, prefix):
    async with running_api(tmp_path, valkey.url, prefix) as api:
        _, before = await api.get("/api/v1/policy", token="read")
        leaky = before["text"].replace(SPILL_MAX, SPILL_MAX + "\n        to eu-central us-east",
                                       1)
        assert leaky != before["text"]
        status, body = await api.put("/api/v1/policy", data=leaky.encode())
        assert status == 422, body
        line, col = line_col(leaky, "to eu-central us-east", len("to eu-central "))
        assert body["error"].startswith(f"{before['name']}:{line}:{col}: error: residency: "
                                        "service chat.infer.example.com, rule eu-gdpr"), body
        assert "outside the allowed regions" in body["error"]
        assert body["diagnostics"][0]["line"] == line

        assert await api.get("/api/v1/policy", token="read") == (200, before)
        store = StateStore.from_url(valkey.url, prefix=prefix)
        assert store.policy().version == before["version"]
        assert store.policy().text == before["text"]
        store.close()
        assert not (tmp_path / "policy" / f"{before['version'] + 1}.dp").exists()
        assert not [p for p in (tmp_path / "policy").iterdir() if p.name.startswith(".")]


async def test_good_policy_is_versioned_persisted_and_audited(tmp_path, valkey, prefix):
    async with running_api(tmp_path, valkey.url, prefix) as api:
        _, before = await api.get("/api/v1/policy", token="read")
        assert before["version"] == 1  # Redis held none: the API stored its own
        store = StateStore.from_url(valkey.url, prefix=prefix)
        assert len(store.policy().proofs) == 3  # with its proofs
        store.close()
        good = before["text"].replace(AFFINITY, "    affinity none\n", 1)
        assert good != before["text"]
        status, body = await api.put("/api/v1/policy", data=good.encode())
        assert status == 200, body
        assert body["version"] == 2

        status, now = await api.get("/api/v1/policy", token="read")
        assert (now["version"], now["text"], now["files"]) == (2, good, before["files"])
        store = StateStore.from_url(valkey.url, prefix=prefix)
        record = store.policy()
        store.close()
        assert (record.version, record.text, record.name) == (2, good, before["name"])
        assert dict(record.files) == before["files"]
        # the engine proofs the PUT ran go with it, so followers need not run them again
        document = PolicyDocument(before["name"], good, before["files"])
        assert len(record.proofs) == 3 and record.proofs == document.accept().proofs

        assert (tmp_path / "policy" / "2.dp").read_text() == good
        saved = json.loads((tmp_path / "policy" / "2.json").read_text())
        assert (saved["version"], saved["text"], saved["files"]) == (2, good, before["files"])

        line = api.audit_lines()[-1]
        assert (line["who"], line["action"], line["target"], line["outcome"]) == (
            "admin", "policy.put", "policy", "ok")
        assert line["detail"]["name"] == before["name"] and line["ts"] > 0

        status, services = await api.get("/api/v1/services", token="read")
        chat = next(s for s in services["services"] if s["service"] == "chat")
        assert chat["affinity"] == "none"


async def test_json_body_with_name_and_files(tmp_path, valkey, prefix):
    document = example_document()
    async with running_api(tmp_path, valkey.url, prefix) as api:
        here = str(Path(document.name).parent)  # wherever the checkout is
        files = {name.replace(here, "/srv/policy", 1): text
                 for name, text in document.files.items()}
        body = {"text": document.text, "name": document.name.replace(here, "/srv/policy", 1),
                "files": files}
        status, answer = await api.put("/api/v1/policy", json_body=body)
        assert status == 200, answer
        _, now = await api.get("/api/v1/policy")
        assert now["name"].startswith("/srv") and set(now["files"]) == set(files)

        body["files"] = {}  # the includes are missing now
        status, answer = await api.put("/api/v1/policy", json_body=body)
        assert status == 422
        assert "cannot include 'regions/us-east.dp'" in answer["error"]

        status, answer = await api.put("/api/v1/policy", data=b"{not json",
                                       headers={"Content-Type": "application/json"})
        assert status == 422 and "not valid JSON" in answer["error"]
        assert (await api.get("/api/v1/policy"))[1]["version"] == now["version"]


async def test_another_instance_follows_the_policy_and_skips_a_bad_version(
        tmp_path, valkey, prefix):
    async with running_api(tmp_path / "a", valkey.url, prefix) as a, \
            running_api(tmp_path / "b", valkey.url, prefix) as b:
        _, before = await b.get("/api/v1/policy")
        good = before["text"].replace(AFFINITY, "    affinity none\n", 1)
        assert good != before["text"]
        status, body = await a.put("/api/v1/policy", data=good.encode())
        assert status == 200
        version = body["version"]

        async def b_follows() -> bool:
            _, now = await b.get("/api/v1/policy")
            return now["version"] == version and now["text"] == good

        await eventually(b_follows, timeout=5)

        # A version that does not load (written behind the APIs' backs) is not followed.
        store = StateStore.from_url(valkey.url, prefix=prefix)
        store.set_policy("zone {", name=before["name"], files=before["files"])
        store.close()

        async def failure_counted() -> bool:
            _, text = await b.get("/metrics", token=None)
            return "director_api_policy_reload_failures 1.0" in text

        await eventually(failure_counted, timeout=5)
        for api in (a, b):
            _, now = await api.get("/api/v1/policy")
            assert (now["version"], now["text"]) == (version, good)



async def test_a_record_read_before_a_put_is_never_adopted_after_it(valkey, prefix):
    document = example_document()
    store = StateStore.from_url(valkey.url, prefix=prefix)
    astore = AsyncStateStore.from_url(valkey.url, prefix=prefix)
    holder = PolicyHolder(document, document.load(), store)
    assert await holder.sync(astore.policy) == "published"  # version 1
    reading = asyncio.Event()

    async def slow_read():
        record = await astore.policy()  # version 1, read before the PUT below
        reading.set()
        await asyncio.sleep(0.2)
        return record

    follow = asyncio.create_task(holder.sync(slow_read))
    await reading.wait()
    newer = PolicyDocument(document.name, document.text.replace(AFFINITY, "    affinity none\n"),
                           document.files)
    active = await holder.replace(newer)
    await follow
    assert active.version == 2
    assert (holder.current.version, holder.current.document.text) == (2, newer.text)
    await astore.close()
    store.close()


async def test_put_returns_the_lint_warnings_and_loads_the_policy(tmp_path, valkey, prefix):
    async with running_api(tmp_path, valkey.url, prefix) as api:
        _, before = await api.get("/api/v1/policy", token="read")
        crossing = before["text"].replace("        allow eu-west eu-central\n",
                                          "        allow eu-west eu-central us-east\n", 1)
        assert crossing != before["text"]
        status, body = await api.put("/api/v1/policy", data=crossing.encode())
        assert status == 200, body
        assert body["version"] == before["version"] + 1
        (warning,) = body["warnings"]
        assert warning["severity"] == "warning"
        assert "allows us-east (US), outside the jurisdictions of its clients" in \
            warning["message"]
        assert "cross-border us-east" in warning["text"]


async def test_put_refuses_what_the_engine_run_proof_refuses(tmp_path, valkey, prefix,
                                                             monkeypatch):
    """The PUT path runs the engine half of the proof too (here made to find a leak)."""
    from tests.gate.gate_helpers import leaking_engine_proof

    async with running_api(tmp_path, valkey.url, prefix) as api:
        _, before = await api.get("/api/v1/policy", token="read")
        good = before["text"].replace(AFFINITY, "    affinity none\n", 1)
        monkeypatch.setattr("director.policy_gate.run_engine_proof", leaking_engine_proof)
        status, body = await api.put("/api/v1/policy", data=good.encode())
        assert status == 422, body
        assert "residency violated by the engine" in body["error"]
        assert (await api.get("/api/v1/policy", token="read"))[1]["version"] == \
            before["version"]
