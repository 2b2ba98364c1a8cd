"""PUT /api/v1/policy checks a policy within a deadline: one whose proof would take longer
is refused (422) saying so and the last good policy keeps serving; the next PUT goes
through, even one whose includes form a DAG 30 files deep (once expanded once per path)."""

from __future__ import annotations

import re

from api_helpers import running_api

EXTRA_SERVICES = 60  # each a proof of its own: far longer than the deadline on any machine
DEADLINE_S = 2.0
DAG_DEPTH = 30


def _many_services(text: str) -> str:
    """``text`` with the chat service copied under new names: a proof for each."""
    start = text.index("service chat.infer.example.com {")
    end = text.index("\n}\n", start) + 3
    chat = text[start:end]
    copies = [re.sub(r"service chat\.", f"service chat{i}.", chat, count=1)
              for i in range(EXTRA_SERVICES)]
    return text + "\n" + "\n".join(copies)


def _with_dag(name: str, text: str, files: dict[str, str]) -> dict[str, object]:
    """The policy with an include chain ``DAG_DEPTH`` files deep, each file including the
    next twice (2**30 paths), as a PUT body."""
    folder = name.rsplit("/", 1)[0]
    files = dict(files)
    for i in range(DAG_DEPTH):
        files[f"{folder}/dag{i}.dp"] = f'include "dag{i + 1}.dp"\ninclude "dag{i + 1}.dp"\n'
    files[f"{folder}/dag{DAG_DEPTH}.dp"] = "# the end of the chain\n"
    return {"name": name, "text": text + '\ninclude "dag0.dp"\n', "files": files}


async def test_a_check_past_the_deadline_is_refused_the_old_policy_stays_and_the_next_loads(
        tmp_path, valkey, prefix):
    async with running_api(tmp_path, valkey.url, prefix, policy_deadline=DEADLINE_S) as api:
        _, before = await api.get("/api/v1/policy", token="read")
        heavy = _many_services(before["text"])
        status, body = await api.put("/api/v1/policy", data=heavy.encode(),
                                     headers={"Content-Type": "text/plain"})
        assert status == 422, body
        assert (f"checking the policy took longer than its deadline of {DEADLINE_S:g} s"
                in body["error"]), body["error"]
        assert await api.get("/api/v1/policy", token="read") == (200, before)

        # the lock is free again, and a DAG of includes checks at once (the example's
        # proofs are remembered: nothing else in it needs time)
        status, body = await api.put("/api/v1/policy", json_body=_with_dag(
            before["name"], before["text"], before["files"]))
        assert status == 200, body
        assert body["version"] == before["version"] + 1
