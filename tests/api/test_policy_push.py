"""`director policy push` against a real admin API: it sends If-Match once it knows the
version its file was edited from, so a version stored meanwhile is never overwritten."""

from __future__ import annotations

import asyncio
import shutil

from api_helpers import EXAMPLE, running_api
from typer.testing import CliRunner

from director.cli import app

TTL = "    ttl 60s\n"


def copy_example(directory):
    """The example policy and its includes in ``directory``; the main file's path."""
    shutil.copytree(EXAMPLE.parent, directory, dirs_exist_ok=True)
    return directory / EXAMPLE.name


async def push(*args: str) -> tuple[int, str]:
    result = await asyncio.to_thread(CliRunner().invoke, app, ["policy", "push", *args])
    return result.exit_code, " ".join((result.stdout + result.stderr).split())


async def test_push_sends_if_match_once_it_knows_the_version(tmp_path, valkey, prefix):
    mine = tmp_path / "mine"
    mine.mkdir()
    path = copy_example(mine)
    async with running_api(tmp_path / "api", valkey.url, prefix) as api:
        creds = ("--api", api.url, "--token", api.admin)
        path.write_text(path.read_text().replace(TTL, "    ttl 61s\n", 1))
        status, text = await push(str(path), *creds)  # first push: no version known
        assert status == 0 and "active as version 2" in text, text
        etag = path.with_name(path.name + ".etag").read_text().strip()
        _, now = await api.get("/api/v1/policy", token="read")
        assert now["etag"] == etag and "ttl 61s" in now["text"]

        # someone else stores version 3
        status, body = await api.put("/api/v1/policy",
                                     data=now["text"].replace("ttl 61s", "ttl 62s").encode())
        assert status == 200 and body["version"] == 3

        path.write_text(path.read_text().replace("ttl 61s", "ttl 63s", 1))
        status, text = await push(str(path), *creds)
        assert status == 1 and "version 3 was stored since" in text, text
        _, now = await api.get("/api/v1/policy", token="read")
        assert now["version"] == 3 and "ttl 62s" in now["text"]

        status, text = await push(str(path), *creds, "--if-match", now["etag"])
        assert status == 0 and "active as version 4" in text, text
        status, text = await push(str(path), *creds, "--if-match", "3")
        assert status == 1 and "version 4 was stored since 3" in text, text
        status, text = await push(str(path), *creds, "--force")
        assert status == 0 and "active as version 5" in text, text
