"""Run the admin API for a test: a real uvicorn server on 127.0.0.1 port 0, in the test's
event loop, with an admin and a read token, spoken to over real HTTP (aiohttp)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import aiohttp

from director.api import ApiConfig, PolicyDocument, build_api
from director.api.auth import add_token
from director.api.server import bind, make_server, url_of

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "policies" / "examples" / "global.dp"


def example_document() -> PolicyDocument:
    return PolicyDocument.from_file(str(EXAMPLE))[0]


def with_gpu_url(document: PolicyDocument, old: str, new: str) -> PolicyDocument:
    """The document with one GPU server URL replaced in whichever file holds it."""
    files = {name: text.replace(old, new) for name, text in document.files.items()}
    return PolicyDocument(document.name, document.text.replace(old, new), files)


@dataclass
class Api:
    url: str
    admin: str
    reader: str
    run_dir: Path
    config: ApiConfig
    http: aiohttp.ClientSession

    async def call(self, method: str, path: str, *, token: str | None = "admin",
                   json_body: Any = None, data: Any = None,
                   headers: dict[str, str] | None = None) -> tuple[int, Any]:
        """Status and decoded JSON (or text) of one request; ``token`` 'admin', 'read',
        None (no header) or a literal token."""
        sent = dict(headers or {})
        if token is not None:
            value = {"admin": self.admin, "read": self.reader}.get(token, token)
            sent["Authorization"] = f"Bearer {value}"
        async with self.http.request(method, self.url + path, json=json_body, data=data,
                                     headers=sent) as resp:
            text = await resp.text()
            try:
                return resp.status, json.loads(text)
            except ValueError:
                return resp.status, text

    async def get(self, path: str, **kwargs: Any) -> tuple[int, Any]:
        return await self.call("GET", path, **kwargs)

    async def post(self, path: str, **kwargs: Any) -> tuple[int, Any]:
        return await self.call("POST", path, **kwargs)

    async def put(self, path: str, **kwargs: Any) -> tuple[int, Any]:
        return await self.call("PUT", path, **kwargs)

    def audit_lines(self) -> list[dict[str, Any]]:
        path = self.config.audit_path
        if path is None or not path.exists():
            return []
        return [json.loads(line) for line in path.read_text().splitlines()]


@contextlib.asynccontextmanager
async def running_api(run_dir: Path, redis_url: str, prefix: str, *,
                      document: PolicyDocument | None = None,
                      tokens: tuple[str, str] | None = None,
                      **overrides: Any) -> AsyncIterator[Api]:
    """The API on 127.0.0.1:0 until the block ends; ``tokens`` reuses (admin, read)."""
    run_dir.mkdir(parents=True, exist_ok=True)
    tokens_path = run_dir / "tokens.json"
    if tokens is None:
        tokens = (add_token(tokens_path, "admin", "admin"),
                  add_token(tokens_path, "reader", "read"))
    config = ApiConfig(
        policy=document or example_document(), redis_url=redis_url, prefix=prefix,
        tokens_path=tokens_path, audit_path=run_dir / "audit.log",
        policy_store=run_dir / "policy", dns_listen=("127.0.0.1:5353",),
        follow_interval=0.2)
    config = replace(config, **overrides)
    app = build_api(config)
    sock = bind("127.0.0.1:0")
    server = make_server(app, log_level="warning")
    task = asyncio.create_task(server.serve(sockets=[sock]))
    try:
        while not server.started:
            if task.done():
                task.result()
                raise RuntimeError("the API server stopped during start-up")
            await asyncio.sleep(0.01)
        async with aiohttp.ClientSession() as http:
            yield Api(url_of(sock), tokens[0], tokens[1], run_dir, config, http)
    finally:
        server.should_exit = True
        await asyncio.wait_for(task, 10)
        sock.close()


async def eventually(check: Callable[[], Awaitable[bool]], timeout: float = 5.0,
                     every: float = 0.05) -> None:
    """Wait until ``await check()`` is true; fail after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        if await check():
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"not true within {timeout}s: {check.__name__}")
        await asyncio.sleep(every)
